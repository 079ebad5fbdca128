"""How an action that missed every cache runs: the strategies, behind one interface.

    local    a plain process here (LocalSpawner), in an execroot (run_in_execroot)
    worker   a persistent worker here for a `python -m` action (WorkerSpawner), else local
    remote   the remote executor (RemoteSpawner: inputs by digest, blobs back verified);
             with --remote_local_fallback, an unreachable cluster runs it here instead
    dynamic  here and remotely at once (Bazel's dynamic execution): the first success
             wins, the other run is killed (here) or cancelled (remotely)

Strategies.pick(action) asks the placement policy (placement.py) which one runs it.
Each returns a Ran: a result whose blobs are in the local CAS, or a failure; the
executor (executor.py) stores the action-cache entry and delivers. Spawners, and the
sandbox their commands run in, start with the first action that needs them, so a
no-op build never pays for them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from kiln.action_graph import GENERATED_ROOT, Action
from kiln.cache.cas import BlobState, ContentStore
from kiln.cache.digest import Digest
from kiln.errors import KilnError
from kiln.exec.execroot import Execroots, InputUnavailable
from kiln.exec.gpu_pool import cuda_env
from kiln.exec.outcome import Failure, Source
from kiln.exec.placement import Placement, PlacementPolicy
from kiln.exec.run_in_execroot import (
    VERBOSE_FAILURES_ENV,
    Job,
    Machine,
    Ran,
    RunFailed,
    run_in_execroot,
)
from kiln.exec.sandboxing import Sandboxing
from kiln.layout import DiskCache

if TYPE_CHECKING:
    from kiln.cache.digest_cache import FileDigestCache
    from kiln.exec.remote_spawn import RemoteSpawner, RemoteWheel
    from kiln.exec.spawn import Spawner
    from kiln.layout import OutputBase
    from kiln.pyenv.environment import EnvironmentStore
    from kiln.pyenv.wheels import WheelStore


@dataclass(frozen=True)
class Work:
    """One action to run, as the executor's cache gate hands it over."""

    action: Action
    key: str
    inputs: Mapping[str, Digest]  # every concrete input file, by path
    executable: Set[str]  # the generated files that are executable
    lane: str
    gpus: tuple[str, ...] = ()  # the GPU ids it holds (gpu_pool.py): all a run here sees


class Strategy(Protocol):
    def run(self, work: Work) -> Ran:
        """Run the action to its end (RunFailed: it could not start); thread-safe."""
        ...

    def cancel_all(self) -> None:
        """Ctrl-C: kill what runs, and whatever starts later."""
        ...

    def close(self) -> None:
        """End of the build. Idempotent."""
        ...


@dataclass(frozen=True)
class HostSettings:
    python: str  # the interpreter of Python actions without packages
    timeout: float | None
    verbose_failures: bool
    pip_find_links: tuple[str, ...]
    worker_max_instances: int
    worker_preload: tuple[str, ...]
    sandbox: bool = True  # --sandbox, which travels to remote nodes too


class _DriverExecroots:
    """Execroots (execroot.py) as run_in_execroot makes them: sources linked in."""

    def __init__(self, execroots: Execroots) -> None:
        self._execroots = execroots

    def create(self, action: Action, inputs: Mapping[str, Digest], executable: Set[str]) -> Path:
        try:
            return self._execroots.create(action, "", dict(inputs), executable)
        except InputUnavailable as unavailable:
            raise RunFailed(str(unavailable)) from None

    def release(self, root: Path) -> None:
        self._execroots.release(root)


