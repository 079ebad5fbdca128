"""--profile: a Chrome trace (chrome://tracing, Perfetto) of the build.

Every action is a complete event ("ph": "X") on the lane that ran it: a
scheduler thread for local actions and cache hits, the worker for actions
run in a persistent worker. Phases of the command (loading, analysis,
execution) are events on lane 0.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from kiln.action_graph import Action
from kiln.exec.outcome import ActionOutcome
from kiln.exec.scheduler import Reporter


class ProfileWriter(Reporter):
    def __init__(self, path: Path):
        self.path = path
        # Opened now: a path that cannot be written fails before the build, not after it.
        self._file = path.open("w", encoding="utf-8")
        self.origin = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self.lanes: dict[str, int] = {"main": 0}
        self._starts: dict[str, tuple[float, str]] = {}  # by first output
        self._lock = threading.Lock()

    def _us(self, t: float) -> int:
        return int((t - self.origin) * 1e6)

    def _lane_id(self, lane: str) -> int:
        if lane not in self.lanes:
            self.lanes[lane] = len(self.lanes)
        return self.lanes[lane]

    def phase(self, name: str, start: float, end: float) -> None:
        with self._lock:
            self.events.append(
                {
                    "name": name,
                    "cat": "phase",
                    "ph": "X",
                    "pid": 1,
                    "tid": 0,
                    "ts": self._us(start),
                    "dur": max(1, self._us(end) - self._us(start)),
                }
            )

    def action_started(self, action: Action, lane: str) -> None:
        with self._lock:
            self._starts[action.primary_output.path] = (time.monotonic(), lane)

    def action_finished(self, outcome: ActionOutcome) -> None:
        end = time.monotonic()
        with self._lock:
            start, lane = self._starts.pop(outcome.action.primary_output.path, (end, outcome.lane))
            lane = outcome.lane or lane
            self.events.append(
                {
                    "name": f"{outcome.action.mnemonic} {outcome.action.owner}",
                    "cat": outcome.status,
                    "ph": "X",
                    "pid": 1,
                    "tid": self._lane_id(lane),
                    "ts": self._us(start),
                    "dur": max(1, self._us(end) - self._us(start)),
                    "args": {
                        "status": outcome.status,
                        "key": outcome.key,
                        "strategy": outcome.source_name,
                    },
                }
            )

    def write(self) -> None:
        names = [
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": lane}}
            for lane, tid in self.lanes.items()
        ]
        process = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "kiln build"}}]
        with self._file:
            json.dump(
                {"traceEvents": process + names + self.events, "displayTimeUnit": "ms"}, self._file
            )
