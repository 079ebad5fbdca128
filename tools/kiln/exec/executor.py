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

The executor is the cache gate: key, lookup, store, deliver. What missed runs
through a strategy (strategies.py: local, worker, remote, dynamic) that the
placement policy (placement.py) picks; those that run here go through the one
execroot runner (run_in_execroot.py), as a worker node's do. Outputs reach kiln-out/
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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from kiln.action_graph import Action
from kiln.cache.action_cache import ActionCache, ActionResult, OutputFile
from kiln.cache.cas import ContentStore, MissingBlob
from kiln.cache.digest import Digest
from kiln.cache.digest_cache import FileDigestCache
from kiln.errors import KilnError
from kiln.exec.action_key import ActionKey, compute_key
from kiln.exec.action_state import ActionState, OutputRecord
from kiln.exec.built_outputs import BuiltOutputs
from kiln.exec.execroot import Execroots
from kiln.exec.explain import ExplainLog
from kiln.exec.outcome import ActionOutcome, Failure, Source
from kiln.exec.placement import PlacementPolicy
from kiln.exec.run_in_execroot import RunFailed
from kiln.exec.sandboxing import Sandboxing
from kiln.exec.strategies import HostSettings, Strategies, Work, make_strategies
from kiln.layout import DiskCache, OutputBase

if TYPE_CHECKING:
    from kiln.exec.remote_spawn import RemoteSpawner
    from kiln.exec.remote_spawn_cache import RemoteSpawnCache

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


# Ends one action with a Failure (an unreadable input, an output that cannot be placed).
_ActionFailed = RunFailed


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
    # How what missed every cache runs (strategies.py); made from `options` when not given.
    strategies: Strategies | None = None
    outputs: BuiltOutputs = field(default_factory=BuiltOutputs)
    # How a warning reaches the user (the build passes its status printer's).
    warn: Callable[[str], None] = _warn_on_stderr
    report: Callable[[str], None] = lambda text: None  # progress of making environments
    # Keys by the action's first output, which names one action of the graph; the
    # action is kept to tell it from another declaring that output (tests, reruns).
    _keys: dict[str, tuple[Action, ActionKey]] = field(default_factory=dict)
    _interrupted: bool = False

    def __post_init__(self) -> None:
        self._root = str(self.workspace_root) + "/"  # sources are read by this prefix
        self.cas.on_damaged = self._damaged_blob
        if self.strategies is None:
            self.strategies = make_strategies(
                self.workspace_root,
                self.output_base,
                self.cas,
                self.digest_cache,
                sandboxing(
                    self.workspace_root,
                    self.output_base,
                    self.cas,
                    self.options,
                    lambda message: self.warn(message),  # noqa: PLW0108 - tests set warn later
                ),
                host_settings(self.options),
                placement=PlacementPolicy(local_flavour=self.options.strategy),
                flavour=self.options.strategy,
                report=self.report,
            )
        self._strategies = self.strategies

    @property
    def execroots(self) -> Execroots:
        return self._strategies.host.execroots

    @property
    def sandboxing(self) -> Sandboxing:
        return self._strategies.host.sandboxing

    # -- the two entry points -----------------------------------------------

    def up_to_date(self, action: Action) -> ActionOutcome | None:
        """The no-op path, cheap enough for the scheduler's own thread: the action's key
        is what kiln-out/ was last built with, and its files there are untouched."""
        if action.uncached:
            return None
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

    def execute(self, action: Action, lane: str, gpus: tuple[str, ...] = ()) -> ActionOutcome:
        start = time.monotonic()
        try:
            key = self._key(action)
        except _ActionFailed as failed:
            return ActionOutcome(action, None, Failure(failed.message), lane=lane)
        try:
            source, remote_miss = (None, False) if action.uncached else self._cached(action, key)
        except _ActionFailed as failed:
            return ActionOutcome(action, None, Failure(failed.message), key.key, lane=lane)
        if source is not None:
            seconds = time.monotonic() - start
            return ActionOutcome(action, source, key=key.key, seconds=seconds, lane=lane)
        explanation = self.explain_log.why(action, key) if self.options.explain else ""
        if remote_miss and explanation:
            explanation = "remote cache miss; " + explanation
        try:
            done = self._run_or_write(action, key, lane, gpus)
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
        self._strategies.interrupt()
        self.sandboxing.stop_making_headers()

    def shutdown(self) -> None:
        # Headers still being made publish before the execroots' folder is removed.
        self.sandboxing.wait_for_headers()
        self.execroots.close()
        self._strategies.close()
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

    def _run_or_write(
        self, action: Action, key: ActionKey, lane: str, gpus: tuple[str, ...]
    ) -> _Done:
        """Run or write the action; once more if the outputs it stored left the cache before
        they were placed (a concurrent expunge of a shared disk cache)."""
        for attempt in range(2):
            try:
                if action.content is not None:
                    return self._write(action, key, lane)
                return self._run(action, key, lane, gpus)
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

    def _run(self, action: Action, key: ActionKey, lane: str, gpus: tuple[str, ...]) -> _Done:
        inputs, executable = self._input_files(action), self.outputs.executable
        work = Work(action, key.key, inputs, executable, lane, gpus)
        ran = self._strategies.pick(action).run(work)
        if ran.failure is not None or ran.result is None:
            return _Done(ran.source, ran.lane, ran.failure)
        if self._interrupted:
            return _Done(None, ran.lane, Failure("interrupted"))
        self.action_cache.put(key.key, ran.result)
        self._deliver(action, key, ran.result)
        return _Done(ran.source, ran.lane, printed=ran.printed)

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


