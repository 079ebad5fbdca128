"""The files a build writes about itself: --build_event_json_file, --profile, --report.

The first two are opened before loading starts, and --report's folder is checked then,
so a path that cannot be written is a one-line error before any work is done, not a
traceback after it. Every build and test also keeps the record of its invocation in
the output base (cli/build_report.py), which --report and `kiln report` render.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from kiln.action_graph import Action
from kiln.errors import KilnError
from kiln.exec.outcome import ActionOutcome
from kiln.exec.scheduler import Reporter

if TYPE_CHECKING:
    from kiln.exec.build_events import BuildEventWriter
    from kiln.exec.profile import ProfileWriter

_Writer = TypeVar("_Writer")


class Phase(NamedTuple):
    name: str  # loading, analysis, execution: lane 0 of the profile
    start: float
    end: float = 0.0  # 0: still running


class Timeline(Reporter):
    """When each action started and ended (time.monotonic()), for the build report."""

    def __init__(self) -> None:
        self._starts: dict[str, float] = {}  # by first output
        self.finished: list[tuple[float, float, ActionOutcome]] = []  # start, end, outcome
        self._lock = threading.Lock()

    def action_started(self, action: Action, lane: str) -> None:
        with self._lock:
            self._starts[action.primary_output.path] = time.monotonic()

    def action_finished(self, outcome: ActionOutcome) -> None:
        end = time.monotonic()
        with self._lock:
            start = self._starts.pop(outcome.action.primary_output.path, end - outcome.seconds)
            self.finished.append((start, end, outcome))


class Reports:
    """The open report files, the phases of the build for the profile, and what the build
    report is made of: the actions' timeline, and what the command sets as it ends
    (`executed`: build.Executed; `tests`: test_summary.TargetResults; the exit code)."""

    def __init__(
        self,
        events: BuildEventWriter | None,
        profile: ProfileWriter | None,
        report: Path | None = None,
    ) -> None:
        self.events = events
        self.profile = profile
        self.report = report  # --report=FILE.html
        self.phases: list[Phase] = []
        self.origin = time.monotonic()
        self.started = time.time()
        self.timeline = Timeline()
        self.executed: Any = None  # build.Executed, once execution ended
        self.tests: list[Any] = []  # test_summary.TargetResult of `kiln test`
        self.exit_code = 1  # until the command returns
        self.error = ""  # the error that ended it

    def phase(self, name: str) -> None:
        """A new phase starts now; the one before ends."""
        now = time.monotonic()
        self._end_last(now)
        self.phases.append(Phase(name, now))

    def close(self) -> None:
        """Write the profile (however far the build came) and close both files."""
        self._end_last(time.monotonic())
        if self.profile is not None:
            for phase in self.phases:
                self.profile.phase(phase.name, phase.start, phase.end)
            self.profile.write()
        if self.events is not None:
            self.events.close()

    def _end_last(self, now: float) -> None:
        if self.phases and not self.phases[-1].end:
            self.phases[-1] = self.phases[-1]._replace(end=now)


def open_reports(
    build_event_json_file: Path | None, profile: Path | None, report: Path | None = None
) -> Reports:
    if report is not None:
        check_writable("report", report)
    events = None
    if build_event_json_file is not None:
        from kiln.exec.build_events import BuildEventWriter

        events = _open("build_event_json_file", build_event_json_file, BuildEventWriter)
    try:
        if profile is None:
            return Reports(events, None, report)
        from kiln.exec.profile import ProfileWriter

        return Reports(events, _open("profile", profile, ProfileWriter), report)
    except BaseException:
        if events is not None:
            events.close()
        raise


def check_writable(flag: str, path: Path) -> None:
    """A file that will be written at the end (--report): its folder exists, and it is no
    folder itself. Nothing is written now: the report is written as the command ends,
    however it ends."""
    if path.is_dir():
        raise KilnError(
            f"--{flag}={path} is a directory",
            hint=f"name a file, e.g. --{flag}={path / 'report.html'}",
        )
    if not path.parent.is_dir():
        raise KilnError(
            f"--{flag}={path}: the folder {path.parent} does not exist",
            hint=f"create it (mkdir -p {path.parent}), or name a file in an existing folder",
        )


def _open(flag: str, path: Path, make: Callable[[Path], _Writer]) -> _Writer:
    try:
        return make(path)
    except IsADirectoryError:
        raise KilnError(
            f"--{flag}={path} is a directory",
            hint=f"name a file, e.g. --{flag}={path / (flag + '.json')}",
        ) from None
    except (FileNotFoundError, NotADirectoryError):
        raise KilnError(
            f"--{flag}={path}: the folder {path.parent} does not exist",
            hint=f"create it (mkdir -p {path.parent}), or name a file in an existing folder",
        ) from None
    except OSError as error:
        raise KilnError(
            f"cannot write --{flag}={path}: {error.strerror}",
            hint="name a file you can write",
        ) from None


class FanOut(Reporter):
    """One reporter that tells several: the status line, build events, the profile."""

    def __init__(self, reporters: list[Reporter]):
        self.reporters = reporters

    def action_started(self, action: Action, lane: str) -> None:
        for reporter in self.reporters:
            reporter.action_started(action, lane)

    def action_finished(self, outcome: ActionOutcome) -> None:
        for reporter in self.reporters:
            reporter.action_finished(outcome)
