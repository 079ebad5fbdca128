"""What an action leaves running, found and killed: daemons in sessions of their own too.

    process_tree.become_subreaper()      # once, in the process that runs actions
    ... an action runs in a child, ends ...
    process_tree.kill_descendants()      # everything it left behind, however detached

Killing an action's process group misses what left the group: a genrule's
`setsid daemon &` runs on after the build, and rewrites a later action's
output (issue 20). So a process that runs actions (a persistent worker, the
sandbox's host, a node's supervisor) becomes a child subreaper
(PR_SET_CHILD_SUBREAPER, Linux 3.4): a process orphaned below it becomes its
child instead of init's, so after an action every process still below it is
the action's leftover, whatever session or group it put itself in; they are
found by their parent links in /proc and killed until none is left. A cgroup
would hold them as well, but needs a delegated cgroup tree, which an
unprivileged user has on few machines (not on the build machines).

A leaf: the worker, the sandbox host and the node's supervisor use it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import time
from collections.abc import Collection, Sequence
from typing import NoReturn

_PR_SET_CHILD_SUBREAPER = 36
# Rounds of scan-and-kill: a leftover forking while it is killed shows up in the next.
_ROUNDS = 100


def become_subreaper() -> bool:
    """Make orphans below this process its children; False where the kernel cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int, *, keep: Collection[int] = ()) -> list[int]:
    """The live processes below `root` (by parent links), but none in or under `keep`."""
    children: dict[int, list[int]] = {}
    for pid, ppid, state in processes():
        if state != b"Z":
            children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = [p for p in children.get(root, []) if p not in keep]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(p for p in children.get(pid, []) if p not in keep)
    return found


def kill_descendants(*, keep: Collection[int] = ()) -> int:
    """SIGKILL every process below this one (except `keep` and what is under them) and reap
    this process's own; the number of processes killed."""
    me = os.getpid()
    killed: set[int] = set()
    for _ in range(_ROUNDS):
        found = descendants(me, keep=keep)
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed.update(found)
        if not found and not _reap_children(keep):
            break
        time.sleep(0.001)  # a SIGKILLed process takes a moment to become a zombie
    return len(killed)


def _reap_children(keep: Collection[int]) -> bool:
    """Reap this process's dead children but `keep`; whether any child (but `keep`) was left
    to reap or still runs."""
    me = os.getpid()
    left = False
    for pid, ppid, _ in processes():
        if ppid == me and pid not in keep:
            left = True
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    return left


def processes() -> list[tuple[int, int, bytes]]:
    """(pid, parent pid, state) of every process this one can see."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        found.append((int(name), int(fields[1]), fields[0]))  # after the name: state, ppid
    return found


# `python -I -S -c SUPERVISE kiln_parent argv...`: a command under a subreaper of its own,
# for a process that cannot be one itself (kiln, running many actions at once: an orphan
# would not say whose it was). Isolated and without site: a few milliseconds of start.
SUPERVISE = """
import sys
sys.path.insert(0, sys.argv[1])
from kiln import process_tree
process_tree.supervise(sys.argv[2:])
"""


def supervisor_argv(python: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs `argv` under supervise() with interpreter `python`."""
    kiln_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [python, "-I", "-S", "-c", SUPERVISE, kiln_parent, *argv]


def supervise(argv: Sequence[str]) -> NoReturn:
    """Run argv as this process's child; when it ends, kill whatever it left below this
    process, and end as it ended (its exit status, or its signal)."""
    become_subreaper()
    try:
        # Python ignores SIGPIPE: the command gets the defaults a shell's child gets.
        defaults = (signal.SIGPIPE, signal.SIGXFSZ)
        pid = os.posix_spawnp(argv[0], list(argv), dict(os.environ), setsigdef=defaults)
    except OSError as error:
        print(f"cannot run {argv[0]}: {error.strerror}", file=sys.stderr)
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    kill_descendants()
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the command dumped its own core
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 1)
