"""One build at a time per workspace; a shared disk cache stays consistent."""

from __future__ import annotations

import time

from tests.kiln_workspace import Workspace

SLOW = 'genrule(name = "slow", outs = ["slow.out"], cmd = "sleep 3; echo done > $@")\n'
FAST = 'genrule(name = "fast", outs = ["fast.out"], cmd = "echo fast > $@")\n'


def _wait_for_lock_holder(ws: Workspace) -> None:
    # The first build holds the lock once its execroot appears.
    deadline = time.monotonic() + 120  # a loaded machine takes seconds to start a build
    while time.monotonic() < deadline:
        if list(ws.disk_cache.rglob("execroot/*")):
            return
        time.sleep(0.05)
    raise AssertionError("first build never started executing")


def test_second_build_fails_fast_with_nolock_wait(ws: Workspace) -> None:
    ws.write("app/BUILD", SLOW + FAST)
    first = ws.kiln_process("build", "//app:slow")
    try:
        _wait_for_lock_holder(ws)
        second = ws.kiln_process("build", "//app:fast", "--nolock_wait")
        _, err = second.communicate(timeout=30)
        assert second.returncode == 1
        assert "holds the workspace lock" in err
    finally:
        first.communicate(timeout=60)
    assert first.returncode == 0


def test_second_build_waits_with_a_message(ws: Workspace) -> None:
    ws.write("app/BUILD", SLOW + FAST)
    first = ws.kiln_process("build", "//app:slow")
    try:
        _wait_for_lock_holder(ws)
        second = ws.kiln_process("build", "//app:fast")
        _, err = second.communicate(timeout=60)
    finally:
        first.communicate(timeout=60)
    assert second.returncode == 0, err
    assert "is running. Waiting for it to finish" in err
    assert ws.out("app/fast.out") == "fast\n"
