"""kiln's side of a running action's requests for precompiled headers.

A sandboxed Python action that lacks one of torch's precompiled headers appends a
request (one JSON line) to its requests file and waits for an answer
(actions/header_store.py). While the action runs, kiln watches that file, has the
header maker make each request (Machine.make_header: once a build, however many
actions ask), and answers by creating a file named for the header in the action's
replies folder. The answer says only "done trying": the action then links what the
store holds, which only the maker writes, and makes the header itself if it is not
there.

Both files lie in the action's execroot, which the action may rewrite: the folder
is opened before the action starts and the answers are created through that handle,
without following links, so nothing the action does makes kiln write elsewhere; the
requests are read through a handle opened then too, a bounded amount, and each line
is checked before use (the maker checks it again).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

# Where, in an action's (or the header maker's) .tmp, its requests and the answers lie.
REQUESTS_FILE = "pch-requests.jsonl"
REPLIES_DIR = "pch-replies"
_NAME = re.compile(r"[a-z0-9]{20,80}\.h")  # what inductor names a header (header_maker)
_MOST = 1 << 20  # bytes of requests read from one action: a few hundred bytes a header
_POLL = 0.05  # seconds; the action polls its answer as often (header_store._POLL)


class HeaderRequests:
    """Serves one action's requests while it runs: `with HeaderRequests(...): spawn`."""

    def __init__(
        self, requests: Path, replies: Path, make: Callable[[str], None], poll: float = _POLL
    ) -> None:
        requests.parent.mkdir(parents=True, exist_ok=True)
        replies.mkdir(exist_ok=True)
        flags = os.O_NOFOLLOW | os.O_CLOEXEC
        self._requests = os.open(requests, os.O_RDONLY | os.O_CREAT | flags, 0o644)
        self._replies = os.open(replies, os.O_RDONLY | os.O_DIRECTORY | flags)
        self._make = make
        self._poll = poll
        self._read = b""
        self._served = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kiln-header-requests")

    def __enter__(self) -> HeaderRequests:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        os.close(self._requests)
        os.close(self._replies)

    def _serve(self) -> None:
        while not self._stop.wait(self._poll):
            for line in self._new_lines():
                name = _name(line)
                if name is None:
                    continue
                with contextlib.suppress(Exception):  # not made: the action makes its own
                    self._make(line)
                self._answer(name)

    def _new_lines(self) -> list[str]:
        """The complete lines appended since the last call (a partial one waits)."""
        room = _MOST - len(self._read)
        if room <= 0:
            return []
        try:
            self._read += os.pread(self._requests, room, len(self._read))
        except OSError:
            return []
        complete = self._read.rfind(b"\n") + 1
        lines = self._read[self._served : complete].decode("utf-8", "replace").splitlines()
        self._served = max(self._served, complete)
        return lines

    def _answer(self, name: str) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        with contextlib.suppress(OSError):  # the action removed its folder: not waiting
            os.close(os.open(name, flags, 0o644, dir_fd=self._replies))


def _name(line: str) -> str | None:
    """The header a request line names, if it is a request at all."""
    try:
        request = json.loads(line)
    except ValueError:
        return None
    name = request.get("name") if isinstance(request, dict) else None
    return name if isinstance(name, str) and _NAME.fullmatch(name) else None
