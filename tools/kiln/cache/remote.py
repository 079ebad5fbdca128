"""A remote cache spoken to over Bazel's HTTP cache protocol.

    GET, PUT  <base>[/<instance>]/ac/<action key>   a REAPI ActionResult (reapi.py)
    GET, PUT  <base>[/<instance>]/cas/<hash>        the blob's bytes
    HEAD      <base>[/<instance>]/cas/<hash>        does the server have it?

Status codes are read as Bazel's HttpCacheClient reads them: a GET answered
200 carries the content, 404 (or 204, which nginx's WebDAV module can send)
is a miss; a PUT succeeds with 200, 201, 202 or 204. HEAD is kiln's
FindMissingBlobs: 200 with the blob's size as Content-Length means the
server has it and the upload is skipped. Anything else (a refused or reset
connection, a timeout, a 5xx, a 401 for want of the right --remote_header)
is a RemoteError; the executor then builds locally without the remote.

`--remote_instance_name`: Bazel's HTTP client ignores it; kiln makes it a
path segment before `ac/` and `cas/`, so one server keeps several caches
apart. It is the same as adding it to the URL's path.

Transfers stream. A download goes through ContentStore.put_stream, which
hashes the bytes as it writes them to a temp file and publishes the blob
only if it matches its digest (BlobMismatch otherwise), so no multi-GB blob
is ever held in memory and no unverified byte is ever used. An upload sends
Content-Length, then the blob itself with sendfile(). Connections are kept
alive and reused from a pool of idle ones; one the server closed while it
sat idle is retried once on a fresh connection. Blob transfers of one
action run in parallel on a small thread pool (transfer_many).

The empty blob never travels: every REAPI client and server takes it as
present, and it is made locally (and checked against its digest) instead.

Limits (_Pace). `timeout` (--remote_timeout) bounds every wait: connecting,
the response, each read or write, as Bazel's does. And a transfer must keep
up with `min_rate` (--remote_min_rate): its bytes may fall behind that rate
by at most `grace` = min(timeout, 10 s), so N bytes take at most grace + N /
min_rate, and a server trickling a few bytes is given up after seconds, not
minutes. The size of a download is the digest's, which the remote claims:
ContentStore.put_stream also stops at the space its disk can spare.
"""

from __future__ import annotations

import base64
import functools
import http.client
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from kiln.cache.action_cache import ActionResult
from kiln.cache.cas import BlobMismatch, ContentStore
from kiln.cache.digest import Digest
from kiln.cache.reapi import decode_action_result, encode_action_result
from kiln.cache.remote_store import RemoteError, TransferPool

__all__ = ["MIN_RATE", "RemoteCache", "RemoteError", "parse_header"]

T = TypeVar("T")

_PUT_OK = frozenset({200, 201, 202, 204})
_MISS = frozenset({204, 404})
_MAX_ACTION_RESULT = 64 << 20  # an ActionResult names files; it is never this big
_DRAIN = 64 << 10  # read at most this much of an error page to keep a connection
_KEY = re.compile(r"[0-9a-f]{8,128}")
_INSTANCE = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
# Errors of a kept-alive connection that the server closed while it was idle.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
MIN_RATE = 1 << 20  # bytes per second: --remote_min_rate's default
_GRACE_S = 10.0  # how far behind min_rate a transfer may fall (at most --remote_timeout)
_SEND_CHUNK = 8 << 20  # uploads are paced chunk by chunk


