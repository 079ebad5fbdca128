"""One action on a worker node, inside its Ray task: exactly as kiln runs it locally.

    1. refuse it unless this node matches its platform properties (the toolchain
       fingerprint: os, Python, the distributions it names, the code of its
       kiln.actions module, the GPU), naming both values
    2. fetch the inputs this node's CAS lacks from the remote cache, each verified
       against its digest as it is written (ContentStore.put_stream)
    3. a private execroot: only the declared inputs (read-only hardlinks of CAS
       blobs), the output directories, .tmp; the action's fixed environment plus
       TMPDIR and the GPUs Ray gave the task (CUDA_VISIBLE_DEVICES), neither in the key
    4. the command under the supervisor (supervisor.py), with the action timeout;
       a `python -m kiln.actions.*` action gets this node's interpreter as argv[0]:
       for one with third-party packages (python_env), that of the environment this
       node makes of the wheels the driver sent (node_env.py), once per closure
    5. its declared outputs into the node's CAS; the blobs the remote cache lacks are
       uploaded, then the action-cache entry: last, so it never names a missing blob

Nothing is stored for a failure, a timeout or a cancel. The node keeps its
state under $KILN_WORKER_ROOT (default: <cache home>/remote-worker): `cache/`
is its CAS, `execroot/` the execroots of running actions (and the wheelhouses
of environments being made), `python-envs/` the Python environments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import os
import socket
import sys
import threading
from pathlib import Path

from kiln.action_graph import Action
from kiln.cache.action_cache import ActionResult, OutputFile
from kiln.cache.cas import BlobMismatch, ContentStore
from kiln.cache.digest import Digest
from kiln.cache.remote_store import RemoteError, RemoteStore
from kiln.exec import execroot_files as files
from kiln.exec.execroot import delete
from kiln.exec.platform_match import actions_module, describe, mismatches
from kiln.layout import DiskCache, cache_home
from kiln.remote.options import RemoteOptions
from kiln.remote.stores import open_store
from kiln.remote_exec import node_env, supervisor
from kiln.remote_exec.facts import this_node
from kiln.remote_exec.protocol import RemoteTask, TaskInput, TaskResult

ROOT_ENV = "KILN_WORKER_ROOT"
_counter = itertools.count()
_stores: dict[RemoteOptions, RemoteStore] = {}
_stores_lock = threading.Lock()


def worker_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or cache_home() / "remote-worker")


def node_name() -> str:
    """This node, as the driver's messages and profile name it."""
    node_id = "local"  # not in a Ray task (tests call run_task directly)
    with contextlib.suppress(Exception):  # no Ray, no runtime context: "local" it is
        import ray

        # Outside a Ray worker, get_runtime_context() would start a local Ray instance.
        if ray.is_initialized():
            node_id = ray.get_runtime_context().get_node_id()[:8]
    return f"{socket.gethostname()}:{node_id}"


def run_task(task: RemoteTask) -> TaskResult:
    node = node_name()
    action = task.action
    found = mismatches(action, this_node())
    if found:
        return TaskResult(
            node,
            -1,
            refused=True,
            message=f"refused by worker {node}: its toolchain does not match the action's "
            f"key: it wants {describe(found)}",
        )
    root = worker_root()
    cache = DiskCache.at(root / "cache", task.digest_function)
    cache.create()
    cas = ContentStore(cache.root, task.digest_function)
    remote = store_for(task.remote)
    try:
        _fetch_inputs(task.inputs, cas, remote)
    except BlobMismatch as error:
        return TaskResult(node, -1, message=f"an input from the remote cache is damaged: {error}")
    except RemoteError as error:
        return TaskResult(node, -1, message=f"cannot fetch inputs: {error.message}")
    execroots = root / "execroot"
    _sweep(execroots)
    execroot = execroots / f"{os.getpid()}-{next(_counter)}"
    python = sys.executable  # the driver's interpreter path means nothing here
    notes: list[str] = []
    if action.python_env:
        try:
            # Its wheelhouse is named as its execroot, so _sweep removes one a crash left.
            wheelhouse = execroot.with_name(execroot.name + "-wheels")
            python = node_env.interpreter(task, cas, remote, root, wheelhouse, notes.append)
        except node_env.EnvironmentFailed as failed:
            message = f"cannot make its Python environment on {node}: {failed.message}"
            return TaskResult(node, -1, message=message, notes=tuple(notes))
    try:
        return dataclasses.replace(
            _run_in(execroot, task, cas, remote, node, python), notes=tuple(notes)
        )
    finally:
        delete(execroot)


