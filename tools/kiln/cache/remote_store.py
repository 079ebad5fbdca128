"""The seam to a remote store: an action cache and a CAS on a server, whatever speaks to it.

kiln's remote cache lookups and uploads (exec/remote_spawn_cache.py), the
remote executor's transfers (remote_exec/spawner.py) and a node's fetches
and uploads (remote_exec/node_runner.py) use only this protocol. The one
implementation today is the HTTP client (cache/remote.py, `http(s)://`);
kiln.remote.stores opens one by --remote_cache's scheme, so a REAPI client
over gRPC is a new module that fits here plus one arm there.

Every failure of the server (down, slow, refusing, answering nonsense) is a
RemoteError, which callers catch to build without the remote.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar

from kiln.cache.action_cache import ActionResult
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest
from kiln.errors import KilnError

T = TypeVar("T")


class RemoteError(KilnError):
    """The remote cache cannot be used: down, slow, refusing, or answering nonsense."""


class RemoteStore(Protocol):
    """One server's action cache and CAS; safe to use from many threads."""

    @property
    def url(self) -> str:
        """Where it is, for messages (without a password)."""
        ...

    def get_action_result(self, key: str) -> ActionResult | None:
        """The result stored under key; None if the server has none (ValueError if the
        server's entry cannot be used)."""
        ...

    def put_action_result(self, key: str, result: ActionResult) -> None: ...

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        """The digests the server lacks (REAPI's FindMissingBlobs)."""
        ...

    def upload(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        """Send a blob of the local CAS (either variant)."""
        ...

    def upload_file(self, digest: Digest, path: Path) -> None:
        """Send the file at path, whose digest the caller knows."""
        ...

    def download(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        """Fetch the blob into cas, verified (BlobMismatch if the bytes are wrong)."""
        ...

    def transfer_many(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """Run the transfers in parallel; all end before the first error (a RemoteError
        first) is raised."""
        ...

    def close(self) -> None:
        """Close connections; the store may be used again after (it reconnects)."""
        ...


def download_outputs(store: RemoteStore, result: ActionResult, cas: ContentStore) -> None:
    """Every blob of a remote action's result into the local CAS, verified as it is
    written; a blob already there (in either variant) is not fetched again."""
    calls: list[Callable[[], None]] = []
    for digest, executable in dict.fromkeys(result.digests()):
        if cas.has(digest, executable):
            continue
        if cas.has(digest, not executable):
            cas.put_file(cas.path(digest, not executable), digest, executable)
        else:
            calls.append(functools.partial(store.download, digest, cas, executable))
    store.transfer_many(calls)


class TransferPool:
    """A store's transfer threads, started on first use: `run` runs calls in parallel and
    lets every one finish before the first error is raised (a RemoteError wins over any
    other: the remote is then unusable)."""

    def __init__(self, jobs: int, name: str) -> None:
        self._jobs, self._name = jobs, name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def run(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        if len(calls) <= 1:
            return [call() for call in calls]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._jobs, thread_name_prefix=self._name)
            pool = self._pool
        futures = [pool.submit(call) for call in calls]
        errors = [e for e in (f.exception() for f in futures) if e is not None]
        if errors:
            raise next((e for e in errors if isinstance(e, RemoteError)), errors[0])
        return [f.result() for f in futures]

    def close(self) -> None:
        """Stop the threads (after their calls); the next `run` starts new ones."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class KnownBlobs:
    """The blobs a remote store holds as far as this process knows, so that a remote
    spawner uploads each input once per build, whichever actions share it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[Digest] = set()

    def upload_missing(self, store: RemoteStore, sources: Iterable[tuple[Digest, Path]]) -> None:
        """Send the files of `sources` (digest, where the bytes are here) the store lacks."""
        with self._lock:
            unknown = {digest: path for digest, path in sources if digest not in self._held}
        missing = store.find_missing(unknown)
        store.transfer_many([functools.partial(store.upload_file, d, unknown[d]) for d in missing])
        self.note(unknown)

    def note(self, digests: Iterable[Digest]) -> None:
        """The store holds these (uploaded, or made there)."""
        with self._lock:
            self._held.update(digests)
