"""The scheduler on its own, with a fake executor (ninja's Plan / FakeCommandRunner tests).

The fake runs nothing: each action "runs" until the test releases it, so a
test can look at what is running at any moment. Actions are named by their
first output; the graph's order is the order they are given in.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kiln.action_graph import Action, ActionGraph, File, Resources
from kiln.exec.outcome import ActionOutcome, Failure, Source
from kiln.exec.scheduler import Limits, Reporter, Scheduler, ScheduleResult

WAIT_S = 5.0
SETTLE_S = 0.05  # time for a wrongly started action to show up


def action(name: str, *deps: str, cpu: int = 1, gpu: int = 0, memory_mb: int = 0) -> Action:
    return Action(
        owner=f"//t:{name}",
        mnemonic="Fake",
        argv=("true",),
        inputs=tuple(File(f"kiln-out/t/{dep}") for dep in deps),
        outputs=(File(f"kiln-out/t/{name}"),),
        resources=Resources(cpu=cpu, gpu=gpu, memory_mb=memory_mb),
    )


def name_of(a: Action) -> str:
    return a.primary_output.path.rsplit("/", 1)[1]


class FakeExecutor:
    """Records starts and ends; `gated` actions run until release(name)."""

    def __init__(
        self,
        *,
        gated: bool = False,
        up_to_date: tuple[str, ...] = (),
        fail: tuple[str, ...] = (),
    ) -> None:
        self.gated = gated
        self.up_to_date_names = set(up_to_date)
        self.fail = set(fail)
        self.log: list[str] = []  # "+a" started, "-a" ended
        self.running: set[str] = set()
        self.up_to_date_threads: set[str] = set()
        self.executed_on: set[str] = set()
        self.interrupted = threading.Event()
        self._gates: dict[str, threading.Event] = {}
        self._changed = threading.Condition()
        self.on_start: dict[str, object] = {}
        self.gpus: dict[str, tuple[str, ...]] = {}  # the GPU ids each action was given

    def up_to_date(self, a: Action) -> ActionOutcome | None:
        self.up_to_date_threads.add(threading.current_thread().name)
        if name_of(a) in self.up_to_date_names:
            with self._changed:
                self.log.append(f"={name_of(a)}")
            return ActionOutcome(a, Source.UP_TO_DATE)
        return None

    def execute(self, a: Action, lane: str, gpus: tuple[str, ...] = ()) -> ActionOutcome:
        name = name_of(a)
        self.executed_on.add(threading.current_thread().name)
        with self._changed:
            self.gpus[name] = gpus
            gate = self._gates.setdefault(name, threading.Event())
            self.log.append(f"+{name}")
            self.running.add(name)
            self._changed.notify_all()
        hook = self.on_start.get(name)
        if callable(hook):
            hook()
        if self.gated:
            assert gate.wait(WAIT_S), f"{name} never released"
        with self._changed:
            self.running.discard(name)
            self.log.append(f"-{name}")
            self._changed.notify_all()
        if self.interrupted.is_set():
            return ActionOutcome(a, None, Failure("interrupted"), lane=lane)
        if name in self.fail:
            return ActionOutcome(a, Source.RAN_LOCALLY, Failure("exited with code 1"), lane=lane)
        return ActionOutcome(a, Source.RAN_LOCALLY, lane=lane)

    def interrupt(self) -> None:
        """Like the executor killing what runs: every gated action ends now."""
        self.interrupted.set()
        with self._changed:
            for gate in self._gates.values():
                gate.set()

    # -- for the test ---------------------------------------------------------------

    def release(self, name: str) -> None:
        with self._changed:
            self._gates.setdefault(name, threading.Event()).set()

    def wait_running(self, *names: str) -> set[str]:
        """Wait until every one of `names` runs, then a moment more; what runs then."""
        with self._changed:
            assert self._changed.wait_for(lambda: set(names) <= self.running, WAIT_S), (
                f"waited for {names}; running {self.running}, log {self.log}"
            )
        time.sleep(SETTLE_S)
        with self._changed:
            return set(self.running)

    def started(self) -> list[str]:
        return [entry[1:] for entry in self.log if entry[0] == "+"]


class InBackground:
    """A scheduler run on its own thread, so the test can watch and release actions."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.result: ScheduleResult | None = None
        self.thread = threading.Thread(target=self._run, name="scheduler")
        self.scheduler = scheduler
        self.thread.start()

    def _run(self) -> None:
        self.result = self.scheduler.run()

    def join(self) -> ScheduleResult:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the scheduler did not finish"
        assert self.result is not None
        return self.result