def _run_in(
    execroot: Path,
    task: RemoteTask,
    cas: ContentStore,
    remote: RemoteStore,
    node: str,
    python: str,
) -> TaskResult:
    action = task.action
    _make_execroot(execroot, action, task.inputs, cas)
    tmp = execroot / ".tmp"
    stdout, stderr = tmp / "stdout", tmp / "stderr"
    env = {**dict(action.env), "TMPDIR": str(tmp)}
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    if action.resources.gpu and gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus  # the GPUs Ray reserved for this task
    argv = list(action.argv)
    if action.python_env is not None or actions_module(action) is not None:
        argv[0] = python  # a Python action: this node's interpreter, or its environment's
    ended = supervisor.run(
        argv, cwd=execroot, env=env, stdout=stdout, stderr=stderr, timeout=task.timeout
    )
    output = files.read_text(stdout) + files.read_text(stderr)
    if ended.exit_code != 0 or ended.crashed:
        message = ended.message or f"exited with code {ended.exit_code}"
        return TaskResult(
            node, ended.exit_code, ended.seconds, ended.crashed, message, output=output
        )
    missing = files.missing_outputs(execroot, action)
    if missing:
        message = (
            "did not create declared output"
            + ("s " if len(missing) > 1 else " ")
            + ", ".join(missing)
        )
        return TaskResult(node, 0, ended.seconds, message=message, output=output)
    outputs = []
    for path in files.output_files(execroot, action):
        executable = os.access(execroot / path, os.X_OK)
        files.seal_output(execroot / path, executable)
        outputs.append(
            OutputFile(path, cas.put_file(execroot / path, executable=executable), executable)
        )
    files.seal_output(stdout, False)
    files.seal_output(stderr, False)
    result = ActionResult(
        output_files=tuple(outputs),
        exit_code=0,
        stdout_digest=cas.put_file(stdout),
        stderr_digest=cas.put_file(stderr),
        execution_seconds=ended.seconds,
        worker=node,
    )
    try:
        _upload(result, task.key, cas, remote)
    except RemoteError as error:
        return TaskResult(
            node, 0, ended.seconds, message=f"cannot upload its outputs: {error.message}"
        )
    return TaskResult(node, 0, ended.seconds, printed=files.read_text(stdout), result=result)


def store_for(options: RemoteOptions) -> RemoteStore:
    """One kept-alive store client per options record, for every task this Ray worker
    runs: opened as the driver opened its own (headers, timeout, minimum rate)."""
    with _stores_lock:
        store = _stores.get(options)
        if store is None:
            opened = open_store(options)
            assert opened is not None, "the driver sends remote tasks only with --remote_cache"
            store = _stores[options] = opened
        return store


def _fetch_inputs(inputs: tuple[TaskInput, ...], cas: ContentStore, remote: RemoteStore) -> None:
    """Every input blob into this node's CAS: what it has already is never fetched again."""
    downloads = []
    for item in inputs:
        digest = Digest(item.hash, item.size)
        if cas.has(digest, item.executable):
            cas.touch(digest, item.executable)
        elif cas.has(digest, not item.executable):  # the other variant: a local copy
            cas.put_file(cas.path(digest, not item.executable), digest, item.executable)
        else:
            downloads.append(functools.partial(remote.download, digest, cas, item.executable))
    remote.transfer_many(downloads)


def _make_execroot(
    root: Path, action: Action, inputs: tuple[TaskInput, ...], cas: ContentStore
) -> None:
    directories = {".tmp"}
    for item in inputs:
        directories.update(_ancestors(os.path.dirname(item.path)))
    for file in action.outputs:
        directories.update(_ancestors(file.path if file.directory else os.path.dirname(file.path)))
    directories.discard("")
    root.mkdir(parents=True)
    for directory in sorted(directories, key=lambda d: d.count("/")):
        os.mkdir(root / directory)
    for item in inputs:
        cas.materialize(Digest(item.hash, item.size), root / item.path, item.executable)


def _upload(result: ActionResult, key: str, cas: ContentStore, remote: RemoteStore) -> None:
    """The result's blobs the remote cache lacks, then the entry (bazel-remote's order)."""
    variant: dict[Digest, bool] = {}
    for digest, executable in result.digests():
        variant.setdefault(digest, executable)
    missing = remote.find_missing(variant)
    remote.transfer_many([functools.partial(remote.upload, d, cas, variant[d]) for d in missing])
    remote.put_action_result(key, result)


def _sweep(execroots: Path) -> None:
    """Remove execroots whose Ray worker died (a cancel, a crash) mid-action."""
    try:
        names = os.listdir(execroots)
    except FileNotFoundError:
        execroots.mkdir(parents=True, exist_ok=True)
        return
    for name in names:
        pid = name.partition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            delete(execroots / name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ancestors(path: str) -> list[str]:
    parts = path.split("/") if path else []
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
