"""Executing one action: key, cache lookup, run in an execroot, store, deliver.

    digests of inputs -> key -> action cache hit?  -> materialize outputs
                                          miss     -> remote cache hit? (remote_spawn_cache.py)
                                                      -> download, verify -> materialize
                                          miss     -> execroot -> spawn -> check outputs
                                                      -> CAS + action cache -> materialize
                                                      -> upload to the remote cache
                                          remote   -> inputs by digest -> RemoteSpawner
                                                      (remote_spawn.py: outputs come back
                                                      as verified blobs) -> action cache
                                                      -> materialize

Commands run through a Spawner (spawn.py): a local process, or a persistent
worker for Python actions under --strategy=worker; with --remote_executor,
the placement policy (placement.py) sends some to a RemoteSpawner instead. Outputs reach kiln-out/
as hardlinks of CAS blobs, each placed atomically, so no partial file is
ever visible there. Nothing is cached for an action that failed or was
interrupted. Every blob is verified before it is used (cas.check): a hit, an
execroot input, an output placed, an upload; a damaged one is removed with
a warning, and the action whose result it was runs again. An up-to-date
action's blobs must still be in the cache: one that left it (collected,
an expunged shared cache) is put back from kiln-out/, whose file is the
one the action state vouches for. open_executor() opens the executor's logs (action state,
explain log, digest log) and saves them when the build ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from kiln.action_graph import GENERATED_ROOT, PYTHON_INTERPRETER, Action
from kiln.cache.action_cache import ActionCache, ActionResult, OutputFile
from kiln.cache.cas import BlobState, ContentStore, MissingBlob
from kiln.cache.digest import Digest
from kiln.cache.digest_cache import FileDigestCache
from kiln.errors import KilnError
from kiln.exec.action_key import ActionKey, compute_key
from kiln.exec.action_state import ActionState, OutputRecord
from kiln.exec.built_outputs import BuiltOutputs
from kiln.exec.execroot import Execroots, InputUnavailable
from kiln.exec.explain import ExplainLog
from kiln.exec.outcome import ActionOutcome, Failure, Source
from kiln.exec.sandboxing import TORCH_TMP_ENV, Sandboxing
from kiln.layout import DiskCache, OutputBase

if TYPE_CHECKING:
    from kiln.exec.placement import PlacementPolicy
    from kiln.exec.remote_spawn import RemoteSpawner, RemoteSpawnResult, RemoteWheel
    from kiln.exec.remote_spawn_cache import RemoteSpawnCache
    from kiln.exec.spawn import Spawner
    from kiln.pyenv.environment import EnvironmentStore
    from kiln.pyenv.wheels import WheelStore

# What kiln.actions.spec reads to print a failing action's traceback.
VERBOSE_FAILURES_ENV = "KILN_VERBOSE_FAILURES"

# Modules only running an action needs are imported when one runs: a no-op build
# never pays for them (execroot_files, spawn, local_spawner, worker_spawner).


@dataclass(frozen=True)
class ExecOptions:
    digest_function: str = "sha256"
    strategy: Literal["local", "worker"] = "worker"
    worker_max_instances: int = 2
    action_timeout: float | None = None
    explain: bool = False
    # --verbose_failures: actions show the traceback behind their one-line error. Set
    # at spawn time, outside the key: asking for more detail rebuilds nothing.
    verbose_failures: bool = False
    # The interpreter Python actions run with: their argv names it symbolically
    # (PYTHON_INTERPRETER), so where it is installed is in no key.
    python: str = ""
    # Actions run in a sandbox where the kernel allows (exec/sandboxing.py); --nosandbox.
    sandbox: bool = True
    # Modules a worker imports once at start: what Python actions would import each time.
    # Its fork server is forked after them, so a validation's child has them too
    # (kiln.action_specs, pydantic's models: 0.2 s a child would import again).
    worker_preload: tuple[str, ...] = ("torch", "torch._inductor", "kiln.action_specs")
    # --pip_find_links: Python environments are made offline from these wheelhouses.
    pip_find_links: tuple[str, ...] = ()
    # --remote_local_fallback: an action the cluster cannot be reached for runs here
    # (when this host can run it) instead of failing.
    remote_local_fallback: bool = False


class _ActionFailed(Exception):
    """Ends one action with a Failure (an unreadable input, an output that cannot be placed)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _warn_on_stderr(message: str) -> None:
    print(f"WARNING: {message}", file=sys.stderr)


