"""A pool of persistent workers: torch stays imported between actions.

    pool = WorkerPool(sys.executable, max_instances=2, preload=("torch", "torch._inductor"))
    response = pool.run(WorkRequest(argv, env, cwd, stdout_path, stderr_path, timeout=600))
    pool.shutdown()

Workers start lazily, at most `max_instances` of them, each identified by a
slot ("worker-1" .. "worker-N") that a replacement takes over, so profile
lanes stay few. run() is thread-safe: it blocks until a worker is free. A
request that holds GPUs (`holds_gpus`) never waits: it starts a worker beyond
the limit if none is idle, since the GPUs it holds are the scheduler's bound on
how many such requests run at once (one per GPU), and it would otherwise wait
behind CPU actions while its GPUs idle. So a pool has at most `max_instances`
plus one worker per GPU of the build. A
worker that dies (crash, os._exit, signal, timeout kill) fails only the action
it was running, with crashed=True; the next run() starts a fresh one.

An action's output, exit status and files are those of the same argv run as
a plain subprocess (inprocess.py and isolation.py say how, and the limits).
Settings the interpreter reads only at start-up (PYTHONHASHSEED,
PYTHONWARNINGS, PYTHONUTF8, the locale, torch's thread pools) come from
`base_env`, not from the request: give the workers the actions' environment.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading

from kiln.workers.process import Launcher, WorkerProcess
from kiln.workers.protocol import WorkRequest, WorkResponse

logger = logging.getLogger(__name__)

# How long an idle worker gets to exit by itself at shutdown before SIGKILL.
_STOP_GRACE_S = 2.0
# How long shutdown() waits for run() calls whose workers it killed to return.
_DRAIN_S = 5.0


class WorkerPool:
    def __init__(
        self,
        python: str,
        max_instances: int,
        preload: tuple[str, ...] = ("torch",),
        base_env: dict[str, str] | None = None,
        lanes: str = "worker",
        launcher: Launcher | None = None,
    ) -> None:
        if max_instances < 1:
            raise ValueError(f"max_instances must be at least 1, not {max_instances}")
        self._python = python
        self._lanes = lanes  # workers are "<lanes>-1" .. "<lanes>-N" (profile lanes)
        self._max_instances = max_instances
        self._preload = tuple(preload)
        # The workers' own environment (locale, thread counts, where kiln is
        # importable); each action still runs with its request's env.
        self._env = dict(os.environ if base_env is None else base_env)
        self._launcher = launcher  # what each worker is started inside (a sandbox), if any
        self._cond = threading.Condition()
        self._idle: list[WorkerProcess] = []  # most recently used last
        self._busy: set[WorkerProcess] = set()
        self._slots: set[int] = set()  # taken by live or starting workers
        self._closed = False
        self.preload_errors: dict[str, str] = {}  # module -> reason, as workers report them

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def run(self, request: WorkRequest, *, holds_gpus: bool = False) -> WorkResponse:
        """Run one action in a worker, blocking until one is free (unless it `holds_gpus`:
        then one is started) and the action has ended."""
        module = request.module
        message = request.to_json()
        for key in ("cwd", "stdout_path", "stderr_path"):
            message[key] = os.path.abspath(message[key])  # the worker lives elsewhere
        try:
            worker = self._acquire(beyond_limit=holds_gpus)
        except OSError as e:  # the interpreter cannot be started at all
            return WorkResponse(127, crashed=True, message=f"cannot start a worker: {e}")
        if worker is None:
            return WorkResponse(1, crashed=True, message="worker pool is shut down")
        try:
            response = worker.execute(message, module, request.timeout)
        except BaseException:
            # Interrupted mid-action (KeyboardInterrupt in this thread): the worker
            # is in an unknown state and goes, like one that crashed.
            self._release(worker, reusable=False)
            raise
        self._release(worker, reusable=not response.crashed)
        self._note_preload_errors(worker)
        return response

    def kill_all(self) -> None:
        """SIGKILL every worker that is running an action (Ctrl-C); those actions crash."""
        with self._cond:
            busy = list(self._busy)
        for worker in busy:
            worker.kill("killed (interrupted)")

    def shutdown(self) -> None:
        """Stop every worker; run() calls still blocked return crashed. Idempotent."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
            self._cond.notify_all()
        for worker in busy:
            worker.kill("killed (worker pool shut down)")
        for worker in idle:
            worker.close_requests()  # all of them first: they exit in parallel
        for worker in idle:
            worker.stop(_STOP_GRACE_S)
        with self._cond:
            for worker in idle:
                self._slots.discard(_slot(worker))
            # The threads whose workers were killed reap them; wait for that.
            self._cond.wait_for(lambda: not self._busy, timeout=_DRAIN_S)

    # -- slots ----------------------------------------------------------------------

    def _acquire(self, *, beyond_limit: bool) -> WorkerProcess | None:
        dead: list[WorkerProcess] = []
        try:
            with self._cond:
                while True:
                    if self._closed:
                        return None
                    while self._idle:
                        worker = self._idle.pop()
                        if worker.idle_and_alive():
                            self._busy.add(worker)
                            return worker
                        dead.append(worker)  # exited while idle (OOM killer, ...)
                        self._slots.discard(_slot(worker))
                    if len(self._slots) < self._max_instances or beyond_limit:
                        slot = next(i for i in itertools.count(1) if i not in self._slots)
                        self._slots.add(slot)
                        break
                    self._cond.wait()
        finally:
            for worker in dead:
                worker.stop(0)
        return self._start(slot)

    def _start(self, slot: int) -> WorkerProcess | None:
        try:
            worker = WorkerProcess(
                f"{self._lanes}-{slot}", self._python, self._preload, self._env, self._launcher
            )
        except BaseException:
            with self._cond:
                self._slots.discard(slot)
                self._cond.notify()
            raise
        with self._cond:
            if not self._closed:
                self._busy.add(worker)
                return worker
            self._slots.discard(slot)
        worker.stop(0)
        return None

    def _release(self, worker: WorkerProcess, *, reusable: bool) -> None:
        with self._cond:
            self._busy.discard(worker)
            reusable = reusable and not self._closed
            if reusable:
                self._idle.append(worker)
            else:
                self._slots.discard(_slot(worker))
            self._cond.notify_all()
        if not reusable:
            worker.stop(0)

    def _note_preload_errors(self, worker: WorkerProcess) -> None:
        errors = (worker.hello or {}).get("preload_errors") or {}
        with self._cond:
            new = {m: e for m, e in errors.items() if m not in self.preload_errors}
            self.preload_errors.update(new)
        for module, error in new.items():
            logger.warning("persistent worker could not preload %s: %s", module, error)


def _slot(worker: WorkerProcess) -> int:
    return int(worker.worker_id.rsplit("-", 1)[1])
