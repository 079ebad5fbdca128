"""One action on a worker node, inside its Ray task: through the runner kiln runs it with here.

    1. refuse it unless this node matches its platform properties (the toolchain
       fingerprint: os, Python, the distributions it names, the code of its
       kiln.actions module, the GPU), naming both values
    2. fetch the inputs this node's CAS lacks from the remote cache, each verified
       against its digest as it is written (ContentStore.put_stream)
    3. run_in_execroot (exec/run_in_execroot.py), as the driver does: a private execroot
       of only the declared inputs (read-only hardlinks of CAS blobs), the output
       directories, .tmp; the action's fixed environment plus TMPDIR and the GPUs Ray gave
       the task (CUDA_VISIBLE_DEVICES as Ray set it; empty for an action needing no GPU,
       which sees none), neither in the key; the command in a sandbox where
       the kernel allows (exec/sandboxing.py), so it reads no undeclared file and writes
       nowhere else; a write through an input fails it; outputs into the node's CAS
    4. the spawner: a `python -m` action that supports workers (and needs no GPU) runs
       in a persistent worker (kiln.workers) that this Ray worker process keeps from task
       to task, so torch is imported once, not per action; any other command under the
       supervisor (supervisor.py), which nothing outlives. A Python action gets this
       node's interpreter: for one with third-party packages (python_env), that of the
       environment this node makes of the wheels the driver sent (node_env.py)
    5. the blobs the remote cache lacks are uploaded, then the action-cache entry:
       last, so it never names a missing blob

Nothing is stored for a failure, a timeout or a cancel. The node keeps its
state under $KILN_WORKER_ROOT (default: <cache home>/remote-worker): `cache/`
is its CAS, `execroot/` the execroots of running actions (and the wheelhouses
of environments being made), `cache/python-envs/` the Python environments.
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
from collections.abc import Mapping, Set
from pathlib import Path

from kiln.action_graph import Action
from kiln.cache.action_cache import ActionResult
from kiln.cache.cas import BlobMismatch, ContentStore
from kiln.cache.digest import Digest
from kiln.cache.remote_store import RemoteError, RemoteStore
from kiln.errors import KilnError
from kiln.exec.execroot import delete
from kiln.exec.gpu_pool import CUDA_VISIBLE_DEVICES, cuda_env
from kiln.exec.outcome import Source
from kiln.exec.platform_match import describe, mismatches
from kiln.exec.run_in_execroot import Job, Machine, RunFailed, run_in_execroot
from kiln.exec.sandboxing import Sandboxing
from kiln.exec.spawn import Spawner, SpawnResult
from kiln.exec.worker_spawner import WorkerSpawner
from kiln.layout import DiskCache, OutputBase, cache_home
from kiln.remote.options import RemoteOptions
from kiln.remote.stores import open_store
from kiln.remote_exec import node_env
from kiln.remote_exec.facts import this_node
from kiln.remote_exec.protocol import RemoteTask, TaskInput, TaskResult
from kiln.remote_exec.supervisor import SupervisorSpawner

ROOT_ENV = "KILN_WORKER_ROOT"
# A node's persistent workers, and what they import once (the driver's default preload).
WORKERS_PER_NODE = 2
WORKER_PRELOAD = ("torch", "torch._inductor", "kiln.action_specs")
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
        return TaskResult.failed(
            node,
            f"refused by worker {node}: its toolchain does not match the action's "
            f"key: it wants {describe(found)}",
            refused=True,
        )
    root = worker_root()
    cache = DiskCache.at(root / "cache", task.digest_function)
    cache.create()
    cas = ContentStore(cache.root, task.digest_function)
    remote = store_for(task.remote)
    try:
        _fetch_inputs(task.inputs, cas, remote)
    except BlobMismatch as error:
        return TaskResult.failed(node, f"an input from the remote cache is damaged: {error}")
    except RemoteError as error:
        return TaskResult.failed(node, f"cannot fetch inputs: {error.message}")
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
            return TaskResult.failed(node, message, notes=tuple(notes))
    return dataclasses.replace(
        _run_in(execroot, task, cas, remote, node, python), notes=tuple(notes)
    )


def _run_in(
    execroot: Path,
    task: RemoteTask,
    cas: ContentStore,
    remote: RemoteStore,
    node: str,
    python: str,
) -> TaskResult:
    action = task.action
    env = task_gpu_env(action, os.environ.get(CUDA_VISIBLE_DEVICES))
    argv = action.argv
    if action.python_env is not None:
        argv = (python, *argv[1:])  # its environment's interpreter
    inputs = {item.path: Digest(item.hash, item.size) for item in task.inputs}
    executable = {item.path for item in task.inputs if item.executable}
    machine = _machine_for(worker_root(), task.sandbox)
    try:
        env.update(machine.sandboxing.windows_torch(action))
    except KilnError as error:
        return TaskResult.failed(node, f"{error.message} (on {node})")
    job = Job(action, argv, inputs, executable, task.timeout, env, node, node)
    execroots = _OneExecroot(execroot, cas)
    place = Machine(
        cas,
        execroots,
        machine.sandboxing.torch_tmp,
        forget=execroots.forget,
        make_header=machine.sandboxing.make_header,
    )
    try:
        ran = run_in_execroot(job, machine.spawner(action), place)
    except RunFailed as failed:
        return TaskResult.failed(node, failed.message)
    ended = ran.ended
    if ended is None:
        ended = SpawnResult(-1, 0.0, Source.RAN_REMOTELY, node)
    ended = dataclasses.replace(ended, lane=node)  # the profile's lane is the node
    if ran.failure is not None or ran.result is None:
        assert ran.failure is not None
        why = dataclasses.replace(ended, message=ran.failure.message)
        return TaskResult(why, output=ran.failure.output)
    try:
        _upload(ran.result, task.key, cas, remote)
    except RemoteError as error:
        message = f"cannot upload its outputs: {error.message}"
        return TaskResult(dataclasses.replace(ended, message=message))
    return TaskResult(ended, printed=ran.printed, result=ran.result)


def task_gpu_env(action: Action, ray_gpus: str | None) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for an action on this node: for a GPU action, the GPUs Ray
    reserved for its task, as Ray set them in this process (the driver assigns a remote
    action no ids of its own, and nothing here renumbers Ray's); none for the others."""
    if not action.resources.gpu:
        return cuda_env(0, None)
    return {} if ray_gpus is None else {CUDA_VISIBLE_DEVICES: ray_gpus}


