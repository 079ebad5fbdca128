"""Running one action in a private execroot: the one run path, here and on a remote node.

    make the execroot (its declared inputs only) -> spawn -> modified inputs? ->
    exit code -> declared outputs present? -> outputs into the CAS -> an ActionResult

The driver's strategies (strategies.py) and a worker node (remote_exec/node_runner.py)
both call run_in_execroot; they differ only in the Machine they pass: where execroots
come from (the driver links sources from the workspace, a node materializes every input
from its CAS), what a sandboxed command calls the torch state, and how Ctrl-C is seen.
The action cache and kiln-out/ are the caller's: this module stores blobs, never an entry.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kiln.action_graph import PYTHON_INTERPRETER, Action
from kiln.cache.action_cache import ActionResult, OutputFile
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest
from kiln.exec.header_requests import REPLIES_DIR, REQUESTS_FILE, HeaderRequests
from kiln.exec.outcome import Failure, Source
from kiln.exec.spawn import Spawner, SpawnRequest, SpawnResult

# What kiln.actions.spec reads to print a failing action's traceback.
VERBOSE_FAILURES_ENV = "KILN_VERBOSE_FAILURES"
# What kiln.actions.temp_state reads for torch's state (the same string as sandboxing's).
TORCH_TMP_ENV = "KILN_TORCH_TMP"
# Only in a sandbox: the read-only store of torch's precompiled headers, and where the
# action asks kiln for those it lacks and reads the answers (actions/header_store.py:
# the same strings; exec/header_requests.py serves them).
TORCH_STORE_ENV = "KILN_TORCH_STORE"
SANDBOXED_TORCH_STORE = "/tmp/kiln-torch-store"
PCH_REQUESTS_ENV = "KILN_PCH_REQUESTS"
PCH_REPLIES_ENV = "KILN_PCH_REPLIES"


class ExecrootMaker(Protocol):
    def create(self, action: Action, inputs: Mapping[str, Digest], executable: Set[str]) -> Path:
        """A directory holding exactly `inputs` (by path) and the output directories."""
        ...

    def release(self, root: Path) -> None:
        """The action is done with `root`."""
        ...


class RunFailed(Exception):
    """The action could not be started at all (its execroot, an unreadable input)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Machine:
    """Where run_in_execroot runs actions: this host's or a node's parts."""

    cas: ContentStore
    execroots: ExecrootMaker
    # The torch state's path as a command sees it (sandboxed or not): sandboxing.torch_tmp.
    torch_tmp: Callable[[bool], str]
    interrupted: Callable[[], bool] = lambda: False
    # Blobs of generated inputs an action wrote through: they may be damaged.
    forget: Callable[[Mapping[str, Digest]], None] = lambda digests: None
    # kiln's header maker, on one header a running sandboxed action asks for (the request
    # line, the action's execroot), returning once it is published or cannot be:
    # sandboxing.make_header. None: actions make the headers they lack themselves.
    make_header: Callable[[str, Path], None] | None = None


@dataclass(frozen=True)
class Job:
    action: Action
    argv: tuple[str, ...]  # argv[0] may still be PYTHON_INTERPRETER: the spawner resolves it
    inputs: Mapping[str, Digest]  # every concrete input file, by path
    executable: Set[str]  # which generated inputs are executable
    timeout: float | None
    env: Mapping[str, str] = field(default_factory=dict)  # over the action's: outside the key
    lane: str = ""  # the profile lane; a spawner's own (worker-2) wins
    worker: str = ""  # ActionResult.worker; the lane when empty


@dataclass(frozen=True)
class Ran:
    """How run_in_execroot ended: a result (blobs stored) or a failure, and where it ran."""

    source: Source | None
    lane: str
    result: ActionResult | None = None
    failure: Failure | None = None
    printed: str = ""  # stdout of a success ("INFO: From ...")
    ended: SpawnResult | None = None  # how the command ended, if it ran