class _Done(NamedTuple):
    """How the run or write of an action ended, before the timings are added."""

    source: Source | None
    lane: str
    failure: Failure | None = None
    printed: str = ""


@dataclass
class Executor:
    workspace_root: Path
    output_base: OutputBase
    cas: ContentStore
    action_cache: ActionCache
    digest_cache: FileDigestCache
    explain_log: ExplainLog
    options: ExecOptions
    state: ActionState
    remote: RemoteSpawnCache | None = None  # --remote_cache
    # The spawners, made when the first action runs, unless given.
    local: Spawner | None = None
    worker: Spawner | None = None  # --strategy=worker: `python -m` actions
    # --remote_executor: where each action runs, and the spawner of those that leave.
    placement: PlacementPolicy | None = None
    remote_spawner: RemoteSpawner | None = None
    outputs: BuiltOutputs = field(default_factory=BuiltOutputs)
    # How a warning reaches the user (the build sets its status printer's).
    warn: Callable[[str], None] = _warn_on_stderr
    # Keys by the action's first output, which names one action of the graph; the
    # action is kept to tell it from another declaring that output (tests, reruns).
    _keys: dict[str, tuple[Action, ActionKey]] = field(default_factory=dict)
    _interrupted: bool = False
    _spawner_lock: threading.Lock = field(default_factory=threading.Lock)
    # Python environments (kiln.pyenv), made when the first Python action runs.
    _environments: EnvironmentStore | None = None
    # The wheels remote nodes install (kiln.pyenv.wheels), made when the first is sent.
    _wheels: WheelStore | None = None
    report: Callable[[str], None] = lambda text: None  # progress of making environments
    # --spawn_strategy=dynamic: each racing action's own local spawner, for Ctrl-C.
    _racing: set[Spawner] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.execroots = Execroots(self.output_base.execroot, self.workspace_root, self.cas)
        self._root = str(self.workspace_root) + "/"  # sources are read by this prefix
        self.cas.on_damaged = self._damaged_blob
        self.sandboxing = Sandboxing(
            self.options.sandbox,
            self.options.python,
            workspace=self.workspace_root,
            hidden=(self.workspace_root, self.output_base.root, self.cas.root),
            output_base=self.output_base,
            disk_cache=DiskCache(self.cas.root),
            warn=lambda message: self.warn(message),  # noqa: PLW0108 - warn is set later
        )

    # -- the two entry points -----------------------------------------------

    def up_to_date(self, action: Action) -> ActionOutcome | None:
        """The no-op path, cheap enough for the scheduler's own thread: the action's key
        is what kiln-out/ was last built with, and its files there are untouched."""
        try:
            key = self._key(action)
        except _ActionFailed:
            return None  # execute() says why
        outputs = self.state.current(action.primary_output.path, key.key)
        if outputs is None or not all(self._blob_kept(out) for out in outputs):
            return None
        self.outputs.record(action, outputs)
        return ActionOutcome(action, Source.UP_TO_DATE, key=key.key)

    def _blob_kept(self, output: OutputRecord) -> bool:
        """The output's blob is in the cache (a stat); one that left it (collected, an
        expunged cache) is put back from kiln-out/: the file the action state vouches for,
        as the no-op path itself does."""
        if os.path.exists(self.cas.path(output.digest, output.is_executable)):
            return True
        with contextlib.suppress(OSError, KilnError):
            source = self.workspace_root / output.path
            self.cas.put_file(source, output.digest, output.is_executable)
        return self.cas.has(output.digest, output.is_executable)

    def execute(self, action: Action, lane: str) -> ActionOutcome:
        start = time.monotonic()
        try:
            key = self._key(action)
        except _ActionFailed as failed:
            return ActionOutcome(action, None, Failure(failed.message), lane=lane)
        try:
            source, remote_miss = self._cached(action, key)
        except _ActionFailed as failed:
            return ActionOutcome(action, None, Failure(failed.message), key.key, lane=lane)
        if source is not None:
            seconds = time.monotonic() - start
            return ActionOutcome(action, source, key=key.key, seconds=seconds, lane=lane)
        explanation = self.explain_log.why(action, key) if self.options.explain else ""
        if remote_miss and explanation:
            explanation = "remote cache miss; " + explanation
        try:
            done = self._run_or_write(action, key, lane)
        except _ActionFailed as failed:
            done = _Done(None, lane, Failure(failed.message))
        if done.failure is None:
            self.explain_log.record(action, key)
            # A remote executor wrote its result to the remote cache itself.
            if self.remote is not None and done.source is not Source.RAN_REMOTELY:
                self.remote.upload(key.key)
        return ActionOutcome(
            action,
            done.source,
            done.failure,
            key.key,
            time.monotonic() - start,
            done.lane,
            explanation,
            remote_miss,
            done.printed,
        )

    def interrupt(self) -> None:
        """Ctrl-C: kill what runs; nothing more is stored."""
        self._interrupted = True
        with self._spawner_lock:
            racing = list(self._racing)
        for spawner in (self.local, self.worker, self.remote_spawner, *racing):
            if spawner is not None:
                spawner.cancel_all()

    def shutdown(self) -> None:
        self.execroots.close()
        for spawner in (self.local, self.worker, self.remote_spawner):
            if spawner is not None:
                spawner.close()
        self.sandboxing.close()
        if self.remote is not None:
            self.remote.close()

    # -- keys and caches ------------------------------------------------------

    def _key(self, action: Action) -> ActionKey:
        first = action.outputs[0].path
        known = self._keys.get(first)
        if known is not None and known[0] is action:
            return known[1]
        digests, executable = self._inputs(action)
        key = compute_key(action, digests, self.options.digest_function, executable)
        self._keys[first] = (action, key)
        return key

    def _input_files(self, action: Action) -> dict[str, Digest]:
        """The digest of every concrete input file; a directory input gives its files."""
        return self._inputs(action)[0]

    def _inputs(self, action: Action) -> tuple[dict[str, Digest], set[str]]:
        """The digest of every concrete input file (a directory input gives its files), and
        which of them are executable."""
        digests: dict[str, Digest] = {}
        executable: set[str] = set()
        outputs, sources, root = self.outputs, self.digest_cache, self._root
        generated_executable = outputs.executable
        try:
            for file in action.inputs:
                if file.directory:
                    for path in outputs.files_in(file.path):
                        digests[path] = outputs.digest(path)
                        if path in generated_executable:
                            executable.add(path)
                elif file.is_source:
                    digests[file.path], runnable = sources.digest_and_mode(root + file.path)
                    if runnable:
                        executable.add(file.path)
                else:
                    digests[file.path] = outputs.digest(file.path)
                    if file.path in generated_executable:
                        executable.add(file.path)
        except OSError as error:
            raise _ActionFailed(
                f"cannot read its input {file.path}: {error.strerror} (make it readable, "
                "or take it out of the target's sources)"
            ) from None
        except KilnError as error:  # it changed while being hashed
            raise _ActionFailed(error.message) from None
        return digests, executable

    def _cached(self, action: Action, key: ActionKey) -> tuple[Source | None, bool]:
        """Where a result for `key` came from, delivered; and whether the remote missed."""
        result = self.action_cache.lookup(key.key, self.cas)
        if result is not None and self._deliver_cached(action, key, result):
            return Source.DISK_CACHE_HIT, False
        if self.remote is None:
            return None, False
        result, remote = self.remote.lookup(action, key.key)
        if result is not None and self._deliver_cached(action, key, result):
            return Source.REMOTE_CACHE_HIT, False
        return None, remote in ("miss", "hit")  # a hit whose blob went meanwhile: a miss

    def _deliver_cached(self, action: Action, key: ActionKey, result: ActionResult) -> bool:
        try:
            self._deliver(action, key, result)
        except KilnError:
            return False  # a blob was collected between lookup and use: run it
        self.explain_log.record(action, key)
        return True

    # -- running --------------------------------------------------------------

    def _run_or_write(self, action: Action, key: ActionKey, lane: str) -> _Done:
        """Run or write the action; once more if the outputs it stored left the cache before
        they were placed (a concurrent expunge of a shared disk cache)."""
        for attempt in range(2):
            try:
                if action.content is not None:
                    return self._write(action, key, lane)
                return self._run(action, key, lane)
            except MissingBlob:
                if attempt:
                    raise _ActionFailed(
                        "its outputs left the disk cache as they were stored (a concurrent "
                        "'kiln clean --expunge_disk_cache'?): build again"
                    ) from None
        raise AssertionError("unreachable")

    def _write(self, action: Action, key: ActionKey, lane: str) -> _Done:
        assert action.content is not None
        digest = self.cas.put_bytes(action.content)
        output = OutputFile(action.primary_output.path, digest, action.is_executable)
        if action.is_executable:
            self.cas.put_file(self.cas.path(digest), digest, executable=True)
        result = ActionResult(output_files=(output,))
        self.action_cache.put(key.key, result)
        self._deliver(action, key, result)
        return _Done(Source.FILE_WRITE, lane)

    def _run(self, action: Action, key: ActionKey, lane: str) -> _Done:
        placement = self.placement.placement(action) if self.placement is not None else None
        if placement == "dynamic" and self.remote_spawner is not None:
            return self._run_dynamic(action, key, lane)
        if placement == "remote" and self.remote_spawner is not None:
            remote = self._run_remotely(action, key, lane)
            if remote is not None:
                return remote
            # unreachable, and --remote_local_fallback: on with it here
        return self._run_here(action, key, lane, placement)

    def _run_here(
        self,
        action: Action,
        key: ActionKey,
        lane: str,
        placement: str | None,
        spawner: Spawner | None = None,
        claim: Callable[[], bool] | None = None,
    ) -> _Done:
        """Run the action in an execroot here. `claim` (--spawn_strategy=dynamic) is asked
        before anything is stored: False means the remote run won, and this one is moot."""
        from kiln.exec import execroot_files as files
        from kiln.exec.spawn import SpawnRequest

        try:
            argv = self._argv(action)
        except KilnError as error:
            return _Done(None, lane, Failure(error.format()))
        digests = self._input_files(action)
        try:
            root = self.execroots.create(action, key.key, digests, self.outputs.executable)
        except InputUnavailable as unavailable:
            raise _ActionFailed(str(unavailable)) from None
        except OSError as error:
            raise _ActionFailed(f"cannot prepare its execroot: {_os_error(error)}") from None
        stdout, stderr = root / ".tmp" / "stdout", root / ".tmp" / "stderr"
        try:
            env = dict(action.env)
            env.setdefault("TMPDIR", str(root / ".tmp"))
            if self.options.verbose_failures:
                env[VERBOSE_FAILURES_ENV] = "1"
            spawner = spawner or self._spawner_for(action, placement)
            if action.argv[:1] == (PYTHON_INTERPRETER,):  # torch's state: actions/temp_state.py
                sandboxed = bool(getattr(spawner, "sandboxed", False))
                env.setdefault(TORCH_TMP_ENV, self.sandboxing.torch_tmp(sandboxed))
            before = files.input_stats(root, digests)
            run = spawner.spawn(
                SpawnRequest(
                    argv,
                    env,
                    root,
                    stdout,
                    stderr,
                    self.options.action_timeout,
                    action.resources,
                    outputs=action.outputs,
                    inputs=tuple(digests),
                    platform=action.platform,
                    description=action.describe(),
                )
            )
            modified = files.modified_inputs(before, files.input_stats(root, digests))
            if modified:
                self._forget_generated({p: digests[p] for p in modified})
                source = "" if files.is_generated(modified[0]) else ", a source file"
                message = (
                    f"modified its input {modified[0]}{source} (inputs are read-only; write "
                    "to a declared output instead)"
                )
                return _Done(run.source, run.lane or lane, Failure(message))
            lane = run.lane or lane
            if self._interrupted:
                return _Done(None, lane, Failure("interrupted"))
            text = files.read_text(stdout) + files.read_text(stderr)
            if not run.succeeded:
                message = run.failure_message + files.full_disk_note(root)
                return _Done(run.source, lane, Failure(message, text))
            if claim is not None and not claim():
                return _Done(None, lane, Failure("the remote run finished first"))
            missing = files.missing_outputs(root, action)
            if missing:
                message = (
                    "did not create declared output"
                    + ("s " if len(missing) > 1 else " ")
                    + ", ".join(missing)
                )
                return _Done(run.source, lane, Failure(message, text))
            try:
                result = self._store(action, root, stdout, stderr, run.seconds, lane)
            except OSError as error:
                message = f"cannot store its outputs in the disk cache: {_os_error(error)}"
                return _Done(run.source, lane, Failure(message, text))
            if self._interrupted:  # Ctrl-C arrived while storing: record nothing
                return _Done(None, lane, Failure("interrupted"))
            self.action_cache.put(key.key, result)
            self._deliver(action, key, result)
            return _Done(run.source, lane, printed=files.read_text(stdout))
        finally:
            self.execroots.release(root)

    def _argv(self, action: Action) -> tuple[str, ...]:
        """The command to run: a Python action's interpreter is its environment's (made
        first if need be: kiln.pyenv), whatever interpreter analysis wrote in argv. The
        worker spawner pools workers by that interpreter, so by environment."""
        if action.python_env is None:
            return action.argv
        with self._spawner_lock:
            if self._environments is None:
                from kiln.pyenv.environment import EnvironmentStore

                self._environments = EnvironmentStore(
                    self.output_base.python_envs,
                    self.options.python or sys.executable,
                    find_links=self.options.pip_find_links,
                    report=self.report,
                )
            environments = self._environments
        return (environments.python_for(action.python_env), *action.argv[1:])

    def _store(
        self, action: Action, root: Path, stdout: Path, stderr: Path, seconds: float, lane: str
    ) -> ActionResult:
        """Put a finished action's outputs and what it printed into the CAS."""
        from kiln.exec import execroot_files as files

        outputs = []
        for path in files.output_files(root, action):
            executable = os.access(root / path, os.X_OK)
            files.seal_output(root / path, executable)
            digest = self.cas.put_file(root / path, executable=executable)
            outputs.append(OutputFile(path, digest, executable))
        files.seal_output(stdout, False)
        files.seal_output(stderr, False)
        return ActionResult(
            output_files=tuple(outputs),
            exit_code=0,
            stdout_digest=self.cas.put_file(stdout),
            stderr_digest=self.cas.put_file(stderr),
            execution_seconds=seconds,
            worker=lane,
        )

    def _run_dynamic(self, action: Action, key: ActionKey, lane: str) -> _Done:
        """--spawn_strategy=dynamic, as Bazel's: here and remotely at once; the first
        success is stored, and the other run is killed (here) or cancelled (remotely)."""
        from kiln.exec.local_spawner import LocalSpawner

        winner: list[str] = []
        claim_lock = threading.Lock()

        def claim(branch: str) -> bool:
            with claim_lock:
                if not winner:
                    winner.append(branch)
                return winner == [branch]

        # Its own spawner, and sandbox, so that killing it kills only this run.
        private = self.sandboxing.private()
        here = LocalSpawner(self.options.python, private)
        with self._spawner_lock:
            self._racing.add(here)
        if self._interrupted:  # Ctrl-C came before `here` was known to interrupt()
            here.cancel_all()
        give_up = threading.Event()
        remote: list[_Done | None] = []

        def run_remotely() -> None:
            done = self._run_remotely(action, key, lane, give_up, lambda: claim("remote"))
            remote.append(done)
            if done is not None and done.failure is None:
                here.cancel_all()

        thread = threading.Thread(target=run_remotely, name="kiln-dynamic", daemon=True)
        thread.start()
        try:
            local = self._run_here(action, key, lane, "local", here, lambda: claim("local"))
        finally:
            if winner == ["local"]:
                give_up.set()
            thread.join()
            here.close()
            if private is not None:
                private.close()
            with self._spawner_lock:
                self._racing.discard(here)
        if winner == ["remote"] and remote and remote[0] is not None:
            return remote[0]
        return local

    def _run_remotely(
        self,
        action: Action,
        key: ActionKey,
        lane: str,
        give_up: threading.Event | None = None,
        claim: Callable[[], bool] | None = None,
    ) -> _Done | None:
        """Run the action on the remote executor; None if the cluster is unreachable and
        the action may run here instead (--remote_local_fallback). `give_up` and `claim`
        are the dynamic strategy's (see _run_here)."""
        from kiln.exec.remote_spawn import RemoteInput, RemoteSpawn

        assert self.remote_spawner is not None
        inputs: dict[str, RemoteInput] = {}
        for path, digest in self._input_files(action).items():
            if path.startswith(GENERATED_ROOT + "/"):
                executable = path in self.outputs.executable
                # Never upload an unverified blob (issue 11 A1): a damaged one is removed.
                state = self.cas.check(digest, executable)
                if state is not BlobState.INTACT:
                    raise _ActionFailed(str(InputUnavailable(path, state is BlobState.DAMAGED)))
                inputs[path] = RemoteInput(digest, executable, self.cas.path(digest, executable))
            else:
                source = self.workspace_root / path
                inputs[path] = RemoteInput(digest, os.access(source, os.X_OK), source)
        try:
            wheels = self._remote_wheels(action)
        except KilnError as error:
            return _Done(None, lane, Failure(error.format()))
        ran = self.remote_spawner.spawn_remote(
            RemoteSpawn(action, key.key, inputs, self.options.action_timeout, give_up, wheels)
        )
        if self._interrupted:
            return _Done(None, ran.lane or lane, Failure("interrupted"))
        if ran.unreachable and self._may_fall_back(action):
            return None
        if ran.result is None:
            ran_at = None if ran.unreachable else Source.RAN_REMOTELY
            return _Done(ran_at, ran.lane or lane, Failure(_remote_failure(ran), ran.output))
        if claim is not None and not claim():
            return _Done(None, ran.lane or lane, Failure("the local run finished first"))
        self.action_cache.put(key.key, ran.result)
        self._deliver(action, key, ran.result)
        return _Done(Source.RAN_REMOTELY, ran.lane or lane, printed=ran.printed)

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

        with self._spawner_lock:
            if self._wheels is None:
                self._wheels = WheelStore(
                    self.output_base.wheels,
                    self.options.python or sys.executable,
                    find_links=self.options.pip_find_links,
                    report=self.report,
                )
            store = self._wheels
        install = to_install(action.python_env, toolchain.by_name())
        return tuple(
            RemoteWheel(w.path.name, self.digest_cache.digest(str(w.path)), w.path)
            for w in store.wheels(install)
        )

    def _may_fall_back(self, action: Action) -> bool:
        if not self.options.remote_local_fallback or self.placement is None:
            return False
        return self.placement.can_run_here(action)

    def _spawner_for(self, action: Action, placement: str | None = None) -> Spawner:
        flavour = placement if placement in ("local", "worker") else self.options.strategy
        with self._spawner_lock:
            if action.supports_workers and flavour == "worker":
                if self.worker is None:
                    from kiln.exec.worker_spawner import WorkerSpawner

                    self.worker = WorkerSpawner(
                        self.options.python,
                        self.options.worker_max_instances,
                        self.options.worker_preload,
                        self.sandboxing.get(),
                    )
                    self._cancel_if_interrupted(self.worker)
                return self.worker
            if self.local is None:
                from kiln.exec.local_spawner import LocalSpawner

                self.local = LocalSpawner(self.options.python, self.sandboxing.get())
                self._cancel_if_interrupted(self.local)
            return self.local

    def _cancel_if_interrupted(self, spawner: Spawner) -> None:
        """A Ctrl-C that came while the spawner started (the sandbox's first host takes a
        while on a loaded machine) found no spawner to cancel: this one is cancelled now,
        so its first command is never started (interrupt() sets the flag before it looks)."""
        if self._interrupted:
            spawner.cancel_all()

    def _forget_generated(self, digests: dict[str, Digest]) -> None:
        """Drop the blobs of generated inputs an action wrote through: they may be damaged."""
        for path, digest in digests.items():
            if path.startswith(GENERATED_ROOT + "/"):
                with contextlib.suppress(OSError):
                    os.unlink(self.cas.path(digest))

    def _damaged_blob(self, digest: Digest, path: Path) -> None:
        self.warn(
            f"removed a damaged blob from the disk cache: {path} no longer holds the content "
            "its name says (written in place through a hard link, e.g. a kiln-out/ file?); "
            "whatever needs it is built again"
        )

    # -- delivering -----------------------------------------------------------

    def _deliver(self, action: Action, key: ActionKey, result: ActionResult) -> None:
        """Record output digests for dependents and place outputs in kiln-out/."""
        from kiln.exec import execroot_files as files

        path = action.primary_output.path
        try:
            for path in (f.path for f in action.outputs if f.directory):
                prefix = path + "/"
                inside = {o.path for o in result.output_files if o.path.startswith(prefix)}
                files.clear_stale(self.workspace_root / path, {p[len(prefix) :] for p in inside})
            self.outputs.record(action, result.output_files)
            for output in result.output_files:
                path = output.path
                dest = self.workspace_root / path
                blob = self.cas.path(output.digest, output.is_executable)
                with contextlib.suppress(OSError):
                    if os.stat(dest).st_ino == os.stat(blob).st_ino:
                        continue  # already this very blob: the no-op build path
                self.cas.materialize(output.digest, dest, output.is_executable)
        except OSError as error:
            # The file system is in the way: the action fails, naming what to remove.
            reason = files.in_the_way(self.workspace_root, path) or error.strerror
            raise _ActionFailed(
                f"cannot place {path}: {reason} (remove it, or run 'kiln clean')"
            ) from None
        self.state.record(action.primary_output.path, key.key, result)


