"""The driver's RemoteSpawner on Ray: upload what the cache lacks, submit, bring back digests.

    spawn_remote(spawn)
        route = routing.route(action)            resources + label selector
        no live node fits?                       fail at once, naming what is missing
        input blobs the remote cache lacks       HEAD, then PUT from where they are here
                                                 (sendfile: never in this process's memory);
                                                 so are the wheels of its Python environment
        submit the Ray task (node_runner.run_task), wait; every few seconds check
        again that some live node still fits (a GPU node that left): else cancel, fail
        outputs this CAS lacks                   downloaded, each verified as it is written

A blob known to be in the remote cache (uploaded or seen by HEAD in this
build) is not asked about again. The task is retried by Ray when its worker
or node dies (--remote_retries); a cancelled build cancels every task it
submitted (ray.cancel(force=True) kills the worker; its supervisor then kills
the command). The action-cache entry is written by the worker after its
blobs, and locally by the executor after this returns: neither names a blob
that is not there.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from kiln.cache.action_cache import ActionResult
from kiln.cache.cas import BlobMismatch, ContentStore
from kiln.cache.remote_store import KnownBlobs, RemoteError, RemoteStore, download_outputs
from kiln.exec.outcome import Source
from kiln.exec.remote_spawn import RemoteSpawn, RemoteSpawnResult
from kiln.exec.spawn import SpawnResult
from kiln.remote.options import RemoteOptions
from kiln.remote_exec.cluster import Cluster, ClusterUnreachable, TaskLost
from kiln.remote_exec.protocol import RemoteTask, TaskInput, TaskResult, TaskWheel
from kiln.remote_exec.routing import Route, infeasible, route

if TYPE_CHECKING:
    from ray import ObjectRef

# How often a waiting action checks that some live node can still run it (seconds).
RECHECK_S = 5.0
GIVE_UP_POLL_S = 0.2  # how often a dynamic action's remote run asks whether it lost


class RaySpawner:
    def __init__(
        self,
        cluster: Cluster,
        remote: RemoteStore,
        cas: ContentStore,
        options: RemoteOptions,
        *,
        digest_function: str,
        retries: int,
        warn: Callable[[str], None],
        report: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.cluster = cluster
        self.remote = remote
        self.cas = cas
        self.options = options  # travels to the nodes, which open their store from it
        self.digest_function = digest_function
        self.retries = retries
        self._warn = warn
        self._report = report  # what nodes said making Python environments ("INFO: ...")
        self._lock = threading.Lock()
        self._in_flight: set[ObjectRef[TaskResult]] = set()
        self._known = KnownBlobs()  # blobs the remote store holds, as far as we know
        self._cancelled = False

    def spawn_remote(self, spawn: RemoteSpawn) -> RemoteSpawnResult:
        if self._cancelled:
            return RemoteSpawnResult.failed("interrupted", crashed=True)
        needed = route(spawn.action)
        try:
            why = infeasible(needed, self.cluster.nodes())
            if why is not None:  # a node may have joined since: ask once more
                why = infeasible(needed, self.cluster.nodes(refresh=True))
        except ClusterUnreachable as error:
            return RemoteSpawnResult.failed(error.message, unreachable=True)
        if why is not None:
            return RemoteSpawnResult.failed(why)
        try:
            self._upload_inputs(spawn)
        except RemoteError as error:
            return RemoteSpawnResult.failed(f"cannot upload its inputs: {error.message}")
        task = RemoteTask(
            spawn.action,
            spawn.key,
            tuple(
                TaskInput(path, item.digest.hash, item.digest.size, item.executable)
                for path, item in sorted(spawn.inputs.items())
            ),
            self.digest_function,
            self.options,
            spawn.timeout,
            tuple(TaskWheel(w.file_name, w.digest.hash, w.digest.size) for w in spawn.wheels),
            spawn.sandbox,
        )
        try:
            ended = self._run(task, needed, spawn.give_up)
        except ClusterUnreachable as error:
            return RemoteSpawnResult.failed(error.message, unreachable=True)
        except TaskLost as lost:
            return RemoteSpawnResult.failed(f"remote task lost: {lost}", crashed=True)
        if isinstance(ended, str):
            return RemoteSpawnResult.failed(ended)
        return self._bring_back(ended)

    def _run(
        self, task: RemoteTask, needed: Route, give_up: threading.Event | None
    ) -> TaskResult | str:
        """The task's result; a message if it can no longer run anywhere (or is not
        wanted any more: `give_up`)."""
        ref = self.cluster.submit(task, needed, self.retries)
        with self._lock:
            self._in_flight.add(ref)
            cancelled = self._cancelled
        if cancelled:  # Ctrl-C came while it was submitted: it goes too
            self.cluster.cancel(ref)
        try:
            waited = 0.0
            while True:
                step = RECHECK_S if give_up is None else GIVE_UP_POLL_S
                result = self.cluster.result(ref, step)
                if result is not None:
                    return result
                if give_up is not None and give_up.is_set():
                    self.cluster.cancel(ref)
                    return "cancelled: not needed any more"
                waited += step
                if waited < RECHECK_S:
                    continue
                waited = 0.0
                why = infeasible(needed, self.cluster.nodes(refresh=True))
                if why is not None:
                    self.cluster.cancel(ref)
                    return why
        finally:
            with self._lock:
                self._in_flight.discard(ref)

    def _upload_inputs(self, spawn: RemoteSpawn) -> None:
        self._known.upload_missing(self.remote, spawn.local_files())

    def _bring_back(self, ended: TaskResult) -> RemoteSpawnResult:
        for note in ended.notes:
            self._report(f"{ended.node}: {note}")
        if ended.result is None:
            message = ended.message or f"exited with code {ended.exit_code}"
            run = dataclasses.replace(
                ended.ended, source=Source.RAN_REMOTELY, lane=ended.node, message=message
            )
            return RemoteSpawnResult(run, output=ended.output)
        try:
            self._download(ended.result)
        except BlobMismatch as error:
            message = f"an output from the remote cache does not match its digest: {error.message}"
            return RemoteSpawnResult.failed(message, seconds=ended.seconds, lane=ended.node)
        except RemoteError as error:
            message = f"cannot download its outputs: {error.message}"
            return RemoteSpawnResult.failed(message, seconds=ended.seconds, lane=ended.node)
        self._known.note(d for d, _ in ended.result.digests())
        run = SpawnResult(0, ended.seconds, Source.RAN_REMOTELY, ended.node)
        return RemoteSpawnResult(run, ended.result, printed=ended.printed)

    def _download(self, result: ActionResult) -> None:
        download_outputs(self.remote, result, self.cas)

    def cancel_all(self) -> None:
        with self._lock:
            self._cancelled = True
            refs = list(self._in_flight)
        for ref in refs:
            self.cluster.cancel(ref)

    def close(self) -> None:
        self.cluster.close()
