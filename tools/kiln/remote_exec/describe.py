"""`kiln info cluster`: the nodes of the remote executor and what each offers actions."""

from __future__ import annotations

from collections.abc import Callable

from kiln.exec.platform_match import MachineOffer
from kiln.remote_exec.cluster import Cluster, ClusterUnreachable
from kiln.remote_exec.routing import ClusterNode

_MIB = 2**20


def node_offer() -> MachineOffer:
    """On a node: what it offers (its interpreter's facts, GPUs, TensorRT)."""
    from kiln.remote_exec.facts import this_node

    return this_node()


def describe_cluster(cluster: Cluster, echo: Callable[[str], None]) -> None:
    """Print every node: resources, the kiln labels it advertises, what kiln finds there."""
    nodes = cluster.nodes()
    import ray

    echo(f"cluster: {cluster.address.url} (Ray {ray.__version__}, {len(nodes)} nodes)")
    for node in sorted(nodes, key=lambda n: (n.address, n.node_id)):
        echo(f"node {node.name}: {_resources(node)}")
        labels = " ".join(f"{k}={v}" for k, v in node.kiln_labels.items())
        echo(f"  labels: {labels or '(no kiln labels: not set up with ray_start, see docs)'}")
        if not node.alive:
            continue
        try:
            offer = cluster.run_on(node.node_id, node_offer)
        except ClusterUnreachable as error:
            echo(f"  kiln: cannot ask it ({error.message})")
            continue
        host = offer.host
        gpus = ", ".join(f"{g.name} ({g.compute_capability})" for g in offer.gpus) or "none"
        echo(
            f"  kiln: python {host.python} ({host.interpreter}), torch "
            f"{host.version('torch') or '-'}, GPUs {gpus}"
        )


def _resources(node: ClusterNode) -> str:
    if not node.alive:
        return "dead"
    r = node.resources
    return (
        f"alive, {r.get('CPU', 0):g} CPU, {r.get('GPU', 0):g} GPU, "
        f"{int(r.get('memory', 0)) // _MIB} MB memory"
    )
