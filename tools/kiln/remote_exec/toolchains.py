"""Analysis on a GPU-less driver: GPU toolchains resolved on a GPU node of the cluster.

ClusterGpuPlatform is the RemotePlatform (kiln.host_facts) of a build whose
GPU actions run on the cluster. A toolchain marked `gpu` (GPUS, TENSORRT,
GPU_HOST) is resolved by a Ray task pinned to the chosen GPU node, which
calls `toolchain.resolve(<its own HostFacts>)`: exactly what that machine
computes when it builds for itself, so the actions' keys are the ones it
would compute. Each is resolved once per build.

The GPU node is chosen deterministically among the live nodes with GPUs: the
highest compute capability, then GPU name, address and node id. A cluster
without GPU nodes resolves them here (no GPUs): the GPU actions then fail at
once as no node can run them, naming what is missing.
"""

from __future__ import annotations

import threading
from typing import Any, TypeVar

from kiln.errors import KilnError
from kiln.host_facts import HostFacts, Toolchain
from kiln.remote_exec.cluster import Cluster, ClusterUnreachable
from kiln.remote_exec.routing import LABEL_PREFIX, ClusterNode

T = TypeVar("T")


def resolve_here(toolchain: Toolchain[T]) -> T:
    """On the node: the toolchain as this machine resolves it for its own builds."""
    return toolchain.resolve(HostFacts.of_this_machine())


class ClusterGpuPlatform:
    def __init__(self, cluster: Cluster, local: HostFacts) -> None:
        self.cluster = cluster
        self.local = local
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()

    def resolve(self, toolchain: Toolchain[T]) -> T:
        with self._lock:
            if toolchain.name in self._values:
                known: T = self._values[toolchain.name]
                return known
        try:
            node = gpu_node(self.cluster.nodes())
            value = (
                toolchain.resolve(self.local)
                if node is None
                else self.cluster.run_on(node.node_id, resolve_here, toolchain)
            )
        except ClusterUnreachable as error:
            raise KilnError(
                f"cannot resolve the toolchain '{toolchain.name}' on the remote executor: "
                f"{error.message}",
                hint="start the cluster (docs/remote-execution.md), or build without "
                "--remote_executor on a machine with a GPU",
            ) from None
        with self._lock:
            self._values[toolchain.name] = value
        return value


def gpu_node(nodes: list[ClusterNode]) -> ClusterNode | None:
    """The GPU node analysis asks: deterministic, whatever order Ray lists nodes in."""
    with_gpus = [n for n in nodes if n.alive and n.resources.get("GPU", 0) > 0]
    if not with_gpus:
        return None

    def order(node: ClusterNode) -> tuple[float, str, str, str]:
        labels = node.labels
        try:
            capability = float(labels.get(LABEL_PREFIX + "compute_capability", "0"))
        except ValueError:
            capability = 0.0
        return (-capability, labels.get(LABEL_PREFIX + "gpu_name", ""), node.address, node.node_id)

    return min(with_gpus, key=order)
