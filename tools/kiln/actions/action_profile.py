"""KILN_ACTION_PROFILE=1: where an action's seconds go, on a machine with no debugger.

    kiln build //models:x --action_env=KILN_ACTION_PROFILE=1

Each action that reads a spec (kiln.actions.spec.run) then ends its output with its
cProfile, the top lines by cumulative time, and the wall time of its main: kiln shows
it as the action's output ("INFO: From ..."), here or from a remote worker alike. Made
for the GPU machine, where a build runs in one remote call and an action cannot be
rerun by hand afterwards (its execroot is gone). Printed, not written to a file: a
sandboxed action sees only a private /tmp and its execroot. --action_env joins every
action's key, so a profiled build is a build of its own: nothing it caches is served
to a build without the variable. A number instead of 1: that many lines.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import cProfile  # imported for real only when a profile runs

PROFILE_ENV = "KILN_ACTION_PROFILE"
TOP_LINES = 60


@dataclass
class _Running:
    """The profile running in this process tree, and the pid that started it.

    A child forked while it runs (AotiValidate runs its checks in one) inherits it still
    enabled, and Python allows one profiler at a time: the child stops the inherited one
    and profiles its own main, which it prints to the stdout its parent relays.
    """

    pid: int = 0
    profile: cProfile.Profile | None = None


_running = _Running()


@contextlib.contextmanager
def profiled(name: str) -> Iterator[None]:
    """Profile the body and print the summary to stdout when $KILN_ACTION_PROFILE is set."""
    setting = os.environ.get(PROFILE_ENV, "")
    if setting in ("", "0"):
        yield
        return
    import cProfile
    import pstats

    if _running.profile is not None and _running.pid == os.getpid():
        yield  # nested: the outer profile covers it
        return
    if _running.profile is not None:
        _running.profile.disable()  # a forked child's copy of its parent's profile
    lines = int(setting) if setting.isdigit() and setting != "1" else TOP_LINES
    profile = cProfile.Profile()
    started = time.monotonic()
    profile.enable()
    _running.pid, _running.profile = os.getpid(), profile
    try:
        yield
    finally:
        profile.disable()
        _running.profile = None
        seconds = time.monotonic() - started
        text = io.StringIO()
        text.write(f"kiln-action-profile {name}: {seconds:.3f} s wall in the action's main\n")
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(lines)
        sys.stdout.write(text.getvalue())  # what kiln shows of a success: its stdout
        sys.stdout.flush()
