"""Which Ray node may run an action: its resources and platform properties as Ray sees them.

    resources.cpu        -> num_cpus
    resources.gpu        -> num_gpus (Ray sets the task's CUDA_VISIBLE_DEVICES)
    resources.memory_mb  -> memory (Ray's logical memory resource, bytes)
    platform properties  -> a label selector over the node labels below

A worker node advertises what it offers as node labels (`ray start --labels`,
which ray_start.py writes from the node's own facts):

    kiln/os, kiln/arch, kiln/python          the interpreter that runs actions
    kiln/gpu_name, kiln/compute_capability   its first GPU (nvidia-smi)
    kiln/torch, kiln/torch_tensorrt          installed versions
    kiln/cuda, kiln/tensorrt,                what the TensorRT probe found
      kiln/torch_tensorrt_flavour

An action asks for the labels of the properties it has (a property "-",
"absent", asks for nothing: the worker's own check covers it). Label values
are what Kubernetes allows (letters, digits, `-_.`, at most 63 characters):
every other character becomes `_` ("NVIDIA H200" -> "NVIDIA_H200"). The
worker compares the exact values again before it runs anything
(platform_match.py), so routing only has to be right, not lossless.

Ray leaves a task that no node can run pending forever, so before a task is
submitted `infeasible()` compares the route with every live node and names
what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kiln.action_graph import Action
from kiln.exec.platform_match import MachineOffer

LABEL_PREFIX = "kiln/"
# The properties that route, in the order messages name them.
ROUTED = (
    "os",
    "arch",
    "python",
    "gpu_name",
    "compute_capability",
    "torch",
    "cuda",
    "torch_tensorrt",
    "torch_tensorrt_flavour",
    "tensorrt",
)
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.-]")
_MIB = 2**20


def label_value(text: str) -> str:
    """`text` as a Ray label value: Kubernetes' characters, alphanumeric at both ends."""
    value = _NOT_LABEL.sub("_", text)[:63].strip("_.-")
    return value or "_"


def node_labels(offer: MachineOffer) -> dict[str, str]:
    """The labels a node with these facts advertises (what `ray start --labels` gets)."""
    labels: dict[str, str] = {}
    for name in ROUTED:
        value = offer.value(name)
        if value is not None and value != "-":
            labels[LABEL_PREFIX + name] = label_value(value)
    return labels


@dataclass(frozen=True)
class Route:
    """What a node must have to run one action."""

    num_cpus: float
    num_gpus: float
    memory_mb: int
    labels: Mapping[str, str] = field(default_factory=dict)

    def options(self) -> dict[str, Any]:
        """The Ray task options."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory_mb:
            options["memory"] = self.memory_mb * _MIB
        if self.labels:
            options["label_selector"] = dict(self.labels)
        return options

    def describe(self) -> str:
        needs = [f"{self.num_cpus:g} CPU"]
        if self.num_gpus:
            needs.append(f"{self.num_gpus:g} GPU")
        if self.memory_mb:
            needs.append(f"{self.memory_mb} MB memory")
        needs += [f"{k.removeprefix(LABEL_PREFIX)}={v}" for k, v in self.labels.items()]
        return ", ".join(needs)


def route(action: Action) -> Route:
    platform = dict(action.platform)
    labels = {
        LABEL_PREFIX + name: label_value(platform[name])
        for name in ROUTED
        if platform.get(name, "-") != "-"
    }
    resources = action.resources
    return Route(resources.cpu, resources.gpu, resources.memory_mb, labels)


@dataclass(frozen=True)
class ClusterNode:
    """One node as `ray.nodes()` describes it."""

    node_id: str
    address: str
    alive: bool
    resources: Mapping[str, float]
    labels: Mapping[str, str]

    @staticmethod
    def of(entry: Mapping[str, Any]) -> ClusterNode:
        return ClusterNode(
            node_id=str(entry.get("NodeID", "")),
            address=str(entry.get("NodeManagerAddress", "")),
            alive=bool(entry.get("Alive", False)),
            resources={str(k): float(v) for k, v in (entry.get("Resources") or {}).items()},
            labels={str(k): str(v) for k, v in (entry.get("Labels") or {}).items()},
        )

    @property
    def name(self) -> str:
        """How messages name it: address and the start of its id."""
        return f"{self.address} ({self.node_id[:8]})"

    @property
    def kiln_labels(self) -> dict[str, str]:
        return {
            k.removeprefix(LABEL_PREFIX): v
            for k, v in sorted(self.labels.items())
            if k.startswith(LABEL_PREFIX)
        }

    def lacks(self, needed: Route) -> list[str]:
        """What of `needed` this node does not have (empty: it can run it)."""
        missing: list[str] = []
        for resource, amount, unit in (
            ("CPU", needed.num_cpus, "CPU"),
            ("GPU", needed.num_gpus, "GPU"),
            ("memory", needed.memory_mb * _MIB, ""),
        ):
            have = self.resources.get(resource, 0.0)
            if amount and have < amount:
                if unit:
                    missing.append(f"{amount:g} {unit} (has {have:g})")
                else:
                    missing.append(f"{needed.memory_mb} MB memory (has {int(have) // _MIB} MB)")
        for key, value in needed.labels.items():
            have_label = self.labels.get(key)
            if have_label != value:
                name = key.removeprefix(LABEL_PREFIX)
                missing.append(f"{name}={value} (has {have_label or '-'})")
        return missing


def infeasible(needed: Route, nodes: Iterable[ClusterNode]) -> str | None:
    """Why no live node can ever run an action with this route; None if one can."""
    alive = [n for n in nodes if n.alive]
    if not alive:
        return "the cluster has no live node"
    lacking = [(n, n.lacks(needed)) for n in alive]
    if any(not missing for _, missing in lacking):
        return None
    detail = "; ".join(f"{n.name} lacks {', '.join(missing)}" for n, missing in lacking)
    return f"no node of the cluster can run it (it needs {needed.describe()}): {detail}"
