"""kiln's header maker makes each precompiled header an action lacks, once a build, while
the action waits for it (Sandboxing.make_header): the action never makes it too.
A fake sandbox stands in for the real one: what is checked is the queue, not the maker
(tests/e2e/test_action_isolation.py runs the real one)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kiln.exec.sandboxing import Sandboxing

from tests.fake_sandboxing import sandboxing_with


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
    return sandboxing_with(tmp_path, sandbox)


REQUEST = '{"header": "h"}'


def test_an_asking_action_waits_for_its_header_and_the_build_end_for_none(
    tmp_path: Path,
) -> None:
    sandbox = _HeldSandbox()
    sandboxing = _sandboxing(tmp_path, sandbox)
    execroot = tmp_path / "execroot" / "a1"
    execroot.mkdir(parents=True)
    asking = threading.Thread(target=sandboxing.make_header, args=(REQUEST, execroot))
    asking.start()
    assert sandbox.started.wait(30)
    asking.join(0.5)
    assert asking.is_alive()  # the action waits while its header is made
    sandbox.release.set()
    asking.join(30)
    assert not asking.is_alive()
    sandboxing.close()
    assert sandbox.requests == [REQUEST + "\n"]
    # the maker read its own copy of the request, in a folder it removed
    assert [p.name for p in (tmp_path / "execroot").iterdir()] == ["a1"]


def test_a_header_is_made_once_a_build_for_every_action_that_asks(tmp_path: Path) -> None:
    sandbox = _HeldSandbox()
    sandboxing = _sandboxing(tmp_path, sandbox)
    execroots = [tmp_path / "execroot" / name for name in ("a1", "a2", "a3")]
    for execroot in execroots:
        execroot.mkdir(parents=True)
    asking = [
        threading.Thread(target=sandboxing.make_header, args=(request, execroot))
        for request, execroot in zip((REQUEST, REQUEST, '{"header": "g"}'), execroots, strict=True)
    ]
    for thread in asking:
        thread.start()
    assert sandbox.started.wait(30)
    sandbox.release.set()
    for thread in asking:
        thread.join(30)
    sandboxing.make_header(REQUEST, execroots[0])  # asked again later: answered at once
    sandboxing.close()
    assert sorted(sandbox.requests) == ['{"header": "g"}\n', REQUEST + "\n"]


def test_after_ctrl_c_no_more_headers_are_made_and_an_asking_action_is_answered(
    tmp_path: Path,
) -> None:
    sandbox = _HeldSandbox()
    sandbox.release.set()
    sandboxing = _sandboxing(tmp_path, sandbox)
    sandboxing.stop_making_headers()
    execroot = tmp_path / "execroot" / "a1"
    execroot.mkdir(parents=True)
    sandboxing.make_header(REQUEST, execroot)
    sandboxing.close()
    assert sandbox.requests == []