def parse_header(text: str) -> tuple[str, str]:
    """`Name=Value` (as --remote_header spells it) -> (name, value); ValueError if malformed."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
        raise ValueError(f"not a header (Name=Value): {text!r}")
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"header value contains a line break: {text!r}")
    return name, value


class RemoteCache:
    """One server's action cache and CAS, over HTTP/1.1, safe to use from many threads:
    the RemoteStore (cache/remote_store.py) of `http://` and `https://`."""

    def __init__(
        self,
        url: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        timeout: float = 60.0,
        instance_name: str = "",
        jobs: int = 8,
        min_rate: int = MIN_RATE,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// URL: {url!r}")
        if parts.query or parts.fragment:
            raise ValueError(f"a remote cache URL has no query or fragment: {url!r}")
        if instance_name and (
            not _INSTANCE.fullmatch(instance_name) or ".." in instance_name.split("/")
        ):
            raise ValueError(f"not an instance name (letters, digits, ._-/): {instance_name!r}")
        try:
            self._port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ValueError(f"bad port in {url!r}") from None
        # Shown in messages: without the password of https://user:password@host.
        self.url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        prefix = parts.path.rstrip("/")
        if instance_name:
            prefix += "/" + instance_name
        self._prefix = prefix
        self._headers = [("User-Agent", "kiln"), *headers]
        if parts.username is not None:  # https://user:password@host, as Bazel accepts
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers.append(("Authorization", f"Basic {token}"))
        if min_rate < 1:
            raise ValueError(f"a minimum rate is at least 1 byte per second, not {min_rate}")
        self.timeout = timeout
        self.min_rate = min_rate
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._transfers = TransferPool(jobs, "kiln-remote")
        self._ssl = ssl.create_default_context() if self._https else None
        # Blobs whose download failed verification: reported missing by find_missing,
        # so that the result built locally overwrites them.
        self._suspect: set[str] = set()

    # -- the protocol -------------------------------------------------------------

    def get_action_result(self, key: str) -> ActionResult | None:
        """The result stored under key; None if the server has none.

        ValueError if the server has an entry kiln cannot use (reapi.py says which).
        """
        data = self._exchange("GET", self._path("ac", key), None, _read_entry)
        return None if data is None else decode_action_result(data)

    def put_action_result(self, key: str, result: ActionResult) -> None:
        data = encode_action_result(result)
        self._exchange("PUT", self._path("ac", key), _Body(len(data), data=data), _check_put)

    def has(self, digest: Digest) -> bool:
        """HEAD: the server has the blob with the right size (and it is not suspect)."""
        if digest.size == 0:
            return True
        if digest.hash in self._suspect:
            return False
        return self._exchange("HEAD", self._path("cas", digest.hash), None, _has(digest))

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        """The digests the server lacks, asked in parallel (REAPI's FindMissingBlobs)."""
        unique = list(dict.fromkeys(digests))
        present = self.transfer_many([functools.partial(self.has, d) for d in unique])
        return [d for d, here in zip(unique, present, strict=True) if not here]

    def download(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        """Fetch the blob into cas, verified; BlobMismatch if the server's bytes are wrong."""
        try:
            if digest.size == 0:
                cas.put_stream(digest, lambda _buffer: 0, executable)
                return
            self._exchange(
                "GET", self._path("cas", digest.hash), None, _store(digest, cas, executable)
            )
        except BlobMismatch:
            with self._lock:
                self._suspect.add(digest.hash)
            raise

    def upload(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        """Send the local blob (either variant) to the server."""
        path = cas.path(digest, executable)
        if not cas.has(digest, executable):
            path = cas.path(digest, not executable)
        self.upload_file(digest, path)

    def upload_file(self, digest: Digest, path: Path) -> None:
        """Send the file at path, whose digest the caller knows (a source, a blob)."""
        if digest.size == 0:
            return
        body = _Body(digest.size, file=str(path))
        self._exchange("PUT", self._path("cas", digest.hash), body, _check_put)
        with self._lock:
            self._suspect.discard(digest.hash)

    def transfer_many(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        return self._transfers.run(calls)

    def __enter__(self) -> RemoteCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close idle connections and stop the transfer threads."""
        with self._lock:
            idle, self._idle = self._idle, []
        self._transfers.close()
        for conn in idle:
            conn.close()

    # -- HTTP ---------------------------------------------------------------------

    def _path(self, kind: str, key: str) -> str:
        if not _KEY.fullmatch(key):
            raise ValueError(f"not a cache key (lowercase hex): {key!r}")
        return f"{urllib.parse.quote(self._prefix)}/{kind}/{key}"

    def _connect(self, fresh: bool = False) -> tuple[http.client.HTTPConnection, bool]:
        """An idle kept-alive connection (True), or a new one (False); `fresh`: a new one,
        and every idle one closed, since they idled as long as the one found stale."""
        with self._lock:
            if fresh:
                stale, self._idle = self._idle, []
                for conn in stale:
                    conn.close()
            elif self._idle:
                return self._idle.pop(), True
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout, context=self._ssl
            ), False
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout), False

    def _exchange(
        self,
        method: str,
        path: str,
        body: _Body | None,
        receive: Callable[[http.client.HTTPResponse, _Pace], T],
    ) -> T:
        """One request and its response, on a pooled connection; RemoteError on failure."""
        where = f"{method} {self._scheme_host()}{path}"
        fresh = False
        for attempt in range(2):
            conn, reused = self._connect(fresh)
            pace = _Pace(conn, self.timeout, self.min_rate)
            try:
                conn.putrequest(method, path, skip_accept_encoding=True)
                for header in self._headers:
                    conn.putheader(*header)
                if body is not None:
                    conn.putheader("Content-Length", str(body.size))
                conn.endheaders()
                if body is not None:
                    body.send(conn, pace)
                pace.waiting(0)
                response = conn.getresponse()
            except _STALE as e:
                conn.close()
                if reused and attempt == 0:
                    # The server closed it while idle (an action longer than its keep-alive,
                    # nginx's 75 s): once more, on a new connection, never on another idle
                    # one, which would be as stale.
                    fresh = True
                    continue
                raise RemoteError(f"{where}: {_describe(e)}") from None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise RemoteError(f"{where}: {_describe(e)}") from None
            try:
                value = receive(response, pace)
            except RemoteError as e:
                conn.close()
                raise RemoteError(f"{where}: {e.message}") from None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise RemoteError(f"{where}: {_describe(e)}") from None
            except BaseException:
                conn.close()
                raise
            if response.isclosed() and not response.will_close:
                with self._lock:
                    self._idle.append(conn)
            else:
                conn.close()
            return value
        raise AssertionError("unreachable")

    def _scheme_host(self) -> str:
        default = 443 if self._https else 80
        port = "" if self._port == default else f":{self._port}"
        return f"{'https' if self._https else 'http'}://{self._host}{port}"


class _Body:
    """A request body of known size: bytes, or a file sent with sendfile()."""

    def __init__(self, size: int, *, data: bytes = b"", file: str = "") -> None:
        self.size = size
        self.data = data
        self.file = file

    def send(self, conn: http.client.HTTPConnection, pace: _Pace) -> None:
        if not self.file:
            pace.waiting(len(self.data))
            conn.send(self.data)
            return
        assert conn.sock is not None  # endheaders() connected it
        sent = 0
        with open(self.file, "rb") as f:
            while sent < self.size:
                count = min(_SEND_CHUNK, self.size - sent)
                pace.waiting(self.size)
                moved = conn.sock.sendfile(f, sent, count)
                if not moved:
                    break
                sent += moved
                pace.moved(moved)
        if sent != self.size:
            raise OSError(f"sent {sent} of {self.size} bytes of {self.file}")


class _Pace:
    """How long one transfer may take (see the module's docstring): each wait at most the
    timeout, and no more than `grace` seconds behind `min_rate`. waiting() sets the socket's
    timeout for the next wait, or gives up with RemoteError."""

    def __init__(self, conn: http.client.HTTPConnection, timeout: float, min_rate: int) -> None:
        self._conn = conn
        self._timeout = timeout
        self._min_rate = min_rate
        self._grace = min(timeout, _GRACE_S)
        self._start = time.monotonic()
        self.done = 0

    def waiting(self, total: int) -> None:
        """Before a read or write of a transfer of `total` bytes (0: a response awaited)."""
        elapsed = time.monotonic() - self._start
        if total == 0:
            allowed = self._timeout
        else:
            allowed = self._grace + self.done / self._min_rate - elapsed
            if allowed <= 0:
                raise RemoteError(
                    f"too slow: {self.done} of {total} bytes in {elapsed:.1f} s (slower than "
                    f"--remote_min_rate={_size(self._min_rate)}/s)"
                )
        if self._conn.sock is not None:
            self._conn.sock.settimeout(min(self._timeout, allowed))

    def moved(self, count: int) -> None:
        self.done += count

    def reader(self, response: http.client.HTTPResponse, total: int) -> Callable[[memoryview], int]:
        """response.readinto, paced: RemoteError once it falls behind."""

        def readinto(view: memoryview) -> int:
            # read1: at most one read of the socket, so the pace is checked before each
            # (readinto fills the whole buffer, however many reads that takes).
            self.waiting(total)
            try:
                data = response.read1(len(view))
            except TimeoutError:
                self.waiting(total)  # past the pace: says so
                raise
            count = len(data)
            view[:count] = data
            self.moved(count)
            if response.length == 0:
                response.read()  # marks the response done: its connection can serve again
            return count

        return readinto


def _size(count: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale}{unit}"
    return str(count)


def _drain(response: http.client.HTTPResponse) -> None:
    """Read a small body whole, so the connection can serve the next request."""
    response.read(_DRAIN)


def _status_error(response: http.client.HTTPResponse) -> RemoteError:
    _drain(response)
    return RemoteError(f"HTTP {response.status} {response.reason}".rstrip())


def _read_entry(response: http.client.HTTPResponse, pace: _Pace) -> bytes | None:
    if response.status in _MISS:
        _drain(response)
        return None
    if response.status != 200:
        raise _status_error(response)
    buffer = bytearray(_MAX_ACTION_RESULT + 1)
    view, size = memoryview(buffer), 0
    readinto = pace.reader(response, int(response.getheader("Content-Length") or 1 << 16))
    while size <= _MAX_ACTION_RESULT and (n := readinto(view[size : size + (1 << 20)])):
        size += n
    if size > _MAX_ACTION_RESULT:
        raise RemoteError(f"action cache entry larger than {_MAX_ACTION_RESULT} bytes")
    return bytes(view[:size])


def _check_put(response: http.client.HTTPResponse, pace: _Pace) -> None:
    if response.status not in _PUT_OK:
        raise _status_error(response)
    _drain(response)


def _has(digest: Digest) -> Callable[[http.client.HTTPResponse, _Pace], bool]:
    def receive(response: http.client.HTTPResponse, pace: _Pace) -> bool:
        response.read()  # no body after HEAD: this marks the response done
        if response.status == 404:
            return False
        if response.status != 200:
            raise RemoteError(f"HTTP {response.status} {response.reason}".rstrip())
        return response.getheader("Content-Length") == str(digest.size)

    return receive


def _store(
    digest: Digest, cas: ContentStore, executable: bool
) -> Callable[[http.client.HTTPResponse, _Pace], None]:
    def receive(response: http.client.HTTPResponse, pace: _Pace) -> None:
        if response.status in _MISS:
            _drain(response)
            raise BlobMismatch(f"blob {digest} is missing on the remote cache")
        if response.status != 200:
            raise _status_error(response)
        length = response.getheader("Content-Length")
        if length is not None and length != str(digest.size):
            # Not read at all: the connection is closed rather than drained.
            raise BlobMismatch(f"{length} bytes where its digest {digest} says {digest.size}")
        cas.put_stream(digest, pace.reader(response, digest.size), executable)

    return receive


def _describe(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, http.client.RemoteDisconnected):
        return "the server closed the connection"
    if isinstance(error, http.client.IncompleteRead):
        return "the connection closed in the middle of the body"
    return str(error) or type(error).__name__