def sandboxing(
    workspace_root: Path,
    output_base: OutputBase,
    cas: ContentStore,
    options: ExecOptions,
    warn: Callable[[str], None],
) -> Sandboxing:
    """The build's sandboxing: the workspace, the output base and the cache hidden."""
    return Sandboxing(
        options.sandbox,
        options.python,
        workspace=workspace_root,
        hidden=(workspace_root, output_base.root, cas.root),
        output_base=output_base,
        disk_cache=DiskCache(cas.root),
        warn=warn,
    )


def host_settings(options: ExecOptions) -> HostSettings:
    return HostSettings(
        python=options.python,
        timeout=options.action_timeout,
        verbose_failures=options.verbose_failures,
        pip_find_links=options.pip_find_links,
        worker_max_instances=options.worker_max_instances,
        worker_preload=options.worker_preload,
        sandbox=options.sandbox,
    )


@dataclass(frozen=True)
class Reporting:
    """How the executor talks to the user: warnings, and progress of making environments."""

    warn: Callable[[str], None] = _warn_on_stderr
    report: Callable[[str], None] = lambda text: None


@contextlib.contextmanager
def open_executor(
    workspace_root: Path,
    output_base: OutputBase,
    disk_cache: DiskCache,
    options: ExecOptions,
    *,
    placement: PlacementPolicy | None = None,
    remote: Callable[[ContentStore, ActionCache], RemoteSpawnCache] | None = None,
    remote_spawner: Callable[[ContentStore], RemoteSpawner] | None = None,
    reporting: Reporting = Reporting(),
) -> Iterator[Executor]:
    """An executor with its logs open; on the way out (success, failure, Ctrl-C) its
    workers and execroots are gone and its logs saved. `remote` opens the remote cache
    (--remote_cache), `remote_spawner` the remote executor (--remote_executor), each on
    this build's disk cache; `placement` says where each action runs."""
    function = options.digest_function
    digest_cache = FileDigestCache(output_base.digest_log(function), function)
    blob_stamps = FileDigestCache(output_base.blob_log(function), function, ctime=False, lazy=True)
    cas = ContentStore(disk_cache.root, function, blob_stamps)
    action_cache = ActionCache(disk_cache.root)
    strategies = make_strategies(
        workspace_root,
        output_base,
        cas,
        digest_cache,
        sandboxing(workspace_root, output_base, cas, options, reporting.warn),
        host_settings(options),
        placement=placement or PlacementPolicy(local_flavour=options.strategy),
        flavour=options.strategy,
        remote_spawner=remote_spawner(cas) if remote_spawner is not None else None,
        remote_local_fallback=options.remote_local_fallback,
        report=reporting.report,
    )
    executor = Executor(
        workspace_root=workspace_root,
        output_base=output_base,
        cas=cas,
        action_cache=action_cache,
        digest_cache=digest_cache,
        explain_log=ExplainLog(output_base.explain_log),
        state=ActionState(output_base.action_state, workspace_root),
        options=options,
        remote=remote(cas, action_cache) if remote is not None else None,
        strategies=strategies,
        warn=reporting.warn,
        report=reporting.report,
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