def scheduler(
    actions: list[Action],
    executor: FakeExecutor,
    *,
    jobs: int = 4,
    gpus: int = 0,
    memory_mb: int = 0,
    keep_going: bool = False,
    gpu_ids: tuple[str, ...] | None = None,
) -> Scheduler:
    return Scheduler(
        ActionGraph.of(actions),
        Limits(jobs=jobs, gpus=gpus, memory_mb=memory_mb),
        executor,
        Reporter(),
        keep_going=keep_going,
        gpu_ids=gpu_ids,
    )


@pytest.fixture
def gated() -> Iterator[FakeExecutor]:
    fake = FakeExecutor(gated=True)
    yield fake
    for name in "abcdefgh":  # never leave a scheduler thread blocked
        fake.release(name)
    for name in ("big", "small1", "small2", "gpu1", "gpu2", "cpu", "m1", "m2", "s"):
        fake.release(name)


def statuses(result: ScheduleResult) -> dict[str, str]:
    return {name_of(o.action): o.status for o in result.outcomes}


# -- order -------------------------------------------------------------------------


def test_an_action_starts_only_after_everything_it_reads_finished() -> None:
    fake = FakeExecutor()
    actions = [action("a"), action("b", "a"), action("c", "b", "d"), action("d")]
    result = scheduler(actions, fake, jobs=4).run()
    log = fake.log
    assert log.index("-a") < log.index("+b")
    assert log.index("-b") < log.index("+c") and log.index("-d") < log.index("+c")
    assert statuses(result) == dict.fromkeys("abcd", "executed")
    assert result.skipped == []


def test_ready_actions_start_in_graph_order(gated: FakeExecutor) -> None:
    run = InBackground(scheduler([action(n) for n in "abcd"], gated, jobs=1))
    for name in "abcd":
        assert gated.wait_running(name) == {name}
        gated.release(name)
    run.join()
    assert gated.started() == list("abcd")


# -- resources ---------------------------------------------------------------------


def test_jobs_limit_how_many_actions_run_at_once(gated: FakeExecutor) -> None:
    run = InBackground(scheduler([action(n) for n in "abcde"], gated, jobs=2))
    assert gated.wait_running("a", "b") == {"a", "b"}
    gated.release("a")
    assert gated.wait_running("c") == {"b", "c"}
    for name in "bcde":
        gated.release(name)
    assert statuses(run.join()) == dict.fromkeys("abcde", "executed")


def test_gpu_actions_wait_for_a_free_gpu_slot_while_cpu_actions_go_on(
    gated: FakeExecutor,
) -> None:
    actions = [action("gpu1", gpu=1), action("gpu2", gpu=1), action("cpu")]
    run = InBackground(scheduler(actions, gated, jobs=4, gpus=1))
    assert gated.wait_running("gpu1", "cpu") == {"gpu1", "cpu"}
    gated.release("gpu1")
    assert gated.wait_running("gpu2") == {"gpu2", "cpu"}
    gated.release("gpu2")
    gated.release("cpu")
    run.join()


GPUS = ("GPU-a", "GPU-b", "GPU-c", "GPU-d")


def test_gpu_actions_running_at_once_hold_distinct_ids_and_a_finished_ones_go_to_the_next(
    gated: FakeExecutor,
) -> None:
    names = "abcdefgh"
    actions = [action(n, gpu=1) for n in names]
    run = InBackground(scheduler(actions, gated, jobs=8, gpus=4, gpu_ids=GPUS))
    assert gated.wait_running(*"abcd") == set("abcd")
    assert sorted(gated.gpus[n] for n in "abcd") == [(g,) for g in GPUS]
    gated.release("c")
    assert gated.wait_running("e") == set("abde")
    assert gated.gpus["e"] == gated.gpus["c"]  # the only free one
    for name in names:
        gated.release(name)
    result = run.join()
    assert statuses(result) == dict.fromkeys(names, "executed")
    # The outcome says where each ran (build events, --explain).
    assert {name_of(o.action): o.gpus for o in result.outcomes} == gated.gpus


