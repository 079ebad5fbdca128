"""What `kiln test` prints at its end, in Bazel's words and columns:

    //models:mlp_accuracy                                           (cached) PASSED in 2.1s
    //tests:flaky                                           FLAKY, failed in 1 out of 2 in 0.4s
    //tests:broken                                                           FAILED in 0.1s
      /ws/kiln-testlogs/tests/broken/test.log
    //tests:needs_gpu                                                     NO STATUS

    Executed 2 out of 4 tests: 2 tests pass, 1 fails locally and 1 was skipped.

The status is right-aligned at column 79 (Bazel's TestSummaryPrinter: the label padded to
78 less the status, a space, the status, then the time).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kiln.cli.test_runs import RunResult

_WIDTH = 78


@dataclass(frozen=True)
class TargetResult:
    """Every run of one test target."""

    label: str
    runs: tuple[RunResult, ...]

    @property
    def status(self) -> str:
        """The target's status over its runs: the worst one."""
        ran = [r.run for r in self.runs if r.run is not None]
        if len(ran) < len(self.runs) or not ran:
            return "NO STATUS"
        for status in ("TIMEOUT", "FAILED", "FLAKY"):
            if any(run.status == status for run in ran):
                return status
        return "PASSED"

    @property
    def cached(self) -> bool:
        return all(r.cached for r in self.runs)

    @property
    def passed(self) -> bool:
        return self.status in ("PASSED", "FLAKY")


def status_line(target: TargetResult) -> str:
    status = target.status
    runs = [r.run for r in target.runs if r.run is not None]
    if status == "NO STATUS":
        message, timing = status, ""
    else:
        if status == "FLAKY":
            flaky = next(run for run in runs if run.status == "FLAKY")
            message = f"FLAKY, failed in {flaky.attempts - 1} out of {flaky.attempts}"
        else:
            message = status
        if target.cached:
            message = f"(cached) {message}"
        timing = f" in {max(run.seconds for run in runs):.1f}s"
    return target.label.ljust(_WIDTH - len(message)) + " " + message + timing


def print_test_summary(
    echo: Callable[[str], None], targets: list[TargetResult], logs: dict[int, Path]
) -> None:
    """The per-target lines (with the logs of failed runs) and the closing count. `logs`:
    the test.log of each run that has one, by id() of its RunResult."""
    for target in targets:
        echo(status_line(target))
        for result in target.runs:
            if result.run is not None and not result.run.passed and id(result) in logs:
                echo(f"  {logs[id(result)]}")
        timed = [r.run.seconds for r in target.runs if r.run is not None]
        if len(target.runs) > 1 and timed:
            deviation = statistics.pstdev(timed)
            echo(
                f"  Stats over {len(target.runs)} runs: max = {max(timed):.1f}s, "
                f"min = {min(timed):.1f}s, avg = {statistics.mean(timed):.1f}s, "
                f"dev = {deviation:.1f}s"
            )
    echo("")
    echo(executed_line(targets))


def executed_line(targets: list[TargetResult]) -> str:
    """Bazel's closing line: 'Executed 1 out of 2 tests: 1 test passes and 1 fails locally.'"""
    executed = sum(1 for t in targets if t.status != "NO STATUS" and not t.cached)
    total = len(targets)
    passing = sum(1 for t in targets if t.passed)
    failing = sum(1 for t in targets if t.status in ("FAILED", "TIMEOUT"))
    skipped = sum(1 for t in targets if t.status == "NO STATUS")
    parts = []
    if passing:
        parts.append(
            f"{passing} test{'s' if passing != 1 else ''} pass{'es' if passing == 1 else ''}"
        )
    if failing:
        parts.append(f"{failing} fail{'s' if failing == 1 else ''} locally")
    if skipped:
        parts.append(f"{skipped} {'was' if skipped == 1 else 'were'} skipped")
    said = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Executed {executed} out of {total} test{'s' if total != 1 else ''}: {said}."