class Host:
    """This machine's parts the local, worker and dynamic strategies share: the execroots,
    the sandbox, the Python environments, the Ctrl-C flag."""

    def __init__(
        self,
        output_base: OutputBase,
        cas: ContentStore,
        execroots: Execroots,
        sandboxing: Sandboxing,
        settings: HostSettings,
        report: Callable[[str], None],
    ) -> None:
        self.output_base = output_base
        self.cas = cas
        self.execroots = execroots
        self.sandboxing = sandboxing
        self.settings = settings
        self.report = report
        self.interrupted = False
        self.lock = threading.Lock()
        self._environments: EnvironmentStore | None = None
        self.machine = Machine(
            cas,
            _DriverExecroots(execroots),
            sandboxing.torch_tmp,
            interrupted=lambda: self.interrupted,
            forget=self._forget_generated,
            make_header=sandboxing.make_header,
        )

    def job(self, work: Work) -> Job:
        """The command to run: a Python action's interpreter is its environment's (made
        first if need be: kiln.pyenv), whatever interpreter analysis wrote in argv. The
        worker spawner pools workers by that interpreter, so by environment."""
        env = {VERBOSE_FAILURES_ENV: "1"} if self.settings.verbose_failures else {}
        env.update(cuda_env(work.action.resources.gpu, work.gpus))
        env.update(self.sandboxing.windows_torch(work.action, self.settings.pip_find_links))
        return Job(
            work.action,
            self._argv(work.action),
            work.inputs,
            work.executable,
            self.settings.timeout,
            env,
            work.lane,
        )

    def _argv(self, action: Action) -> tuple[str, ...]:
        if action.python_env is None:
            return action.argv
        with self.lock:
            if self._environments is None:
                from kiln.pyenv.environment import EnvironmentStore

                self._environments = EnvironmentStore(
                    DiskCache(self.cas.root).python_envs,
                    self.settings.python or sys.executable,
                    find_links=self.settings.pip_find_links,
                    report=self.report,
                )
            environments = self._environments
        return (environments.python_for(action.python_env), *action.argv[1:])

    def started(self, spawner: Spawner) -> Spawner:
        """A Ctrl-C that came while the spawner started (the sandbox's first host takes a
        while on a loaded machine) found no spawner to cancel: this one is cancelled now,
        so its first command is never started (interrupt sets the flag before it looks)."""
        if self.interrupted:
            spawner.cancel_all()
        return spawner

    def _forget_generated(self, digests: Mapping[str, Digest]) -> None:
        for path, digest in digests.items():
            if path.startswith(GENERATED_ROOT + "/"):
                with contextlib.suppress(OSError):
                    os.unlink(self.cas.path(digest))


def _run_here(
    host: Host, work: Work, spawner: Callable[[], Spawner], claim: Callable[[], bool] | None = None
) -> Ran:
    try:
        job = host.job(work)
    except KilnError as error:
        return Ran(None, work.lane, failure=Failure(error.format()))
    return run_in_execroot(job, spawner(), host.machine, claim)


class _SpawnerHere(ABC):
    """What the local and worker strategies share: their spawner, made at first use (the
    sandbox's host starts then), and cancelling or closing it if it was made."""

    def __init__(self, host: Host, spawner: Spawner | None = None) -> None:
        self.host = host
        self._spawner = spawner  # made at first use when not given (a test gives a fake)

    @abstractmethod
    def _make_spawner(self) -> Spawner: ...

    def spawner(self) -> Spawner:
        with self.host.lock:
            if self._spawner is None:
                self._spawner = self.host.started(self._make_spawner())
            return self._spawner

    def cancel_all(self) -> None:
        if self._spawner is not None:
            self._spawner.cancel_all()

    def close(self) -> None:
        if self._spawner is not None:
            self._spawner.close()


class LocalStrategy(_SpawnerHere):
    """A plain process here; a Python action stays out of persistent workers."""

    def _make_spawner(self) -> Spawner:
        from kiln.exec.local_spawner import LocalSpawner

        return LocalSpawner(self.host.settings.python, self.host.sandboxing.get())

    def run(self, work: Work) -> Ran:
        return _run_here(self.host, work, self.spawner)


class WorkerStrategy(_SpawnerHere):
    """A `python -m` action in a persistent worker here; any other as `local` runs it."""

    def __init__(self, host: Host, local: LocalStrategy) -> None:
        super().__init__(host)
        self.local = local

    def _make_spawner(self) -> Spawner:
        from kiln.exec.worker_spawner import WorkerSpawner

        settings = self.host.settings
        return WorkerSpawner(
            settings.python,
            settings.worker_max_instances,
            settings.worker_preload,
            self.host.sandboxing.get(),
        )

    def run(self, work: Work) -> Ran:
        if not work.action.supports_workers:
            return self.local.run(work)
        return _run_here(self.host, work, self.spawner)


