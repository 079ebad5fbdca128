"""The driver's connection to the Ray cluster: Ray Client (`ray://HOST:PORT`), made lazily.

The only driver module that imports ray, and only when a build first needs
the cluster (an action placed remotely, a toolchain resolved there, `kiln
info cluster`): a build that never does never pays the ~0.4 s of `import ray`
nor the seconds of connecting.

Unreachable is decided fast: a plain TCP connect to the head's client port
(with --remote_timeout) before ray.init, whose own retries would take half a
minute. Ray's client logs what it sees of a lost head; those lines are kept off the
terminal (ray_log.py), as details of kiln's own error.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kiln.remote.executor import ExecutorUnreachable
from kiln.remote_exec.address import RayAddress
from kiln.remote_exec.protocol import RemoteTask, TaskResult
from kiln.remote_exec.ray_log import RayLines, keep_ray_lines
from kiln.remote_exec.routing import ClusterNode, Route

if TYPE_CHECKING:
    from ray import ObjectRef

T = TypeVar("T")
_CONNECT_PROBE_S = 10.0  # at most, for the TCP check before ray.init
_CONNECT_ATTEMPTS = 3


class ClusterUnreachable(ExecutorUnreachable):
    """The head cannot be reached (refused, timed out, not a Ray Client server, gone)."""


class Cluster:
    def __init__(self, address: RayAddress, timeout: float = 60.0) -> None:
        self.address = address
        self.timeout = timeout
        self._lock = threading.Lock()
        self._connected = False
        self._failed: str | None = None  # once unreachable, not tried again in this build
        self._nodes: list[ClusterNode] | None = None
        self._run_task: Any = None
        self._ray_lines = RayLines()  # Ray's own log lines, once connecting imports ray

    # -- connecting -----------------------------------------------------------------

    def connect(self) -> None:
        """Connect once; ClusterUnreachable (the same one, every time) if that fails, or
        once the cluster was lost: after a lost connection every call of Ray's API would
        start a Ray instance on this machine (ray.init's default) instead of failing."""
        with self._lock:
            if self._failed is not None:
                raise ClusterUnreachable(self._failed)
            if self._connected:
                return
            try:
                self._connect()
            except ClusterUnreachable as error:
                self._failed = error.message
                raise
            self._connected = True

    def _connect(self) -> None:
        where = self.address.url
        try:
            with socket.create_connection(
                (self.address.host, self.address.port), timeout=min(self.timeout, _CONNECT_PROBE_S)
            ):
                pass
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise ClusterUnreachable(
                f"the Ray cluster at {where} is unreachable: {reason}"
            ) from None
        import ray

        from kiln.remote_exec import node_runner

        self._ray_lines = keep_ray_lines()
        # Kept at ERROR: Ray warns when a thread other than the main one connects.
        logging.getLogger("ray").setLevel(logging.ERROR)

        for attempt in range(1, _CONNECT_ATTEMPTS + 1):
            try:
                ray.init(where, logging_level=logging.ERROR)
                keep_ray_lines()  # ray.init gave every handler of "ray" its formatter
                break
            except Exception as error:  # ConnectionError, a version mismatch, ...
                with contextlib.suppress(Exception):
                    ray.shutdown()
                # Seen with Ray 2.60: "Initialization failure from server" now and then,
                # right after another client left; the next attempt connects.
                if attempt == _CONNECT_ATTEMPTS:
                    text = _first_line(error)
                    raise ClusterUnreachable(
                        f"cannot connect to the Ray cluster at {where}: {text}",
                        details=self._ray_lines.text(),
                    ) from None
                time.sleep(1.0)
        self._run_task = ray.remote(node_runner.run_task)

    def close(self) -> None:
        with self._lock:
            if not self._connected:
                return
            self._connected = False
        import ray

        ray.shutdown()

    # -- what the cluster has ----------------------------------------------------

    def nodes(self, *, refresh: bool = False) -> list[ClusterNode]:
        self.connect()
        if self._nodes is None or refresh:
            import ray

            try:
                self._nodes = [ClusterNode.of(entry) for entry in ray.nodes()]  # type: ignore[no-untyped-call]
            except Exception as error:
                raise self._lost(error) from None
        return self._nodes

    def run_on(self, node_id: str, function: Callable[..., T], *args: object) -> T:
        """function(*args) on one node (its facts, a toolchain resolved there)."""
        self.connect()
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(function).options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        )
        try:
            value: T = ray.get(remote.remote(*args))
        except Exception as error:
            raise self._lost(error) from None
        return value

    # -- tasks --------------------------------------------------------------------

    def submit(self, task: RemoteTask, route: Route, retries: int) -> ObjectRef[TaskResult]:
        self.connect()
        options = route.options()
        # Retried by Ray when its worker or node dies (a system failure), on any node
        # that fits; an action that fails is a result, never retried.
        options.update(max_retries=retries, retry_exceptions=False, name=task.action.mnemonic)
        try:
            ref: ObjectRef[TaskResult] = self._run_task.options(**options).remote(task)
        except Exception as error:
            raise self._lost(error) from None
        return ref

    def result(self, ref: ObjectRef[TaskResult], timeout: float) -> TaskResult | None:
        """The task's result, or None if it has not ended within `timeout` seconds.

        A task that failed in Ray (its worker died more often than it is retried, it
        was cancelled) raises TaskLost with Ray's reason.
        """
        self.connect()
        import grpc  # Ray Client's transport: Ray's own dependency
        import ray

        try:
            ready, _ = ray.wait([ref], timeout=timeout)
            if not ready:
                return None
            result: TaskResult = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            raise TaskLost("cancelled") from None
        except ray.exceptions.RayTaskError as error:  # run_task raised: a bug, on the node
            cause = getattr(error, "cause", None) or error
            raise TaskLost(f"the worker failed: {type(cause).__name__}: {cause}") from None
        except ray.exceptions.RayError as error:  # its worker or node died too often
            if isinstance(error, ray.exceptions.RaySystemError) and "connect" in str(error):
                raise self._lost(error) from None
            raise TaskLost(_first_line(error)) from None
        except (ConnectionError, OSError) as error:
            raise self._lost(error) from None
        except grpc.RpcError as error:  # the Ray Client server failed under it (seen:
            # "Failed to serialize response!" when another cluster took its port)
            raise self._lost(error) from None
        return result

    def cancel(self, ref: ObjectRef[TaskResult]) -> None:
        """Kill the task's worker process (and so its command: supervisor.py)."""
        with self._lock:
            if self._failed is not None:  # lost: nothing runs for us there any more
                return
        import ray

        # It may have ended meanwhile, or the connection be gone: nothing runs for us then.
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)

    def _lost(self, error: BaseException) -> ClusterUnreachable:
        message = f"lost the Ray cluster at {self.address.url}: {_first_line(error)}"
        with self._lock:
            self._failed = message
        return ClusterUnreachable(message, details=self._ray_lines.text())


class TaskLost(Exception):
    """Ray gave up on a task: its reason."""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
