"""Running the action graph: dependency order, in parallel, within resource limits.

An action is ready when every action producing one of its inputs has
succeeded. Ready actions start while their resources fit: `--jobs` CPU
slots, `--gpus` GPU slots, and the `--local_ram_mb` memory budget; an action
asking for more than the whole budget runs alone rather than never. On a
failure, `--keep_going` goes on with everything that does not depend on it;
without it no new action starts. Ctrl-C kills running actions; nothing
half-done is cached (see executor.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from kiln.action_graph import Action, Resources
from kiln.exec.executor import ActionOutcome


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


class Reporter:
    """What the scheduler tells the user interface; every method may be left as is."""

    def action_started(self, action: Action, lane: str) -> None: ...
    def action_finished(self, outcome: ActionOutcome) -> None: ...


class Scheduler:
    def __init__(
        self,
        actions: list[Action],
        producer: dict[str, Action],
        limits: Limits,
        execute: Callable[[Action, str], ActionOutcome],
        reporter: Reporter,
        *,
        keep_going: bool,
        interrupt: Callable[[], None],
        up_to_date: Callable[[Action], ActionOutcome | None] | None = None,
    ):
        self.actions = actions
        self.limits = limits
        self.execute = execute
        self.reporter = reporter
        self.keep_going = keep_going
        self.interrupt = interrupt
        # Answers "nothing to do" without a thread; see Executor.up_to_date.
        self.up_to_date = up_to_date
        self.waiting_on: dict[int, set[int]] = {}
        self.dependents: dict[int, list[Action]] = {id(a): [] for a in actions}
        for action in actions:
            deps = {id(producer[f.path]) for f in action.inputs if f.path in producer}
            self.waiting_on[id(action)] = deps
            for dep in deps:
                self.dependents[dep].append(action)
        self._lanes = threading.local()
        self._lane_counter = 0
        self._lane_lock = threading.Lock()

    def _lane(self) -> str:
        lane: str | None = getattr(self._lanes, "name", None)
        if lane is None:
            with self._lane_lock:
                self._lane_counter += 1
                lane = f"local-{self._lane_counter}"
            self._lanes.name = lane
        return lane

    def _run_one(self, action: Action) -> ActionOutcome:
        lane = self._lane()
        self.reporter.action_started(action, lane)
        return self.execute(action, lane)

    def run(self) -> ScheduleResult:
        result = ScheduleResult()
        ready = [a for a in self.actions if not self.waiting_on[id(a)]]
        running: dict[Future[ActionOutcome], Action] = {}
        used = Resources(cpu=0, gpu=0, memory_mb=0)
        stop = False
        pool = ThreadPoolExecutor(max_workers=max(1, self.limits.jobs), thread_name_prefix="kiln")
        try:
            while ready or running:
                if not stop:
                    ready = self._skip_up_to_date(ready, result)
                    started = []
                    for action in ready:
                        if self._fits(action.resources, used, idle=not running):
                            future = pool.submit(self._run_one, action)
                            running[future] = action
                            used = _add(used, action.resources, 1)
                            started.append(action)
                    for action in started:
                        ready.remove(action)
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    action = running.pop(future)
                    used = _add(used, action.resources, -1)
                    if not self._finish(action, future.result(), result, ready):
                        stop = stop or not self.keep_going
            if stop:
                ran = {id(o.action) for o in result.outcomes}
                skipped = {id(a) for a in result.skipped}
                result.skipped += [a for a in self.actions if id(a) not in ran | skipped]
        except KeyboardInterrupt:
            result.interrupted = True
            self.interrupt()
            for future in running:
                # The interrupt is what gets reported; an action's own error is moot now.
                with contextlib.suppress(Exception):
                    result.outcomes.append(future.result())
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return result

    def _skip_up_to_date(self, ready: list[Action], result: ScheduleResult) -> list[Action]:
        """Finish every ready action that is already up to date; return the rest."""
        if self.up_to_date is None:
            return ready
        pending = list(ready)
        remaining: list[Action] = []
        while pending:
            action = pending.pop()
            outcome = self.up_to_date(action)
            if outcome is None:
                remaining.append(action)
            else:
                self._finish(action, outcome, result, pending)
        return remaining

    def _finish(
        self, action: Action, outcome: ActionOutcome, result: ScheduleResult, ready: list[Action]
    ) -> bool:
        """Record an outcome and release the actions that waited on it; False if it failed."""
        result.outcomes.append(outcome)
        self.reporter.action_finished(outcome)
        if outcome.status == "failed":
            result.skipped += self._dependents_of(action)
            return False
        for dependent in self.dependents[id(action)]:
            waiting = self.waiting_on[id(dependent)]
            waiting.discard(id(action))
            if not waiting:
                ready.append(dependent)
        return True

    def _fits(self, need: Resources, used: Resources, *, idle: bool) -> bool:
        if idle:
            return True  # an oversized action runs alone rather than never
        limits = self.limits
        if used.cpu + need.cpu > limits.jobs:
            return False
        if need.gpu and used.gpu + need.gpu > limits.gpus:
            return False
        return not (limits.memory_mb and used.memory_mb + need.memory_mb > limits.memory_mb)

    def _dependents_of(self, failed: Action) -> list[Action]:
        out: list[Action] = []
        stack = list(self.dependents[id(failed)])
        seen: set[int] = set()
        while stack:
            action = stack.pop()
            if id(action) in seen:
                continue
            seen.add(id(action))
            out.append(action)
            self.waiting_on[id(action)].add(-1)  # never becomes ready
            stack.extend(self.dependents[id(action)])
        return out


def _add(used: Resources, need: Resources, sign: int) -> Resources:
    return Resources(
        cpu=used.cpu + sign * need.cpu,
        gpu=used.gpu + sign * need.gpu,
        memory_mb=used.memory_mb + sign * need.memory_mb,
    )