class _OneExecroot:
    """The execroot of one task, made of the node's CAS blobs (sources too: a node has
    no workspace), and deleted when the action is done."""

    def __init__(self, root: Path, cas: ContentStore) -> None:
        self.root = root
        self.cas = cas

    def create(self, action: Action, inputs: Mapping[str, Digest], executable: Set[str]) -> Path:
        _make_execroot(self.root, action, inputs, executable, self.cas)
        return self.root

    def release(self, root: Path) -> None:
        delete(root)

    def forget(self, digests: Mapping[str, Digest]) -> None:
        """An input written through: its blob here may be damaged (every input is one)."""
        for digest in digests.values():
            for executable in (False, True):
                with contextlib.suppress(OSError):
                    os.unlink(self.cas.path(digest, executable))


class _NodeMachine:
    """What a Ray worker process keeps from task to task: the sandbox, and the persistent
    workers of Python actions (torch imported once). Its processes hold lifelines to
    this one: they end with it, however it ends."""

    def __init__(self, root: Path, sandbox: bool) -> None:
        self.sandboxing = Sandboxing(
            sandbox,
            sys.executable,
            workspace=root / "execroot",
            hidden=(root,),
            output_base=OutputBase(root),
            disk_cache=DiskCache(root / "cache"),
            warn=lambda message: print(f"WARNING: {message}", file=sys.stderr),
            # A forced ray.cancel kills this process and its children: a host that is
            # nobody's child lives on to see its lifeline end, and kills its command.
            detached=True,
        )
        self._lock = threading.Lock()
        self._plain: SupervisorSpawner | None = None
        self._workers: WorkerSpawner | None = None

    def spawner(self, action: Action) -> Spawner:
        sandbox = self.sandboxing.get()
        with self._lock:
            # A GPU action runs as a fresh process: a worker keeps the CUDA devices of
            # the task it started in, and Ray gives each task its own.
            if action.supports_workers and not action.resources.gpu:
                if self._workers is None:
                    self._workers = WorkerSpawner(
                        sys.executable, WORKERS_PER_NODE, WORKER_PRELOAD, sandbox
                    )
                return self._workers
            if self._plain is None:
                self._plain = SupervisorSpawner(sys.executable, sandbox)
            return self._plain

    def close(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.close()
        self.sandboxing.close()


_machines: dict[tuple[Path, bool], _NodeMachine] = {}
_machines_lock = threading.Lock()


def _machine_for(root: Path, sandbox: bool) -> _NodeMachine:
    with _machines_lock:
        machine = _machines.get((root, sandbox))
        if machine is None:
            machine = _machines[root, sandbox] = _NodeMachine(root, sandbox)
        return machine


def close_machines() -> None:
    """Stop this process's node workers and sandboxes (tests; in a Ray worker their
    lifelines end them with it)."""
    with _machines_lock:
        machines = list(_machines.values())
        _machines.clear()
    for machine in machines:
        machine.close()


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
    root: Path,
    action: Action,
    inputs: Mapping[str, Digest],
    executable: Set[str],
    cas: ContentStore,
) -> None:
    directories = {".tmp"}
    for path in inputs:
        directories.update(_ancestors(os.path.dirname(path)))
    for file in action.outputs:
        directories.update(_ancestors(file.path if file.directory else os.path.dirname(file.path)))
    directories.discard("")
    root.mkdir(parents=True)
    for directory in sorted(directories, key=lambda d: d.count("/")):
        os.mkdir(root / directory)
    for path, digest in inputs.items():
        cas.materialize(digest, root / path, path in executable)


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
