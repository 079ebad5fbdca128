"""Routing an action to Ray: resources, labels, and refusing what no node can ever run."""

from __future__ import annotations

import pytest
from kiln.action_graph import Action, File, Resources
from kiln.exec.platform_match import MachineOffer
from kiln.host_facts import HostFacts
from kiln.machine import Gpu
from kiln.remote_exec.address import RayAddress
from kiln.remote_exec.routing import ClusterNode, Route, infeasible, label_value, node_labels, route
from kiln.remote_exec.toolchains import gpu_node

HOST = HostFacts(
    "linux", "x86_64", "3.12.3", "cpython", "/v/bin/python", (("torch", "2.13.0+cu130"),)
)


def _node(node_id: str, gpus: int = 0, alive: bool = True, **labels: str) -> ClusterNode:
    return ClusterNode(
        node_id,
        "10.0.0.1",
        alive,
        {"CPU": 4.0, "GPU": float(gpus), "memory": 32000.0 * 2**20},
        {f"kiln/{k}": v for k, v in labels.items()},
    )


def test_label_values_keep_to_kubernetes_syntax() -> None:
    assert label_value("NVIDIA H200") == "NVIDIA_H200"
    assert label_value("2.13.0+cu130") == "2.13.0_cu130"
    assert len(label_value("x" * 100)) == 63


def test_a_node_advertises_what_its_facts_say() -> None:
    labels = node_labels(MachineOffer(HOST, (Gpu("NVIDIA H200", "9.0"),), {}))
    assert labels == {
        "kiln/os": "linux",
        "kiln/arch": "x86_64",
        "kiln/python": "3.12.3",
        "kiln/gpu_name": "NVIDIA_H200",
        "kiln/compute_capability": "9.0",
        "kiln/torch": "2.13.0_cu130",
    }


def test_an_action_becomes_ray_task_options() -> None:
    action = Action(
        owner="//m:e",
        mnemonic="TrtEngine",
        argv=("x",),
        inputs=(),
        outputs=(File("kiln-out/m/e"),),
        platform=(("gpu_name", "NVIDIA H200"), ("device", "cuda"), ("tensorrt", "-")),
        resources=Resources(cpu=1, gpu=1, memory_mb=4000),
    )
    assert route(action).options() == {
        "num_cpus": 1,
        "num_gpus": 1,
        "memory": 4000 * 2**20,
        "label_selector": {"kiln/gpu_name": "NVIDIA_H200"},
    }


def test_infeasible_names_what_every_node_lacks() -> None:
    needed = Route(1, 1, 0, {"kiln/gpu_name": "NVIDIA_H200"})
    nodes = [_node("aaaaaaaa11", gpus=0), _node("bbbbbbbb22", gpus=1, gpu_name="NVIDIA_A100")]
    why = infeasible(needed, nodes)
    assert why is not None
    assert "10.0.0.1 (aaaaaaaa) lacks 1 GPU (has 0), gpu_name=NVIDIA_H200 (has -)" in why
    assert "(bbbbbbbb) lacks gpu_name=NVIDIA_H200 (has NVIDIA_A100)" in why
    assert infeasible(needed, [*nodes, _node("c", gpus=2, gpu_name="NVIDIA_H200")]) is None
    dead = _node("d", gpus=1, alive=False, gpu_name="NVIDIA_H200")
    assert infeasible(needed, [dead]) == "the cluster has no live node"


def test_analysis_asks_the_same_gpu_node_whatever_the_order() -> None:
    nodes = [
        _node("z", gpus=1, compute_capability="8.0", gpu_name="NVIDIA_A100"),
        _node("y", gpus=1, compute_capability="9.0", gpu_name="NVIDIA_H200"),
        _node("x"),
    ]
    chosen = gpu_node(nodes)
    assert chosen is not None and chosen.node_id == "y"
    assert gpu_node(list(reversed(nodes))) == chosen
    assert gpu_node([_node("x")]) is None


@pytest.mark.parametrize("text", ["127.0.0.1:10001", "ray://host", "ray://h:0", "http://h:1"])
def test_a_bad_address_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="ray://HOST:PORT"):
        RayAddress.parse(text)


def test_addresses() -> None:
    assert RayAddress.parse("ray://head.example:10001") == RayAddress("head.example", 10001)
    assert RayAddress.parse("ray://[::1]:10001").url == "ray://[::1]:10001"
