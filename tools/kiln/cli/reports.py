"""The files a build writes about itself: --build_event_json_file and --profile.

Both are opened before loading starts, so a path that cannot be written is
a one-line error before any work is done, not a traceback after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

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


class Reports:
    """The open report files, and the phases of the build for the profile."""

    def __init__(self, events: BuildEventWriter | None, profile: ProfileWriter | None) -> None:
        self.events = events
        self.profile = profile
        self.phases: list[Phase] = []

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


def open_reports(build_event_json_file: Path | None, profile: Path | None) -> Reports:
    events = None
    if build_event_json_file is not None:
        from kiln.exec.build_events import BuildEventWriter

        events = _open("build_event_json_file", build_event_json_file, BuildEventWriter)
    try:
        if profile is None:
            return Reports(events, None)
        from kiln.exec.profile import ProfileWriter

        return Reports(events, _open("profile", profile, ProfileWriter))
    except BaseException:
        if events is not None:
            events.close()
        raise


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
