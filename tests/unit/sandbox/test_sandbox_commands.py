"""Local commands in the sandbox: what they see, what they may write, how they end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kiln.sandbox.client import Sandbox, SandboxRun
from kiln.sandbox.view import action_binds

from tests.unit.sandbox.conftest import Layout

ENV = {"PATH": "/usr/bin:/bin"}


@dataclass(frozen=True)
class Ran:
    run: SandboxRun
    out: str
    err: str


def sh(
    sandbox: Sandbox, root: Path, inputs: list[str], script: str, timeout: float | None = None
) -> Ran:
    out, err = root / ".tmp/stdout", root / ".tmp/stderr"
    binds = action_binds(root, inputs)
    run = sandbox.run(["/bin/sh", "-c", script], ENV, root, out, err, binds, timeout)
    read = lambda p: p.read_text() if p.exists() else ""  # noqa: E731
    return Ran(run, read(out), read(err))


def test_a_command_reads_its_inputs_and_writes_its_execroot(
    sandbox: Sandbox, layout: Layout
) -> None:
    root, inputs = layout.execroot("e1", {"pkg/in.txt": "hello\n"})
    ran = sh(sandbox, root, inputs, "cat pkg/in.txt > out.txt; echo done")
    assert (ran.run.exit_code, ran.out) == (0, "done\n"), ran.err
    assert (root / "out.txt").read_text() == "hello\n"


def test_the_workspace_shows_only_the_declared_sources(sandbox: Sandbox, layout: Layout) -> None:
    root, inputs = layout.execroot("e1", {"pkg/in.txt": "x"})
    ran = sh(
        sandbox,
        root,
        inputs,
        f"ls -A {layout.workspace} {layout.workspace}/pkg; cat {layout.workspace}/secret.txt",
    )
    assert ran.out == f"{layout.workspace}:\npkg\n\n{layout.workspace}/pkg:\nin.txt\n"
    assert "secret.txt: No such file or directory" in ran.err


def test_an_input_is_read_only_even_to_root(sandbox: Sandbox, layout: Layout) -> None:
    root, inputs = layout.execroot("e1", {"pkg/in.txt": "source\n"})
    ran = sh(sandbox, root, inputs, "echo x >> pkg/in.txt")
    assert ran.run.exit_code != 0
    assert "pkg/in.txt: Read-only file system" in ran.err
    assert (layout.workspace / "pkg/in.txt").read_text() == "source\n"


def test_tmp_is_private_and_the_shared_state_is_bound_in_it(
    sandbox: Sandbox, layout: Layout
) -> None:
    root, inputs = layout.execroot("e1", {})
    ran = sh(sandbox, root, inputs, "echo s > /tmp/shared/kept; echo p > /tmp/private; ls -A /tmp")
    assert ran.run.exit_code == 0, ran.err
    assert (layout.shared / "kept").read_text() == "s\n"
    assert not Path("/tmp/private").exists()
    again = sh(sandbox, root, inputs, "ls -A /tmp /tmp/shared")
    assert "private" not in again.out and "kept" in again.out


def test_the_host_outside_the_toolchain_is_absent(sandbox: Sandbox, layout: Layout) -> None:
    root, inputs = layout.execroot("e1", {})
    ran = sh(sandbox, root, inputs, f"ls {Path.home()} {layout.base}; echo > /etc/kiln-test")
    assert f"{layout.base}:\nexecroot\n" in ran.out  # the output base: this execroot only
    assert "/etc/kiln-test: Read-only file system" in ran.err
    assert not Path("/etc/kiln-test").exists()


def test_exit_codes_signals_and_missing_programs(sandbox: Sandbox, layout: Layout) -> None:
    root, inputs = layout.execroot("e1", {})
    assert sh(sandbox, root, inputs, "exit 3").run.exit_code == 3
    assert sh(sandbox, root, inputs, "kill -SEGV $$").run.exit_code == -11
    out, err = root / ".tmp/o", root / ".tmp/e"
    missing = sandbox.run(["no-such-program"], ENV, root, out, err, action_binds(root, []), None)
    assert missing == SandboxRun(
        127, missing.seconds, "cannot run no-such-program: No such file or directory"
    )


def test_a_command_past_its_timeout_is_killed_with_what_it_started(
    sandbox: Sandbox, layout: Layout
) -> None:
    root, inputs = layout.execroot("e1", {})
    start = time.monotonic()
    ran = sh(sandbox, root, inputs, "sleep 60 & echo $! > child; wait", timeout=0.5)
    assert ran.run.message == "timed out after 0.5 s"
    assert time.monotonic() - start < 5
    child = int((root / "child").read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text()


# kiln's process as far as local commands go: one sandboxed command that starts a child.
KILN = """
import sys
from pathlib import Path
from kiln.sandbox.client import Sandbox
from kiln.sandbox.view import SandboxConfig, action_binds, toolchain_dirs
root, base, detached = Path(sys.argv[1]), sys.argv[2], sys.argv[3:] == ["detached"]
config = SandboxConfig(toolchain_dirs([base]), (), base + "/sb")
sandbox = Sandbox.start(sys.executable, config, detached=detached)
script = "sleep 60 & echo $$ $! > pids.tmp; mv pids.tmp pids; wait"
out, err = root / ".tmp/stdout", root / ".tmp/stderr"
sandbox.run(["/bin/sh", "-c", script], {"PATH": "/usr/bin:/bin"}, root, out, err,
            action_binds(root, []), None)
"""


def test_kill_9_of_kiln_kills_a_sandboxed_command_and_its_child(layout: Layout) -> None:
    """Issue 11 C4, for local commands: the host's lifeline ends with kiln, and the host
    kills the command's process group before it exits."""
    _kill_9_kills_the_command(layout, detached=False, children_too=False)


def test_a_detached_host_kills_its_command_when_its_starter_and_its_children_die(
    layout: Layout,
) -> None:
    """On a Ray node: a forced ray.cancel kills the Ray worker and its children, the
    sandbox hosts among them, while a command runs in a session of its own. A detached
    host is nobody's child, lives on, sees its lifeline end and kills the command."""
    _kill_9_kills_the_command(layout, detached=True, children_too=True)


def _kill_9_kills_the_command(layout: Layout, *, detached: bool, children_too: bool) -> None:
    root, _ = layout.execroot("e1", {})
    argv = [sys.executable, "-c", KILN, str(root), str(layout.base)]
    kiln = subprocess.Popen([*argv, *(["detached"] if detached else [])])
    started: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not (root / "pids").exists():
            assert time.monotonic() < deadline, "the command never started"
            assert kiln.poll() is None
            time.sleep(0.02)
        started = [int(pid) for pid in (root / "pids").read_text().split()]
        assert all(_running(pid) for pid in started)
        children = _children(kiln.pid) if children_too else []
        kiln.send_signal(signal.SIGKILL)
        for pid in children:  # as Ray kills a cancelled worker's children
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        kiln.wait()
        deadline = time.monotonic() + 60  # a bound for a failing test, not a claim of speed
        while any(_running(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not any(_running(pid) for pid in started)
    finally:
        kiln.kill()
        for pid in started:  # by pid, and only if the test failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _children(parent: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