def test_an_action_needing_two_gpus_gets_two_ids_and_a_cpu_action_none(
    gated: FakeExecutor,
) -> None:
    actions = [action("gpu1", gpu=2), action("gpu2", gpu=1), action("cpu")]
    run = InBackground(scheduler(actions, gated, jobs=4, gpus=3, gpu_ids=GPUS[:3]))
    assert gated.wait_running("gpu1", "gpu2", "cpu") == {"gpu1", "gpu2", "cpu"}
    assert gated.gpus == {"gpu1": GPUS[:2], "gpu2": GPUS[2:3], "cpu": ()}
    for name in ("gpu1", "gpu2", "cpu"):
        gated.release(name)
    run.join()


def test_a_failed_gpu_action_gives_its_id_back() -> None:
    fake = FakeExecutor(fail=("a",))
    actions = [action("a", gpu=1), action("b", gpu=1)]
    result = scheduler(actions, fake, gpus=1, keep_going=True, gpu_ids=("GPU-a",)).run()
    assert statuses(result) == {"a": "failed", "b": "executed"}
    assert fake.gpus == {"a": ("GPU-a",), "b": ("GPU-a",)}


def test_without_ids_given_gpu_slots_are_cuda_indices(gated: FakeExecutor) -> None:
    run = InBackground(scheduler([action("gpu1", gpu=2)], gated, gpus=2))
    gated.wait_running("gpu1")
    assert gated.gpus == {"gpu1": ("0", "1")}
    gated.release("gpu1")
    run.join()


def test_the_memory_budget_keeps_two_large_actions_apart(gated: FakeExecutor) -> None:
    actions = [action("m1", memory_mb=600), action("m2", memory_mb=600), action("s", memory_mb=100)]
    run = InBackground(scheduler(actions, gated, jobs=4, memory_mb=1000))
    assert gated.wait_running("m1", "s") == {"m1", "s"}  # m2 would pass the budget
    gated.release("m1")
    assert gated.wait_running("m2") == {"m2", "s"}
    gated.release("m2")
    gated.release("s")
    run.join()


def test_an_action_larger_than_the_whole_budget_runs_alone(gated: FakeExecutor) -> None:
    actions = [action("small1", memory_mb=100), action("big", memory_mb=5000)]
    actions.append(action("small2", memory_mb=100))
    run = InBackground(scheduler(actions, gated, jobs=4, memory_mb=1000))
    assert gated.wait_running("small1", "small2") == {"small1", "small2"}
    gated.release("small1")
    gated.release("small2")
    assert gated.wait_running("big") == {"big"}  # once nothing else runs, and alone
    gated.release("big")
    assert statuses(run.join()) == dict.fromkeys(["small1", "big", "small2"], "executed")


# -- failures ----------------------------------------------------------------------


def test_keep_going_runs_everything_that_does_not_depend_on_a_failure() -> None:
    fake = FakeExecutor(fail=("a",))
    actions = [action("a"), action("b", "a"), action("c")]
    result = scheduler(actions, fake, jobs=1, keep_going=True).run()
    assert statuses(result) == {"a": "failed", "c": "executed"}
    assert [name_of(a) for a in result.skipped] == ["b"]
    assert [name_of(o.action) for o in result.failed] == ["a"]


def test_without_keep_going_no_action_starts_after_a_failure() -> None:
    fake = FakeExecutor(fail=("a",))
    actions = [action("a"), action("b", "a"), action("c"), action("d", "c")]
    result = scheduler(actions, fake, jobs=1).run()
    assert fake.started() == ["a"]
    assert statuses(result) == {"a": "failed"}
    assert [name_of(a) for a in result.skipped] == ["b", "c", "d"]