class RemoteStrategy:
    """On the remote executor: inputs by digest, the result's blobs back in the local CAS.
    An unreachable cluster fails the action, or (--remote_local_fallback, for an action
    this host can run) runs it with `fallback`."""

    def __init__(
        self,
        spawner: RemoteSpawner,
        workspace_root: Path,
        output_base: OutputBase,
        cas: ContentStore,
        digest_cache: FileDigestCache,
        settings: HostSettings,
        report: Callable[[str], None],
        fallback: Callable[[Action], Strategy | None],
    ) -> None:
        self.spawner = spawner
        self.workspace_root = workspace_root
        self.output_base = output_base
        self.cas = cas
        self.digest_cache = digest_cache
        self.settings = settings
        self.report = report
        self.fallback = fallback
        self.interrupted = False
        self._lock = threading.Lock()
        self._wheels: WheelStore | None = None
        self._fell_back = False  # said that actions run here instead

    def run(self, work: Work) -> Ran:
        ran = self.run_remotely(work)
        if ran is not None:
            return ran
        fallback = self.fallback(work.action)
        assert fallback is not None  # run_remotely returns None only when there is one
        return fallback.run(work)

    def run_remotely(
        self,
        work: Work,
        give_up: threading.Event | None = None,
        claim: Callable[[], bool] | None = None,
    ) -> Ran | None:
        """None if the cluster is unreachable and the action may run here instead.
        `give_up` and `claim` are the dynamic strategy's (run_in_execroot's claim)."""
        from kiln.exec.remote_spawn import RemoteInput, RemoteSpawn

        action, lane = work.action, work.lane
        inputs: dict[str, RemoteInput] = {}
        for path, digest in work.inputs.items():
            if path.startswith(GENERATED_ROOT + "/"):
                executable = path in work.executable
                # Never upload an unverified blob (issue 11 A1): a damaged one is removed.
                state = self.cas.check(digest, executable)
                if state is not BlobState.INTACT:
                    raise RunFailed(str(InputUnavailable(path, state is BlobState.DAMAGED)))
                inputs[path] = RemoteInput(digest, executable, self.cas.path(digest, executable))
            else:
                source = self.workspace_root / path
                inputs[path] = RemoteInput(digest, os.access(source, os.X_OK), source)
        try:
            wheels = self._remote_wheels(action)
        except KilnError as error:
            return Ran(None, lane, failure=Failure(error.format()))
        ran = self.spawner.spawn_remote(
            RemoteSpawn(
                action,
                work.key,
                inputs,
                self.settings.timeout,
                give_up,
                wheels,
                self.settings.sandbox,
            )
        )
        lane = ran.ended.lane or lane
        if self.interrupted:
            return Ran(None, lane, failure=Failure("interrupted"))
        if ran.unreachable and self.fallback(action) is not None:
            self._falling_back(ran.ended.failure_message)
            return None
        if ran.result is None:
            ran_at = None if ran.unreachable else Source.RAN_REMOTELY
            return Ran(ran_at, lane, failure=Failure(ran.ended.failure_message, ran.output))
        if claim is not None and not claim():
            return Ran(None, lane, failure=Failure("the local run finished first"))
        return Ran(Source.RAN_REMOTELY, lane, ran.result, printed=ran.printed)

    def _falling_back(self, why: str) -> None:
        """Say once that actions run here, not on the cluster, and why."""
        with self._lock:
            if self._fell_back:
                return
            self._fell_back = True
        self.report(f"{why.rstrip('.')}; running actions here instead (--remote_local_fallback)")

    def _remote_wheels(self, action: Action) -> tuple[RemoteWheel, ...]:
        """The wheels a node installs to make the action's environment, by digest: those
        the toolchain does not provide, as an environment here would install them; fetched
        here once and checked against the lock (kiln.pyenv.wheels)."""
        if not action.python_env:
            return ()
        from kiln.exec.remote_spawn import RemoteWheel
        from kiln.pyenv import toolchain
        from kiln.pyenv.environment import to_install
        from kiln.pyenv.wheels import WheelStore

        with self._lock:
            if self._wheels is None:
                self._wheels = WheelStore(
                    self.output_base.wheels,
                    self.settings.python or sys.executable,
                    find_links=self.settings.pip_find_links,
                    report=self.report,
                )
            store = self._wheels
        install = to_install(action.python_env, toolchain.by_name())
        return tuple(
            RemoteWheel(w.path.name, self.digest_cache.digest(str(w.path)), w.path)
            for w in store.wheels(install)
        )

    def cancel_all(self) -> None:
        self.interrupted = True
        self.spawner.cancel_all()

    def close(self) -> None:
        self.spawner.close()


