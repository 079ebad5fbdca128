"""--build_event_json_file: one JSON object per line, for CI systems.

Events: build_started, target_started, action_finished (executed, cached or
failed, with timings; `cache` names the cache that hit: up-to-date, disk or
remote; `remote_cache` is hit or miss where the remote cache was asked; `gpus` the ids of
the GPUs it ran on here, as its CUDA_VISIBLE_DEVICES named them),
target_finished, build_finished. Each line is written
and flushed whole, so a reader tailing the file never sees half an event.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from kiln.action_graph import Action
from kiln.exec.outcome import ActionOutcome
from kiln.exec.scheduler import Reporter


class BuildEventWriter(Reporter):
    def __init__(self, path: Path):
        self._file: TextIO = path.open("w", encoding="utf-8")
        self._lock = threading.Lock()
        self._start = time.time()

    def emit(self, kind: str, **fields: Any) -> None:
        event = {"type": kind, "time_ms": int(time.time() * 1000), **fields}
        with self._lock:
            self._file.write(json.dumps(event, sort_keys=True) + "\n")
            self._file.flush()

    def action_started(self, action: Action, lane: str) -> None:
        self.emit("action_started", label=action.owner, mnemonic=action.mnemonic, lane=lane)

    def action_finished(self, outcome: ActionOutcome) -> None:
        self.emit(
            "action_finished",
            label=outcome.action.owner,
            mnemonic=outcome.action.mnemonic,
            status=outcome.status,
            cache_hit=outcome.status == "cached",
            cache=outcome.source_name if outcome.status == "cached" else None,
            remote_cache=outcome.remote or None,  # hit, miss; null: not asked
            strategy=outcome.source_name,
            key=outcome.key,
            seconds=round(outcome.seconds, 6),
            lane=outcome.lane,
            outputs=[f.path for f in outcome.action.outputs],
            failure=outcome.failure.message if outcome.failure else None,
            gpus=list(outcome.gpus),
        )

    def close(self) -> None:
        with self._lock:
            self._file.close()
