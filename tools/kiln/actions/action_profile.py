"""KILN_ACTION_PROFILE=DIR: where an action's seconds go, on a machine with no debugger.

    kiln build //models:x --action_env=KILN_ACTION_PROFILE=/tmp/profiles

Each action that reads a spec (kiln.actions.spec.run) then leaves, in DIR, its cProfile
(`<Spec>.<pid>.<ms>.prof`, for pstats or snakeviz) and the first lines of it sorted by
cumulative time (`.txt`), with the action's wall time. Made for the GPU machine, where a
build runs in one remote call and an action cannot be rerun by hand afterwards (its
execroot is gone). --action_env joins every action's key, so a profiled build is a build
of its own: nothing it caches is served to a build without the variable.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Iterator
from pathlib import Path

PROFILE_ENV = "KILN_ACTION_PROFILE"
TOP_LINES = 60


@contextlib.contextmanager
def profiled(name: str) -> Iterator[None]:
    """Profile the body into $KILN_ACTION_PROFILE when it is set; otherwise nothing."""
    folder = os.environ.get(PROFILE_ENV, "")
    if not folder:
        yield
        return
    import cProfile
    import pstats

    profile = cProfile.Profile()
    started = time.monotonic()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        seconds = time.monotonic() - started
        stem = Path(folder) / f"{name}.{os.getpid()}.{time.time_ns() // 1_000_000}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(f"{stem}.prof")
        text = io.StringIO()
        text.write(f"{name}: {seconds:.3f} s wall in the action's main\n")
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(TOP_LINES)
        Path(f"{stem}.txt").write_text(text.getvalue(), encoding="utf-8")