def test_without_keep_going_running_actions_still_finish(gated: FakeExecutor) -> None:
    gated.fail = {"a"}
    run = InBackground(scheduler([action("a"), action("b"), action("c")], gated, jobs=2))
    assert gated.wait_running("a", "b") == {"a", "b"}
    gated.release("a")  # fails; b is still running and is waited for, c never starts
    time.sleep(SETTLE_S)
    gated.release("b")
    result = run.join()
    assert statuses(result) == {"a": "failed", "b": "executed"}
    assert [name_of(a) for a in result.skipped] == ["c"]


def test_every_transitive_dependent_of_a_failure_is_skipped_once() -> None:
    fake = FakeExecutor(fail=("a",))
    diamond = [action("a"), action("b", "a"), action("c", "a"), action("d", "b", "c")]
    result = scheduler([*diamond, action("e")], fake, keep_going=True).run()
    assert [name_of(a) for a in result.skipped] == ["b", "c", "d"]
    assert statuses(result) == {"a": "failed", "e": "executed"}


# -- the no-op path ----------------------------------------------------------------


def test_up_to_date_actions_finish_on_the_schedulers_thread_without_executing() -> None:
    fake = FakeExecutor(up_to_date=("a", "b", "d"))
    actions = [action("a"), action("b", "a"), action("c", "b"), action("d", "c")]
    result = scheduler(actions, fake).run()
    assert fake.started() == ["c"]  # d was asked only once c had finished
    assert fake.log == ["=a", "=b", "+c", "-c", "=d"]
    assert fake.up_to_date_threads == {threading.current_thread().name}
    assert [o.source for o in result.outcomes] == [
        Source.UP_TO_DATE,
        Source.UP_TO_DATE,
        Source.RAN_LOCALLY,
        Source.UP_TO_DATE,
    ]


def test_a_fully_up_to_date_graph_starts_no_thread() -> None:
    fake = FakeExecutor(up_to_date=tuple("abc"))
    before = threading.active_count()
    result = scheduler([action("a"), action("b", "a"), action("c", "b")], fake).run()
    assert statuses(result) == dict.fromkeys("abc", "cached")
    assert fake.executed_on == set()
    assert threading.active_count() == before


# -- Ctrl-C ------------------------------------------------------------------------


def test_ctrl_c_interrupts_running_actions_starts_nothing_more_and_re_raises() -> None:
    fake = FakeExecutor(gated=True)
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread() is threading.main_thread()
    # A Ctrl-C arrives while `a` runs: SIGINT to the thread waiting on the actions.
    fake.on_start["a"] = lambda: signal.pthread_kill(main, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        scheduler([action("a"), action("b", "a"), action("c")], fake, jobs=1).run()
    assert fake.interrupted.is_set()  # the executor was told to kill what runs
    assert fake.started() == ["a"]
    assert fake.log == ["+a", "-a"]  # `a` was waited for before run() re-raised


class _TimedOut(Exception):
    """What a test timeout (pytest-timeout's SIGALRM) raises in the waiting thread."""


def test_any_error_while_waiting_interrupts_running_actions_before_waiting_for_them() -> None:
    """Seen: a test's timeout raised while a remote action's stream hung; the scheduler
    only interrupted on Ctrl-C, so its shutdown waited for that action for 46 minutes."""
    fake = FakeExecutor(gated=True)
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread() is threading.main_thread()

    def timed_out(signum: int, frame: object) -> None:
        raise _TimedOut

    def when_waiting() -> None:
        """SIGUSR1 to the main thread once it waits on the running actions (as a test's
        timeout finds it), not while it starts them."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(main)
            while frame is not None and not _waiting_on_futures(frame):
                frame = frame.f_back
            if frame is not None:
                signal.pthread_kill(main, signal.SIGUSR1)
                return
            time.sleep(0.01)

    previous = signal.signal(signal.SIGUSR1, timed_out)
    try:
        fake.on_start["a"] = lambda: threading.Thread(target=when_waiting).start()
        with pytest.raises(_TimedOut):
            scheduler([action("a"), action("b", "a")], fake, jobs=1).run()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert fake.interrupted.is_set()  # without it, `a` (gated) would never end
    assert fake.log == ["+a", "-a"]


def _waiting_on_futures(frame: Any) -> bool:
    code = frame.f_code
    return code.co_name == "wait" and code.co_filename.endswith("concurrent/futures/_base.py")
