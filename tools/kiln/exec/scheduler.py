"""Running the action graph: dependency order, in parallel, within resource limits.

An action is ready when every action producing one of its inputs has
succeeded. A ready action that is up to date (ActionExecutor.up_to_date)
finishes at once on the scheduler's own thread; the others start, in graph
order, while their resources fit: `--jobs` CPU slots, `--gpus` GPU slots,
and the `--local_ram_mb` memory budget; an action asking for more than the
whole budget runs alone rather than never. The GPU slots are ids (gpu_pool.py):
a GPU action holds the ids it was given from its start to its end, whatever
the end, and the executor runs it with exactly those GPUs visible. On a
failure, `--keep_going` goes on with everything that does not depend on it;
without it no new action starts. Ctrl-C kills running actions (ActionExecutor.interrupt) and
re-raises; nothing half-done is cached (see executor.py).

State is kept by the action's index in the ActionGraph.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import heapq
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol

from kiln.action_graph import Action, ActionGraph, Resources
from kiln.exec.gpu_pool import GpuPool
from kiln.exec.outcome import ActionOutcome, Source


@dataclass(frozen=True)
class Limits:
    jobs: int
    gpus: int
    memory_mb: int  # 0: no memory limit


@dataclass
class ScheduleResult:
    outcomes: list[ActionOutcome] = field(default_factory=list)
    skipped: list[Action] = field(default_factory=list)  # not run: a dependency failed
    interrupted: bool = False

    @property
    def failed(self) -> list[ActionOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]


class ActionExecutor(Protocol):
    """What the scheduler needs of the executor (kiln.exec.executor.Executor)."""

    def up_to_date(self, action: Action) -> ActionOutcome | None:
        """The outcome of an action with nothing to do, or None; cheap, no thread."""
        ...

    def execute(self, action: Action, lane: str, gpus: tuple[str, ...] = ()) -> ActionOutcome:
        """Run (or fetch) the action; called on one of `jobs` threads. `gpus`: the ids of
        the GPUs it holds (gpu_pool.py), which a local run makes all it sees."""
        ...

    def interrupt(self) -> None:
        """Ctrl-C: make every running execute() return soon, storing nothing."""
        ...


class Reporter:
    """What the scheduler tells the user interface; every method may be left as is."""

    def action_started(self, action: Action, lane: str) -> None: ...
    def action_finished(self, outcome: ActionOutcome) -> None: ...


class _State(enum.Enum):
    WAITING = enum.auto()  # on dependencies, or for resources
    RUNNING = enum.auto()
    DONE = enum.auto()
    SKIPPED = enum.auto()


class Scheduler:
    def __init__(
        self,
        graph: ActionGraph,
        limits: Limits,
        executor: ActionExecutor,
        reporter: Reporter,
        *,
        keep_going: bool,
        reserved: Callable[[Action], Resources] | None = None,
        failure_stops: Callable[[Action], bool] = lambda action: True,
        gpu_ids: tuple[str, ...] | None = None,
    ):
        self.graph = graph
        self.limits = limits
        self.executor = executor
        self.reporter = reporter
        self.keep_going = keep_going
        # Whether a failure of the action stops the build without --keep_going: a failed
        # test does not (kiln test runs every test, as Bazel does).
        self.failure_stops = failure_stops
        # What an action holds of this host while it runs: its resources, or only a job
        # slot for one that runs elsewhere (exec/placement.py).
        self.reserved = reserved or (lambda action: action.resources)
        # The GPUs' ids (host.gpu_pool_ids); CUDA indices when not given.
        self.gpu_ids = gpu_ids if gpu_ids is not None else tuple(map(str, range(limits.gpus)))
        self._lanes = threading.local()
        self._lane_counter = 0
        self._lane_lock = threading.Lock()

    def run(self) -> ScheduleResult:
        return _Run(self).run()

    def _lane(self) -> str:
        lane: str | None = getattr(self._lanes, "name", None)
        if lane is None:
            with self._lane_lock:
                self._lane_counter += 1
                lane = f"local-{self._lane_counter}"
            self._lanes.name = lane
        return lane

    def run_one(self, action: Action, gpus: tuple[str, ...]) -> ActionOutcome:
        """On a pool thread: one action, on its lane, with the GPUs it holds."""
        lane = self._lane()
        self.reporter.action_started(action, lane)
        outcome = self.executor.execute(action, lane, gpus)
        if gpus and outcome.source in _RAN_HERE:  # which GPUs it ran on: events, --explain
            outcome = dataclasses.replace(outcome, gpus=gpus)
        return outcome


_RAN_HERE = (Source.RAN_LOCALLY, Source.RAN_IN_WORKER)


class _Run:
    """One run of a scheduler: the per-action state, by index."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler
        graph = scheduler.graph
        self.state = [_State.WAITING] * len(graph)
        self.unfinished = [len(deps) for deps in graph.dependencies]
        self.ready = [i for i, n in enumerate(self.unfinished) if n == 0]  # a heap
        heapq.heapify(self.ready)
        self.runnable: list[int] = []  # ready, not up to date, waiting for resources; sorted
        self.gpus = GpuPool(scheduler.gpu_ids)
        self.result = ScheduleResult()

    def run(self) -> ScheduleResult:
        running: dict[Future[ActionOutcome], int] = {}
        holding: dict[int, tuple[str, ...]] = {}  # the GPU ids of each running action
        used = Resources(cpu=0, gpu=0, memory_mb=0)
        stop = False
        jobs = max(1, self.s.limits.jobs)
        pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kiln")
        try:
            while True:
                if not stop:
                    self._finish_up_to_date()
                    for index in list(self.runnable):
                        need = self.s.reserved(self.s.graph.actions[index])
                        if self._fits(need, used, idle=not running):
                            with _ctrl_c_deferred():  # a started action is always waited for
                                action = self.s.graph.actions[index]
                                gpus = holding[index] = self.gpus.take(need.gpu)
                                running[pool.submit(self.s.run_one, action, gpus)] = index
                            self.state[index] = _State.RUNNING
                            self.runnable.remove(index)
                            used = _add(used, need, 1)
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=running.__getitem__):
                    index = running.pop(future)
                    used = _add(used, self.s.reserved(self.s.graph.actions[index]), -1)
                    try:
                        if not self._finish(index, future.result()):
                            stops = self.s.failure_stops(self.s.graph.actions[index])
                            stop = stop or (stops and not self.s.keep_going)
                    finally:
                        # After its action_finished event: no event shows two at once.
                        self.gpus.give_back(holding.pop(index))
            if stop:
                self._skip_the_rest()
        except BaseException as error:
            # Whatever ends the wait stops what runs: the shutdown below waits for every
            # action's thread, and one waiting on a remote server kept an internal error (a
            # test's timeout, there) waiting for 46 minutes. Nothing more is stored.
            self.s.executor.interrupt()
            if isinstance(error, KeyboardInterrupt):
                self.result.interrupted = True
                for future in running:
                    # The interrupt is what gets reported; an action's own error is moot now.
                    with contextlib.suppress(Exception):
                        self.result.outcomes.append(future.result())
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return self.result

    def _finish_up_to_date(self) -> None:
        """Finish every ready action that is up to date (and those it releases that are
        too); the others become runnable."""
        while self.ready:
            index = heapq.heappop(self.ready)
            outcome = self.s.executor.up_to_date(self.s.graph.actions[index])
            if outcome is None:
                self.runnable.append(index)
            else:
                self._finish(index, outcome)
        self.runnable.sort()

    def _finish(self, index: int, outcome: ActionOutcome) -> bool:
        """Record an outcome and release the actions that waited on it; False if it failed."""
        self.state[index] = _State.DONE
        self.result.outcomes.append(outcome)
        self.s.reporter.action_finished(outcome)
        if outcome.status == "failed":
            self._skip_dependents(index)
            return False
        for dependent in self.s.graph.dependents[index]:
            self.unfinished[dependent] -= 1
            if self.unfinished[dependent] == 0 and self.state[dependent] is _State.WAITING:
                heapq.heappush(self.ready, dependent)
        return True

    def _skip_dependents(self, failed: int) -> None:
        stack = list(self.s.graph.dependents[failed])
        skipped: list[int] = []
        while stack:
            index = stack.pop()
            if self.state[index] is _State.SKIPPED:
                continue
            self.state[index] = _State.SKIPPED
            skipped.append(index)
            stack.extend(self.s.graph.dependents[index])
        self.result.skipped += [self.s.graph.actions[i] for i in sorted(skipped)]

    def _skip_the_rest(self) -> None:
        """After a failure without --keep_going: every action that never started."""
        for index, state in enumerate(self.state):
            if state is _State.WAITING:
                self.state[index] = _State.SKIPPED
                self.result.skipped.append(self.s.graph.actions[index])

    def _fits(self, need: Resources, used: Resources, *, idle: bool) -> bool:
        if idle:
            return True  # an oversized action runs alone rather than never
        limits = self.s.limits
        if used.cpu + need.cpu > limits.jobs:
            return False
        if need.gpu and (used.gpu + need.gpu > limits.gpus or need.gpu > self.gpus.free):
            return False
        return not (limits.memory_mb and used.memory_mb + need.memory_mb > limits.memory_mb)


@contextlib.contextmanager
def _ctrl_c_deferred() -> Iterator[None]:
    """SIGINT held back while a thread is submitted and recorded.

    A Ctrl-C inside ThreadPoolExecutor.submit (its new thread's start) would
    leave an action running that `running` does not know, so nobody would wait
    for it. Held back, it arrives right after, once the future is recorded.
    Threads started meanwhile inherit the mask: SIGINT goes to the main thread.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _add(used: Resources, need: Resources, sign: int) -> Resources:
    return Resources(
        cpu=used.cpu + sign * need.cpu,
        gpu=used.gpu + sign * need.gpu,
        memory_mb=used.memory_mb + sign * need.memory_mb,
    )
