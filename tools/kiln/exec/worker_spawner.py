"""Running `python -m module` commands in persistent workers (kiln.workers).

One pool per interpreter, that is per Python environment (kiln.pyenv: the
executor puts the environment's interpreter in argv[0]), so actions of targets
with different packages never share a worker; each pool starts on its first
request and holds up to `max_instances` workers. Settings the interpreter reads
only at start-up (PYTHONHASHSEED, the locale, ...) come from the environment of
that first request: the workers' actions share them, as their keys say.
Lanes: the first environment's workers are worker-1.., the next env2-worker-1..

A worker serves CPU and GPU actions alike: it runs nothing itself (each action
runs in a fork of it: kiln.workers.forking) and sees no GPU (its own
CUDA_VISIBLE_DEVICES is empty), so it never sets CUDA up; each action's fork
gets the request's CUDA_VISIBLE_DEVICES before anything in it does (CUDA reads
it once per process, in the fork). One pool per interpreter, then: a weights-only
rebuild's GPU actions fork the worker that ModelWeights started instead of
paying a worker start of their own, and no worker is bound to GPUs. An action
holding GPUs does not wait behind CPU actions for a worker (pool.py:
`holds_gpus`), so the GPUs of a host run side by side.
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
        self._pools: dict[str, WorkerPool] = {}  # by interpreter
        self._environments: list[str] = []  # interpreters, in order of first use (lanes)
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
        pool = self._worker_pool(argv, request)
        start = time.monotonic()
        response = pool.run(work, holds_gpus=bool(request.env.get(CUDA_VISIBLE_DEVICES)))
        return SpawnResult(
            response.exit_code,
            time.monotonic() - start,
            Source.RAN_IN_WORKER,
            lane=response.worker_id,
            # An action killed by a signal: its worker runs on, the action crashed.
            crashed=response.crashed or response.exit_code < 0,
            message=response.message,
        )

    def _worker_pool(self, argv: tuple[str, ...], request: SpawnRequest) -> WorkerPool:
        """The pool of this interpreter, started by its first request."""
        python = argv[0] if argv else self._python
        with self._lock:
            pool = self._pools.get(python)
            if pool is None:
                from kiln.workers.pool import WorkerPool

                self._environments.append(python)
                count = len(self._environments)
                env = {k: v for k, v in request.env.items() if k != "TMPDIR"}
                env[CUDA_VISIBLE_DEVICES] = ""  # the worker itself never touches a GPU
                pool = self._pools[python] = WorkerPool(
                    python,
                    self._max_instances,
                    preload=self._preload,
                    base_env=env,
                    lanes="worker" if count == 1 else f"env{count}-worker",
                    launcher=None if self._sandbox is None else self._sandbox.worker_argv,
                )
        return pool

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