class DynamicStrategy:
    """--spawn_strategy=dynamic, as Bazel's: here and remotely at once; the first success
    is stored, and the other run is killed (here) or cancelled (remotely)."""

    def __init__(
        self, host: Host, remote: RemoteStrategy, racer: Callable[[], Spawner] | None = None
    ) -> None:
        self.host = host
        self.remote = remote
        self._racer = racer  # each race's local spawner; a LocalSpawner when not given
        self._racing: set[Spawner] = set()  # each race's own local spawner, for Ctrl-C

    def run(self, work: Work) -> Ran:
        from kiln.exec.local_spawner import LocalSpawner

        winner: list[str] = []
        claim_lock = threading.Lock()

        def claim(branch: str) -> bool:
            with claim_lock:
                if not winner:
                    winner.append(branch)
                return winner == [branch]

        # Its own spawner, and sandbox, so that killing it kills only this run.
        private = None
        if self._racer is not None:
            here = self._racer()
        else:
            private = self.host.sandboxing.private()
            here = LocalSpawner(self.host.settings.python, private)
        with self.host.lock:
            self._racing.add(here)
        self.host.started(here)  # Ctrl-C came before `here` was known to cancel_all()
        give_up = threading.Event()
        remote: list[Ran | None] = []

        def run_remotely() -> None:
            ran = self.remote.run_remotely(work, give_up, lambda: claim("remote"))
            remote.append(ran)
            if ran is not None and ran.failure is None:
                here.cancel_all()

        thread = threading.Thread(target=run_remotely, name="kiln-dynamic", daemon=True)
        thread.start()
        try:
            local = _run_here(self.host, work, lambda: here, lambda: claim("local"))
        finally:
            if winner == ["local"]:
                give_up.set()
            thread.join()
            here.close()
            if private is not None:
                private.close()
            with self.host.lock:
                self._racing.discard(here)
        if winner == ["remote"] and remote and remote[0] is not None:
            return remote[0]
        return local

    def cancel_all(self) -> None:
        with self.host.lock:
            racing = list(self._racing)
        for spawner in racing:
            spawner.cancel_all()

    def close(self) -> None:
        pass  # each race closes its own spawner


class Strategies:
    """The strategies of one build, and the placement policy that picks among them."""

    def __init__(
        self,
        host: Host,
        by_placement: Mapping[Placement, Strategy],
        placement: PlacementPolicy,
    ) -> None:
        self.host = host
        self.by_placement = dict(by_placement)
        self.placement = placement

    def pick(self, action: Action) -> Strategy:
        return self.by_placement[self.placement.placement(action)]

    def interrupt(self) -> None:
        """Ctrl-C: kill what runs; what starts later is cancelled as it starts."""
        self.host.interrupted = True
        for strategy in self._distinct():
            strategy.cancel_all()

    def close(self) -> None:
        for strategy in self._distinct():
            strategy.close()

    def _distinct(self) -> list[Strategy]:
        seen: dict[int, Strategy] = {}
        for strategy in self.by_placement.values():
            seen.setdefault(id(strategy), strategy)
        return list(seen.values())


def make_strategies(
    workspace_root: Path,
    output_base: OutputBase,
    cas: ContentStore,
    digest_cache: FileDigestCache,
    sandboxing: Sandboxing,
    settings: HostSettings,
    *,
    placement: PlacementPolicy,
    flavour: Literal["local", "worker"] = "worker",
    remote_spawner: RemoteSpawner | None = None,
    remote_local_fallback: bool = False,
    report: Callable[[str], None] = lambda text: None,
    local_spawner: Spawner | None = None,
    racer: Callable[[], Spawner] | None = None,
) -> Strategies:
    """local and worker always; remote and dynamic with a remote executor (without one the
    placement policy never picks them). `flavour` (--strategy=local|worker) runs what
    falls back from the cluster. `local_spawner` and `racer` (the dynamic strategy's
    local spawners) are made as needed when not given: tests give fakes."""
    execroots = Execroots(output_base.execroot, workspace_root, cas)
    host = Host(output_base, cas, execroots, sandboxing, settings, report)
    local = LocalStrategy(host, local_spawner)
    worker = WorkerStrategy(host, local)
    here: dict[str, Strategy] = {"local": local, "worker": worker}  # by flavour
    by_placement: dict[Placement, Strategy] = {"local": local, "worker": worker}
    if remote_spawner is not None:

        def fallback(action: Action) -> Strategy | None:
            if not remote_local_fallback or not placement.can_run_here(action):
                return None
            return here[flavour]

        remote = RemoteStrategy(
            remote_spawner,
            workspace_root,
            output_base,
            cas,
            digest_cache,
            settings,
            report,
            fallback,
        )
        by_placement["remote"] = remote
        by_placement["dynamic"] = DynamicStrategy(host, remote, racer)
    else:
        # No remote executor: placement never says remote or dynamic, but a policy that
        # does (a test's) gets the local flavour, as the executor always did.
        by_placement["remote"] = by_placement["dynamic"] = here[flavour]
    return Strategies(host, by_placement, placement)
