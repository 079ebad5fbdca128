"""A real nginx WebDAV server as a remote cache, for the tests (tools/nginx_cache.sh).

`NginxCache.start(directory, token=...)` installs Debian's nginx if it is
missing, starts it in the foreground on a free loopback port, and waits
until it answers; stop() ends it. The blobs it stores are plain files under
`root`, so a test can tamper with one or count them.
"""

from __future__ import annotations

import contextlib
import http.client
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.loopback_ports import free_port, owns_port

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "nginx_cache.sh"


def ensure_nginx() -> None:
    """Install nginx through the project's script if it is missing; fail the test if it can't."""
    run = subprocess.run(
        ["bash", str(SCRIPT), "install"], capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        pytest.fail(f"cannot install nginx for the remote cache tests:\n{run.stderr}")


@dataclass
class NginxCache:
    directory: Path
    port: int
    token: str
    process: subprocess.Popen[bytes] | None = None
    keepalive: int = 75  # seconds nginx keeps an idle connection (its default)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def root(self) -> Path:
        """Where nginx keeps what was PUT: root/ac/<key>, root/cas/<hash>."""
        return self.directory / "root"

    @staticmethod
    def start(directory: Path, token: str = "", port: int = 0, keepalive: int = 75) -> NginxCache:
        ensure_nginx()
        directory.mkdir(parents=True, exist_ok=True)
        for _ in range(5):  # another process may take the free port first
            server = NginxCache(directory, port or free_port(), token, keepalive=keepalive)
            server.process = subprocess.Popen(
                [
                    "bash",
                    str(SCRIPT),
                    "serve",
                    str(directory),
                    str(server.port),
                    token,
                    str(keepalive),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # nginx logs to error.log
            )
            if server._wait_ready():
                return server
            server.stop()
        log = (directory / "error.log").read_text(errors="replace")
        raise RuntimeError(f"nginx did not start:\n{log}")

    def _wait_ready(self, seconds: float = 10.0) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if not owns_port(self.process.pid, self.port):  # not yet, or another's server
                time.sleep(0.05)
                continue
            with contextlib.suppress(OSError):
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                try:
                    conn.request("HEAD", "/")
                    conn.getresponse()
                    return True
                finally:
                    conn.close()
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()  # nginx: fast shutdown, workers included
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        """Start again on the same port, with the same content."""
        self.stop()
        started = NginxCache.start(self.directory, self.token, self.port, self.keepalive)
        self.process = started.process

    def log(self) -> list[tuple[str, str, int]]:
        """(connection id, request line, status) of every request so far, oldest first."""
        try:
            lines = (self.directory / "access.log").read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            head, request, tail = line.split('"', 2)
            out.append((head.split()[0], request, int(tail.split()[0])))
        return out

    def wait_for_log(self, condition: Callable[[NginxCache], bool], seconds: float = 60.0) -> None:
        """Until `condition(self)` holds (or `seconds` pass; the caller's assertion then
        says what the log holds): nginx writes a request's line after it has answered it,
        so a client can be done before the log is, by however long a loaded machine takes."""
        deadline = time.monotonic() + seconds
        while not condition(self) and time.monotonic() < deadline:
            time.sleep(0.02)

    def requests(self, method: str = "") -> list[str]:
        """'GET /cas/<hash> 200' for each request so far (of one method, if given)."""
        return [
            f"{request.rsplit(' ', 1)[0]} {status}"
            for _, request, status in self.log()
            if request.startswith(method)
        ]

    def clear_log(self) -> None:
        (self.directory / "access.log").write_text("")


@contextlib.contextmanager
def nginx_cache(directory: Path, token: str = "", keepalive: int = 75) -> Iterator[NginxCache]:
    server = NginxCache.start(directory, token, keepalive=keepalive)
    try:
        yield server
    finally:
        server.stop()