def run_in_execroot(
    job: Job, spawner: Spawner, machine: Machine, claim: Callable[[], bool] | None = None
) -> Ran:
    """Run `job` with `spawner` in a fresh execroot. `claim` (--spawn_strategy=dynamic) is
    asked before anything is stored: False means the other run won, and this one is moot."""
    from kiln.exec import execroot_files as files

    action, lane = job.action, job.lane
    try:
        root = machine.execroots.create(action, job.inputs, job.executable)
    except OSError as error:
        raise RunFailed(f"cannot prepare its execroot: {os_error(error)}") from None
    stdout, stderr = root / ".tmp" / "stdout", root / ".tmp" / "stderr"
    try:
        env = dict(action.env)
        env.setdefault("TMPDIR", str(root / ".tmp"))
        env.update(job.env)
        headers: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        if action.argv[:1] == (PYTHON_INTERPRETER,):  # torch's state: actions/temp_state.py
            env.setdefault(TORCH_TMP_ENV, machine.torch_tmp(spawner.sandboxed))
            if spawner.sandboxed:
                env.setdefault(TORCH_STORE_ENV, SANDBOXED_TORCH_STORE)
                if machine.make_header is not None:
                    headers = _serve_headers(root, env, machine.make_header)
        before = files.input_stats(root, job.inputs)
        with headers:
            run = spawner.spawn(
                SpawnRequest(
                    job.argv,
                    env,
                    root,
                    stdout,
                    stderr,
                    job.timeout,
                    action.resources,
                    outputs=action.outputs,
                    inputs=tuple(job.inputs),
                    platform=action.platform,
                    description=action.describe(),
                )
            )
        lane = run.lane or lane
        modified = files.modified_inputs(before, files.input_stats(root, job.inputs))
        if modified:
            machine.forget({p: job.inputs[p] for p in modified})
            source = "" if files.is_generated(modified[0]) else ", a source file"
            message = (
                f"modified its input {modified[0]}{source} (inputs are read-only; write "
                "to a declared output instead)"
            )
            return Ran(run.source, lane, failure=Failure(message), ended=run)
        if machine.interrupted():
            return Ran(None, lane, failure=Failure("interrupted"), ended=run)
        text = files.read_text(stdout) + files.read_text(stderr)
        if not run.succeeded:
            message = run.failure_message + files.full_disk_note(root)
            return Ran(run.source, lane, failure=Failure(message, text), ended=run)
        if claim is not None and not claim():
            return Ran(None, lane, failure=Failure("the remote run finished first"), ended=run)
        missing = files.missing_outputs(root, action)
        if missing:
            message = (
                "did not create declared output"
                + ("s " if len(missing) > 1 else " ")
                + ", ".join(missing)
            )
            return Ran(run.source, lane, failure=Failure(message, text), ended=run)
        try:
            result = _store(machine.cas, action, root, run.seconds, job.worker or lane)
        except OSError as error:
            message = f"cannot store its outputs in the disk cache: {os_error(error)}"
            return Ran(run.source, lane, failure=Failure(message, text), ended=run)
        if machine.interrupted():  # Ctrl-C arrived while storing: record nothing
            return Ran(None, lane, failure=Failure("interrupted"), ended=run)
        return Ran(run.source, lane, result, printed=files.read_text(stdout), ended=run)
    finally:
        machine.execroots.release(root)


def _serve_headers(
    root: Path, env: dict[str, str], make_header: Callable[[str, Path], None]
) -> HeaderRequests:
    """kiln's answers to the action's requests for precompiled headers, while it runs."""
    requests, replies = root / ".tmp" / REQUESTS_FILE, root / ".tmp" / REPLIES_DIR
    env.setdefault(PCH_REQUESTS_ENV, str(requests))
    env.setdefault(PCH_REPLIES_ENV, str(replies))
    try:
        return HeaderRequests(requests, replies, lambda line: make_header(line, root))
    except OSError as error:
        raise RunFailed(f"cannot prepare its execroot: {os_error(error)}") from None


def _store(
    cas: ContentStore, action: Action, root: Path, seconds: float, worker: str
) -> ActionResult:
    """Put a finished action's outputs and what it printed into the CAS."""
    from kiln.exec import execroot_files as files

    stdout, stderr = root / ".tmp" / "stdout", root / ".tmp" / "stderr"
    outputs = []
    for path in files.output_files(root, action):
        executable = os.access(root / path, os.X_OK)
        files.seal_output(root / path, executable)
        digest = cas.put_file(root / path, executable=executable)
        outputs.append(OutputFile(path, digest, executable))
    files.seal_output(stdout, False)
    files.seal_output(stderr, False)
    return ActionResult(
        output_files=tuple(outputs),
        exit_code=0,
        stdout_digest=cas.put_file(stdout),
        stderr_digest=cas.put_file(stderr),
        execution_seconds=seconds,
        worker=worker,
    )


def os_error(error: OSError) -> str:
    where = f" ({error.filename})" if error.filename else ""
    return f"{error.strerror or error}{where}"
