"""What `kiln build` prints at its end: the action count line and the targets' files.

INFO: 22 actions: 22 cache hits (0 disk, 22 remote), 0 executed, 0 remote cache misses
INFO: 4 actions: 1 cache hits, 3 executed (2 local, 1 worker)
Target //app:c up-to-date:
  kiln-out/app/c.out
INFO: Build completed successfully in 0.42s
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from kiln.action_graph import File
from kiln.exec.outcome import ActionOutcome, Source
from kiln.exec.scheduler import ScheduleResult

# Like Bazel, name the outputs of a few targets, not of every target of //...
SHOWN_TARGETS = 20


def actions_line(outcomes: list[ActionOutcome]) -> str:
    """The summary of where results came from; the disk count includes up-to-date ones."""
    hits = [o for o in outcomes if o.status == "cached"]
    executed = [o for o in outcomes if o.status == "executed"]
    failed = [o for o in outcomes if o.status == "failed"]
    remote_hits = sum(1 for o in hits if o.source is Source.REMOTE_CACHE_HIT)
    remote_misses = sum(1 for o in outcomes if o.remote_miss)
    ran = Counter(o.source_name for o in executed)
    detail = ", ".join(f"{n} {name}" for name, n in sorted(ran.items()))
    return (
        f"INFO: {len(outcomes)} actions: {len(hits)} cache hits"
        + (f" ({len(hits) - remote_hits} disk, {remote_hits} remote)" if remote_hits else "")
        + f", {len(executed)} executed"
        + (f" ({detail})" if detail else "")
        + (f", {remote_misses} remote cache misses" if remote_hits or remote_misses else "")
        + (f", {len(failed)} failed" if failed else "")
    )


def print_summary(
    echo: Callable[[str], None],
    requested: dict[str, tuple[File, ...]],
    result: ScheduleResult,
    seconds: float,
    *,
    workspace_root: Path,
    cwd: Path,
    failed_early: bool = False,
    withdrawn: list[str] | None = None,
) -> None:
    echo(actions_line(result.outcomes))
    if withdrawn:
        echo(f"INFO: {withdrawn_line(withdrawn)}")
    if result.failed or result.skipped or failed_early:
        return
    labels = list(requested)
    for label in labels[:SHOWN_TARGETS]:
        echo(f"Target {label} up-to-date:")
        for file in requested[label]:
            path = workspace_root / file.path
            try:
                shown = path.relative_to(cwd)
            except ValueError:
                shown = path
            echo(f"  {shown}")
    if len(labels) > SHOWN_TARGETS:
        echo(f"  ... and {len(labels) - SHOWN_TARGETS} more targets, all up-to-date")
    echo(f"INFO: Build completed successfully in {seconds:.2f}s")


def withdrawn_line(withdrawn: list[str]) -> str:
    names = ", ".join(withdrawn[:SHOWN_TARGETS])
    extra = len(withdrawn) - SHOWN_TARGETS
    more = f" and {extra} more" if extra > 0 else ""
    return f"not built, so their outputs were removed from kiln-out/: {names}{more}"
