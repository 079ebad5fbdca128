"""The suite ends with nothing of its own still running.

Every server a test starts (nginx, BuildGrid, PostgreSQL, a Ray cluster, Bazel's
server, Chromium) is stopped by its PID, and every process kiln starts (workers,
sandboxes, actions) dies with the kiln that started it. A process that outlives its
test holds ports, files and memory of the next suite on the machine, and says that
something kiln or a fixture starts can escape. So at the end of the session (in the
xdist controller, once its workers are gone) this plugin looks for processes the
tests started and fails the run if any is still there after a grace period, naming
each with the test it came from; then it kills them.

A process belongs to this run when what it was started with points into the run's
temporary folder (pytest's basetemp): every test runs with HOME and XDG_CACHE_HOME
there (conftest.py), which its children inherit, and the servers' configurations and
data live there. Another suite running beside this one has its own basetemp, so its
processes are never counted. (Matching the checkout's virtualenv as well would not
be: a pytest run inside a test, as this plugin's own test does, shares it with the
suite around it, and would count, and kill, the suite's kiln workers.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from kiln import process_tree

# Processes that learn their parent died through a pipe's end of file (kiln's workers'
# lifeline) exit a moment after it; a loaded machine makes that moment longer. The
# plugin's own test sets a short one.
GRACE_S = float(os.environ.get("KILN_TEST_LEFTOVER_GRACE_S", "60"))


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str
    test: str  # PYTEST_CURRENT_TEST as the process inherited it; "" if unknown


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""  # gone meanwhile, or not ours to read


def _ancestors(pid: int, parents: dict[int, int]) -> set[int]:
    found = set()
    while pid > 1 and pid not in found:
        found.add(pid)
        pid = parents.get(pid, 0)
    return found


def leftovers(basetemp: Path) -> list[Leftover]:
    """The processes that belong to a run whose temporary folder is `basetemp`, but for
    this process and its ancestors. (xdist's workers were started before any test, so
    nothing of theirs points into basetemp.)"""
    table = process_tree.processes()
    mine = _ancestors(os.getpid(), {pid: ppid for pid, ppid, _ in table})
    # With the separator: another suite's pytest-30 is not inside this one's pytest-3.
    temp = os.fsencode(basetemp) + b"/"
    found = []
    for pid, _, state in table:
        if pid in mine or state == b"Z":  # a zombie has exited; init reaps it
            continue
        proc = Path(f"/proc/{pid}")
        argv = _read(proc / "cmdline").split(b"\0")
        environ = dict(
            entry.split(b"=", 1) for entry in _read(proc / "environ").split(b"\0") if b"=" in entry
        )
        cwd = b""
        with contextlib.suppress(OSError):
            cwd = os.fsencode(os.readlink(proc / "cwd"))
        started_here = any(temp in part + b"/" for part in (*argv, cwd)) or any(
            (environ.get(name, b"") + b"/").startswith(temp)
            for name in (b"HOME", b"XDG_CACHE_HOME")
        )
        if started_here:
            command = b" ".join(argv).decode(errors="replace").strip()
            test = environ.get(b"PYTEST_CURRENT_TEST", b"").decode(errors="replace")
            found.append(Leftover(pid, command, test))
    return found


def wait_for_leftovers(basetemp: Path, grace_s: float) -> list[Leftover]:
    """Leftovers still there after `grace_s`; [] as soon as none is."""
    deadline = time.monotonic() + grace_s
    while (found := leftovers(basetemp)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


@pytest.hookimpl(trylast=True)  # after xdist has stopped its workers
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller looks once they are all done
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or getattr(factory, "_basetemp", None) is None:
        return  # no test made a temporary folder, so none started anything there
    found = wait_for_leftovers(factory.getbasetemp(), GRACE_S)
    if not found:
        return
    for leftover in found:
        with contextlib.suppress(OSError):
            os.kill(leftover.pid, signal.SIGKILL)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(found)} process(es) outlived the tests (killed now):"]
    lines += [f"  {p.pid} from {p.test or 'an unknown test'}: {p.command[:300]}" for p in found]
    if reporter is not None:
        reporter.write_sep("=", "leftover processes", red=True)
        for line in lines:
            reporter.write_line(line)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