def _remote_failure(ran: RemoteSpawnResult) -> str:
    if ran.message:
        return ran.message
    return f"exited with code {ran.exit_code}"


def _os_error(error: OSError) -> str:
    where = f" ({error.filename})" if error.filename else ""
    return f"{error.strerror or error}{where}"


@contextlib.contextmanager
def open_executor(
    workspace_root: Path,
    output_base: OutputBase,
    disk_cache: DiskCache,
    options: ExecOptions,
) -> Iterator[Executor]:
    """An executor with its logs open; on the way out (success, failure, Ctrl-C) its
    workers and execroots are gone and its logs saved."""
    function = options.digest_function
    digest_cache = FileDigestCache(output_base.digest_log(function), function)
    blob_stamps = FileDigestCache(output_base.blob_log(function), function, ctime=False, lazy=True)
    executor = Executor(
        workspace_root=workspace_root,
        output_base=output_base,
        cas=ContentStore(disk_cache.root, function, blob_stamps),
        action_cache=ActionCache(disk_cache.root),
        digest_cache=digest_cache,
        explain_log=ExplainLog(output_base.explain_log),
        state=ActionState(output_base.action_state, workspace_root),
        options=options,
    )
    executor.execroots.sweep()
    try:
        yield executor
    finally:
        try:
            executor.shutdown()
        finally:
            digest_cache.close()
            blob_stamps.close()
            executor.explain_log.save()
            executor.state.save()
