"""Running `python -m module` commands in persistent workers (kiln.workers).

One pool per interpreter, that is per Python environment (kiln.pyenv: the
executor puts the environment's interpreter in argv[0]), so actions of targets
with different packages never share a worker; each pool starts on its first
request and holds up to `max_instances` workers. Settings the interpreter reads
only at start-up (PYTHONHASHSEED, the locale, ...) come from the environment of
that first request: the workers' actions share them, as their keys say.
Lanes: the first environment's workers are worker-1.., the next env2-worker-1..

A worker is bound to the GPUs it started with: CUDA reads CUDA_VISIBLE_DEVICES
once, when a process first uses it, so a worker that ran a GPU action would
keep those GPUs for every later one. Pools are therefore keyed by the GPU ids
of the request too (gpu_pool.cuda_env): a worker never serves an action holding
other GPUs, and a CPU action (CUDA_VISIBLE_DEVICES empty) only ever runs in a
worker that could see none. A GPU pool holds one worker (its ids are held by
one action at a time) and lives until an action holding any of its GPUs comes
for another pool: then it is stopped, idle, so each GPU has at most one worker
and the count stays bounded (CPU pools + one per GPU) on an 8-GPU host.
GPU workers' lanes are gpu1-worker-1.., gpu2-worker-1.. in order of first use.
With a sandbox, each worker starts in a sandbox of its own (kiln.sandbox.host), and
each request carries the binds of its action's view: its execroot and inputs.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from kiln.exec.gpu_pool import CUDA_VISIBLE_DEVICES
from kiln.exec.outcome import Source
from kiln.exec.spawn import SpawnRequest, SpawnResult, resolve_argv

if TYPE_CHECKING:
    from kiln.sandbox.client import Sandbox
    from kiln.workers.pool import WorkerPool


class WorkerSpawner:
    def __init__(
        self,
        python: str,
        max_instances: int,
        preload: tuple[str, ...],
        sandbox: Sandbox | None = None,
    ) -> None:
        self._python = python
        self._sandbox = sandbox
        self._max_instances = max_instances
        self._preload = preload
        self._pools: dict[tuple[str, str | None], WorkerPool] = {}  # by interpreter, GPUs
        self._busy: dict[tuple[str, str | None], int] = {}  # run() calls in each pool
        self._environments: list[str] = []  # interpreters, in order of first use (lanes)
        self._gpu_pools = 0  # GPU pools started so far (lanes)
        self._lock = threading.Lock()
        self._cancelled = False

    @property
    def sandboxed(self) -> bool:
        """Whether its commands run in a sandbox."""
        return self._sandbox is not None

    def spawn(self, request: SpawnRequest) -> SpawnResult:
        from kiln.workers.protocol import WorkRequest

        if self._cancelled:
            return SpawnResult(-1, 0.0, Source.RAN_IN_WORKER, crashed=True, message="interrupted")
        binds = None
        if self._sandbox is not None:
            from kiln.sandbox.view import action_binds

            binds = [b.to_json() for b in action_binds(request.execroot, request.inputs)]
        argv = resolve_argv(request.argv, self._python)  # the environment's, or this build's
        work = WorkRequest(
            argv,
            dict(request.env),
            str(request.execroot),
            str(request.stdout),
            str(request.stderr),
            request.timeout,
            sandbox=binds,
        )
        key, pool = self._worker_pool(argv, request)
        start = time.monotonic()
        try:
            response = pool.run(work)
        finally:
            with self._lock:
                self._busy[key] -= 1
        return SpawnResult(
            response.exit_code,
            time.monotonic() - start,
            Source.RAN_IN_WORKER,
            lane=response.worker_id,
            # An action killed by a signal: its worker runs on, the action crashed.
            crashed=response.crashed or response.exit_code < 0,
            message=response.message,
        )

    def _worker_pool(
        self, argv: tuple[str, ...], request: SpawnRequest
    ) -> tuple[tuple[str, str | None], WorkerPool]:
        """The pool of this interpreter and these GPUs, counted busy until run() ends."""
        python = argv[0] if argv else self._python
        gpus = request.env.get(CUDA_VISIBLE_DEVICES)
        key = (python, gpus)
        stopped: list[WorkerPool] = []
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                from kiln.workers.pool import WorkerPool

                if python not in self._environments:
                    self._environments.append(python)
                count = self._environments.index(python) + 1
                lanes = "worker" if count == 1 else f"env{count}-worker"
                if gpus:
                    stopped = self._unbind(_ids(gpus))
                    self._gpu_pools += 1
                    lanes = f"gpu{self._gpu_pools}-{lanes}"
                pool = self._pools[key] = WorkerPool(
                    python,
                    1 if gpus else self._max_instances,
                    preload=self._preload,
                    base_env={k: v for k, v in request.env.items() if k != "TMPDIR"},
                    lanes=lanes,
                    launcher=None if self._sandbox is None else self._sandbox.worker_argv,
                )
            self._busy[key] = self._busy.get(key, 0) + 1
        for old in stopped:
            old.shutdown()
        return key, pool

    def _unbind(self, ids: set[str]) -> list[WorkerPool]:
        """Take out the idle GPU pools bound to any of `ids` (their GPUs now go to another
        pool: the scheduler gave them to this action); the caller stops them. A busy one
        (a caller running two actions on one GPU) is kept."""
        gone = [
            key for key in self._pools if key[1] and _ids(key[1]) & ids and not self._busy.get(key)
        ]
        return [self._pools.pop(key) for key in gone]

    def cancel_all(self) -> None:
        self._cancelled = True
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.kill_all()

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.shutdown()


def _ids(visible: str) -> set[str]:
    return {i for i in visible.split(",") if i}
