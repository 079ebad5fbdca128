"""A loopback HTTP server that misbehaves on purpose, for the remote cache's failure paths.

Modes:
    "500"          every request is answered 500 Internal Server Error
    "hang"         requests are read and never answered (a slow server)
    "drop-idle"    every request is answered 404 without `Connection: close`, then the
                   connection is closed: the client's kept-alive connection is stale
                   when it next uses it
    "blob:<hex>"   GET answers 200 with the given bytes (hex), anything else 404
    "trickle:<hex>:<seconds>"  GET answers 200 with those bytes, one every <seconds>
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        del format, args

    def _answer(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        self.server.headers.append(dict(self.headers))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        mode = self.server.mode
        if mode == "hang":
            self.server.release.wait(30)
            self.close_connection = True
            return
        if mode == "500":
            self._send(500, b"boom")
        elif mode == "drop-idle":
            self._send(404, b"")
            self.close_connection = True
        elif mode.startswith("blob:") and self.command == "GET":
            self._send(200, bytes.fromhex(mode[5:]))
        elif mode.startswith("trickle:") and self.command == "GET":
            data, delay = mode[8:].split(":")
            body = bytes.fromhex(data)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    if self.server.release.wait(float(delay)):
                        return
            time.sleep(0)
        else:
            self._send(404, b"")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = _answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = mode
        self.requests: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextlib.contextmanager
def fake_http_cache(mode: str) -> Iterator[_Server]:
    server = _Server(mode)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
