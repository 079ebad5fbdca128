"""kiln's header maker runs beside the build, not in an action's result: an action that
had to make a precompiled header itself is done when it is done, and the maker (5-8 s a
header) publishes it meanwhile; the build waits for it only at its end (Sandboxing).
A fake sandbox stands in for the real one: what is checked is the queue, not the maker
(tests/e2e/test_action_isolation.py runs the real one)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kiln.exec.sandboxing import Sandboxing
from kiln.layout import DiskCache, OutputBase


class _HeldSandbox:
    """Each run waits until released, and records the requests its maker was given."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.requests: list[str] = []

    def run(self, argv: list[str], env: Any, cwd: Path, *rest: Any) -> None:
        self.requests.append(Path(argv[-1]).read_text())
        self.started.set()
        assert self.release.wait(30)

    def close(self) -> None:
        pass


def _sandboxing(tmp_path: Path, sandbox: _HeldSandbox) -> Sandboxing:
    sandboxing = Sandboxing(
        True,
        "python",
        tmp_path,
        (),
        OutputBase(tmp_path / "base"),
        DiskCache(tmp_path / "cache"),
        lambda message: None,
    )
    sandboxing._decided, sandboxing._sandbox = True, sandbox  # type: ignore[assignment]
    return sandboxing


def _requests(execroot: Path, text: str) -> Path:
    (execroot / ".tmp").mkdir(parents=True)
    requests = execroot / ".tmp" / "pch-requests.jsonl"
    requests.write_text(text)
    return requests


def test_the_action_does_not_wait_for_the_maker_and_the_build_end_does(tmp_path: Path) -> None:
    sandbox = _HeldSandbox()
    sandboxing = _sandboxing(tmp_path, sandbox)
    execroot = tmp_path / "execroot" / "a1"
    sandboxing.make_headers(_requests(execroot, '{"header": "h"}\n'), execroot)
    assert sandbox.started.wait(30)  # the maker runs while make_headers has returned
    # the action's execroot may go at once: the maker has the requests in its own folder
    (execroot / ".tmp" / "pch-requests.jsonl").unlink()
    closing = threading.Thread(target=sandboxing.close)
    closing.start()
    closing.join(0.5)
    assert closing.is_alive()  # close() waits for the header being made
    sandbox.release.set()
    closing.join(30)
    assert not closing.is_alive()
    assert sandbox.requests == ['{"header": "h"}\n']
    assert [p.name for p in (tmp_path / "execroot").iterdir()] == ["a1"]  # its folder gone


def test_the_same_requests_are_made_once_a_build(tmp_path: Path) -> None:
    sandbox = _HeldSandbox()
    sandbox.release.set()
    sandboxing = _sandboxing(tmp_path, sandbox)
    for name in ("a1", "a2"):
        execroot = tmp_path / "execroot" / name
        sandboxing.make_headers(_requests(execroot, '{"header": "h"}\n'), execroot)
    other = tmp_path / "execroot" / "a3"
    sandboxing.make_headers(_requests(other, '{"header": "g"}\n'), other)
    sandboxing.close()
    assert sorted(sandbox.requests) == ['{"header": "g"}\n', '{"header": "h"}\n']


def test_after_ctrl_c_no_more_headers_are_made(tmp_path: Path) -> None:
    sandbox = _HeldSandbox()
    sandbox.release.set()
    sandboxing = _sandboxing(tmp_path, sandbox)
    sandboxing.stop_making_headers()
    execroot = tmp_path / "execroot" / "a1"
    sandboxing.make_headers(_requests(execroot, '{"header": "h"}\n'), execroot)
    sandboxing.close()
    assert sandbox.requests == []
