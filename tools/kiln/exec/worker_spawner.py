"""Running `python -m module` commands in persistent workers (kiln.workers).

The pool starts on the first request. Settings the interpreter reads only at
start-up (PYTHONHASHSEED, the locale, ...) come from the environment of that
first request: the workers' actions share them, as their keys say.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from kiln.exec.outcome import Source
from kiln.exec.spawn import SpawnRequest, SpawnResult

if TYPE_CHECKING:
    from kiln.workers.pool import WorkerPool


class WorkerSpawner:
    def __init__(self, python: str, max_instances: int, preload: tuple[str, ...]) -> None:
        self._python = python
        self._max_instances = max_instances
        self._preload = preload
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()
        self._cancelled = False

    def spawn(self, request: SpawnRequest) -> SpawnResult:
        from kiln.workers.protocol import WorkRequest

        if self._cancelled:
            return SpawnResult(-1, 0.0, Source.RAN_IN_WORKER, crashed=True, message="interrupted")
        work = WorkRequest(
            request.argv,
            dict(request.env),
            str(request.execroot),
            str(request.stdout),
            str(request.stderr),
            request.timeout,
        )
        pool = self._worker_pool(request)
        start = time.monotonic()
        response = pool.run(work)
        return SpawnResult(
            response.exit_code,
            time.monotonic() - start,
            Source.RAN_IN_WORKER,
            lane=response.worker_id,
            crashed=response.crashed,
            message=response.message,
        )

    def _worker_pool(self, request: SpawnRequest) -> WorkerPool:
        with self._lock:
            if self._pool is None:
                from kiln.workers.pool import WorkerPool

                self._pool = WorkerPool(
                    self._python,
                    self._max_instances,
                    preload=self._preload,
                    base_env={k: v for k, v in request.env.items() if k != "TMPDIR"},
                )
            return self._pool

    def cancel_all(self) -> None:
        self._cancelled = True
        if self._pool is not None:
            self._pool.kill_all()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
