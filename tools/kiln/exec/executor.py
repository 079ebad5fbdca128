"""Executing one action: key, cache lookup, run in an execroot, store, deliver.

    digests of inputs -> key -> action cache hit?  -> materialize outputs
                                          miss     -> remote cache hit? (remote_spawn_cache.py)
                                                      -> download, verify -> materialize
                                          miss     -> execroot -> run -> check outputs
                                                      -> CAS + action cache -> materialize
                                                      -> upload to the remote cache

Outputs reach kiln-out/ as hardlinks of CAS blobs, each placed atomically,
so no partial file is ever visible there. Nothing is cached for an action
that failed or was interrupted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kiln.action_graph import GENERATED_ROOT, Action
from kiln.cache.action_cache import ActionCache, ActionResult, OutputFile
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest
from kiln.cache.digest_cache import FileDigestCache
from kiln.errors import KilnError
from kiln.exec.action_key import ActionKey, compute_key
from kiln.exec.action_state import ActionState
from kiln.exec.execroot import Execroots
from kiln.exec.explain import ExplainLog
from kiln.exec.local_runner import LocalRunner, RunResult
from kiln.layout import OutputBase

if TYPE_CHECKING:
    from kiln.exec.remote_spawn_cache import RemoteSpawnCache
    from kiln.workers.pool import WorkerPool

Status = Literal["cached", "executed", "failed"]


@dataclass(frozen=True)
class ExecOptions:
    digest_function: str = "sha256"
    strategy: Literal["local", "worker"] = "worker"
    worker_max_instances: int = 2
    action_timeout: float | None = None
    explain: bool = False
    python: str = ""
    # Modules a worker imports once at start: what Python actions would import each time.
    worker_preload: tuple[str, ...] = ("torch", "torch._inductor")


@dataclass(frozen=True)
class ActionOutcome:
    action: Action
    status: Status
    key: str = ""
    seconds: float = 0.0
    strategy: str = ""  # local, worker, write, or the cache that hit: disk, remote
    lane: str = ""
    message: str = ""  # why it failed
    output_text: str = ""  # the action's stdout and stderr, shown on failure
    explanation: str = ""
    remote: str = ""  # the remote cache: hit, miss, or "" (not asked)
    stdout: str = ""  # what a successful action printed, shown as Bazel's "INFO: From ..."


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
    runner: LocalRunner = field(default_factory=LocalRunner)
    remote: RemoteSpawnCache | None = None  # --remote_cache
    output_digests: dict[str, Digest] = field(default_factory=dict)
    _pool: WorkerPool | None = None
    _pool_lock: threading.Lock = field(default_factory=threading.Lock)
    # Keys by id(action); the action is kept too, so its id is never reused meanwhile.
    _keys: dict[int, tuple[Action, ActionKey]] = field(default_factory=dict)
    # Generated files that are executable: their blobs are the CAS's ".x" copies.
    executable_outputs: set[str] = field(default_factory=set)
    # Directory outputs already built: directory path -> the file paths under it.
    directory_files: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.execroots = Execroots(self.output_base.execroot, self.workspace_root, self.cas)

    # -- the two entry points -----------------------------------------------

    def up_to_date(self, action: Action) -> ActionOutcome | None:
        """The no-op path, cheap enough for the scheduler's own thread: the action's key
        is what kiln-out/ was last built with, and its files there are untouched."""
        key = self._key(action)
        outputs = self.state.current(action.primary_output.path, key.key)
        if outputs is None:
            return None
        for out in outputs:
            self.output_digests[out.path] = out.digest
            if out.is_executable:
                self.executable_outputs.add(out.path)
        for directory in (f.path for f in action.outputs if f.directory):
            prefix = directory + "/"
            self.directory_files[directory] = [o.path for o in outputs if o.path.startswith(prefix)]
        return ActionOutcome(action, "cached", key.key, 0.0, "up-to-date")

    def execute(self, action: Action, lane: str) -> ActionOutcome:
        start = time.monotonic()
        key = self._key(action)
        result = self.action_cache.lookup(key.key, self.cas)
        if result is not None:
            try:
                self._deliver(action, key, result)
            except KilnError:
                result = None  # a blob was collected between lookup and use: run it
            else:
                self.explain_log.record(action, key)
                return ActionOutcome(
                    action, "cached", key.key, time.monotonic() - start, "disk", lane
                )
        remote = ""
        if self.remote is not None:
            result, remote = self.remote.lookup(action, key.key)
            if result is not None:
                try:
                    self._deliver(action, key, result)
                except KilnError:
                    remote = "miss"  # a blob was collected meanwhile: run it
                else:
                    self.explain_log.record(action, key)
                    seconds = time.monotonic() - start
                    return ActionOutcome(
                        action, "cached", key.key, seconds, "remote", lane, remote="hit"
                    )
        digests = self._input_files(action)
        explanation = self.explain_log.why(action, key) if self.options.explain else ""
        if remote == "miss" and explanation:
            explanation = "remote cache miss; " + explanation
        if action.content is not None:
            outcome = self._write(action, key, lane)
        else:
            outcome = self._run(action, key, digests, lane)
        if outcome.status == "executed":
            self.explain_log.record(action, key)
            if self.remote is not None:
                self.remote.upload(key.key)
        return ActionOutcome(
            action,
            outcome.status,
            key.key,
            time.monotonic() - start,
            outcome.strategy,
            outcome.lane,
            outcome.message,
            outcome.output_text,
            explanation,
            remote,
            outcome.stdout,
        )

    # -- pieces ---------------------------------------------------------------

    def _key(self, action: Action) -> ActionKey:
        known = self._keys.get(id(action))
        if known is not None:
            return known[1]
        key = compute_key(action, self._input_files(action), self.options.digest_function)
        self._keys[id(action)] = (action, key)
        return key

    def _input_files(self, action: Action) -> dict[str, Digest]:
        """The digest of every concrete input file; a directory input gives its files."""
        files: dict[str, Digest] = {}
        for file in action.inputs:
            if file.directory:
                for path in self.directory_files[file.path]:
                    files[path] = self.output_digests[path]
            else:
                files[file.path] = self._digest(file.path, file.is_source)
        return files

    def _digest(self, path: str, is_source: bool) -> Digest:
        if not is_source:
            return self.output_digests[path]
        return self.digest_cache.digest(str(self.workspace_root / path))

    def _write(self, action: Action, key: ActionKey, lane: str) -> ActionOutcome:
        assert action.content is not None
        digest = self.cas.put_bytes(action.content)
        output = OutputFile(action.primary_output.path, digest, action.is_executable)
        if action.is_executable:
            self.cas.put_file(self.cas.path(digest), digest, executable=True)
        result = ActionResult(output_files=(output,))
        self.action_cache.put(key.key, result)
        self._deliver(action, key, result)
        return ActionOutcome(action, "executed", key.key, strategy="write", lane=lane)

    def _run(
        self, action: Action, key: ActionKey, digests: dict[str, Digest], lane: str
    ) -> ActionOutcome:
        root = self.execroots.create(action, key.key, digests, self.executable_outputs)
        stdout, stderr = root / ".tmp" / "stdout", root / ".tmp" / "stderr"
        try:
            env = dict(action.env)
            env.setdefault("TMPDIR", str(root / ".tmp"))
            before = _input_stats(root, digests)
            run = self._spawn(action, env, root, stdout, stderr)
            if _input_stats(root, digests) != before:
                self._forget_inputs(action, digests)
                return ActionOutcome(
                    action,
                    "failed",
                    message="modified one of its inputs (inputs are read-only; write to a "
                    "declared output instead)",
                    lane=lane,
                )
            text = _read_text(stdout) + _read_text(stderr)
            strategy = "worker" if run.lane.startswith("worker") else "local"
            lane = run.lane or lane
            if self.runner.cancelled:
                return ActionOutcome(action, "failed", message="interrupted", lane=lane)
            if run.exit_code != 0 or run.timed_out or run.crashed:
                message = run.message or f"exited with code {run.exit_code}"
                return ActionOutcome(
                    action,
                    "failed",
                    message=message,
                    output_text=text,
                    lane=lane,
                    strategy=strategy,
                )
            missing = [
                f.path
                for f in action.outputs
                if not ((root / f.path).is_dir() if f.directory else (root / f.path).is_file())
            ]
            if missing:
                return ActionOutcome(
                    action,
                    "failed",
                    message="did not create declared output"
                    + ("s " if len(missing) > 1 else " ")
                    + ", ".join(missing),
                    output_text=text,
                    lane=lane,
                    strategy=strategy,
                )
            outputs = []
            for path in _output_files(root, action):
                executable = os.access(root / path, os.X_OK)
                _seal_output(root / path, executable)
                digest = self.cas.put_file(root / path, executable=executable)
                outputs.append(OutputFile(path, digest, executable))
            _seal_output(stdout, False)
            _seal_output(stderr, False)
            result = ActionResult(
                output_files=tuple(outputs),
                exit_code=0,
                stdout_digest=self.cas.put_file(stdout),
                stderr_digest=self.cas.put_file(stderr),
                execution_seconds=run.seconds,
                worker=lane,
            )
            if self.runner.cancelled:  # Ctrl-C arrived while storing: record nothing
                return ActionOutcome(action, "failed", message="interrupted", lane=lane)
            self.action_cache.put(key.key, result)
            self._deliver(action, key, result)
            return ActionOutcome(
                action,
                "executed",
                key.key,
                run.seconds,
                strategy,
                lane,
                output_text=text,
                stdout=_read_text(stdout),
            )
        finally:
            self.execroots.release(root)

    def _forget_inputs(self, action: Action, digests: dict[str, Digest]) -> None:
        del action
        for path, digest in digests.items():
            if path.startswith(GENERATED_ROOT + "/"):
                with contextlib.suppress(OSError):
                    os.unlink(self.cas.path(digest))

    def _spawn(
        self, action: Action, env: dict[str, str], root: Path, stdout: Path, stderr: Path
    ) -> RunResult:
        timeout = self.options.action_timeout
        if action.supports_workers and self.options.strategy == "worker":
            from kiln.workers.protocol import WorkRequest

            response = self._worker_pool(env).run(
                WorkRequest(action.argv, env, str(root), str(stdout), str(stderr), timeout)
            )
            return RunResult(
                response.exit_code,
                0.0,
                crashed=response.crashed,
                message=response.message,
                lane=response.worker_id,
            )
        return self.runner.run(action.argv, env, root, stdout, stderr, timeout)

    def _worker_pool(self, env: dict[str, str]) -> WorkerPool:
        # Settings Python reads only at start (PYTHONHASHSEED, ...) come from the
        # environment of the first action that needs a worker; actions share it.
        with self._pool_lock:
            if self._pool is None:
                from kiln.workers.pool import WorkerPool

                self._pool = WorkerPool(
                    self.options.python,
                    self.options.worker_max_instances,
                    preload=self.options.worker_preload,
                    base_env={k: v for k, v in env.items() if k != "TMPDIR"},
                )
            return self._pool

    def _deliver(self, action: Action, key: ActionKey, result: ActionResult) -> None:
        """Record output digests for dependents and place outputs in kiln-out/."""
        for directory in (f.path for f in action.outputs if f.directory):
            inside = [o.path for o in result.output_files if o.path.startswith(directory + "/")]
            self.directory_files[directory] = inside
            _clear_stale(self.workspace_root / directory, {p[len(directory) + 1 :] for p in inside})
        for output in result.output_files:
            self.output_digests[output.path] = output.digest
            if output.is_executable:
                self.executable_outputs.add(output.path)
            dest = self.workspace_root / output.path
            blob = self.cas.path(output.digest, output.is_executable)
            try:
                if os.stat(dest).st_ino == os.stat(blob).st_ino:
                    continue  # already this very blob: the no-op build path
            except FileNotFoundError:
                pass
            self.cas.materialize(output.digest, dest, output.is_executable)
        self.state.record(action.primary_output.path, key.key, result)

    def shutdown(self) -> None:
        self.execroots.close()
        if self._pool is not None:
            self._pool.shutdown()
        if self.remote is not None:
            self.remote.close()

    def interrupt(self) -> None:
        self.runner.kill_all()
        if self._pool is not None:
            self._pool.kill_all()


def _output_files(root: Path, action: Action) -> list[str]:
    """Every file the action declared: its output files, and all files in its directories."""
    paths: list[str] = []
    for file in action.outputs:
        if not file.directory:
            paths.append(file.path)
            continue
        for dirpath, _, names in os.walk(root / file.path):
            rel = os.path.relpath(dirpath, root)
            paths.extend(f"{rel}/{name}" for name in sorted(names))
    return paths


def _seal_output(path: Path, executable: bool) -> None:
    """Give a finished action's file its blob mode, so put_file links it into the CAS.

    A link costs no copy, and removing the execroot then frees no data. Only a
    regular file with a single link is changed: never a symlink's target, nor
    an inode the action linked from elsewhere (a blob among its inputs).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return  # a symlink: put_file copies what it points to
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            os.fchmod(fd, 0o555 if executable else 0o444)
    finally:
        os.close(fd)


def _clear_stale(directory: Path, keep: set[str]) -> None:
    """Remove files a previous build left in an output directory."""
    for dirpath, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.relpath(path, directory) not in keep:
                os.unlink(path)


def _input_stats(root: Path, inputs: dict[str, Digest]) -> list[tuple[int, int]]:
    """mtime and size of the generated inputs, which are hardlinks of CAS blobs.

    They are read-only, but not to root: an action that writes through one
    would corrupt the cache, so a change is caught and the blob dropped.
    """
    stats = []
    for path in inputs:
        if path.startswith(GENERATED_ROOT + "/"):
            try:
                st = os.stat(root / path)
                stats.append((st.st_mtime_ns, st.st_size))
            except FileNotFoundError:
                stats.append((-1, -1))
    return stats


def _read_text(path: Path, limit: int = 64 * 1024) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        return ""
    text = data[:limit].decode(errors="replace")
    return text + ("\n[... output truncated ...]\n" if len(data) > limit else "")
