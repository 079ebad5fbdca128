"""What a worker node offers actions, found on the node itself.

`this_node()` runs in the node's Ray worker, whose interpreter is the one
that runs the node's actions: its host facts (os, arch, Python, installed
distributions), the GPUs nvidia-smi lists there, and, where torch_tensorrt is
installed, what the TensorRT probe finds (kiln.rules.tensorrt.trt_toolchain, cached on
the node's disk). The same facts give the node's labels (routing.node_labels,
written into its `ray start` line by ray_start.py) and the worker's check of
each action (platform_match.mismatches).
"""

from __future__ import annotations

from functools import cache

from kiln import machine
from kiln.action_graph import PYTHON_ACTION_ENV
from kiln.exec.platform_match import MachineOffer
from kiln.host_facts import HostFacts


@cache
def this_node() -> MachineOffer:
    host = HostFacts.of_this_machine()
    return MachineOffer(host, machine.nvidia_gpus(), _probe_facts(host))


def _probe_facts(host: HostFacts) -> dict[str, str]:
    """cuda, tensorrt and the Torch-TensorRT flavour, where torch_tensorrt is installed."""
    if not (host.version("torch_tensorrt") or host.version("torch_tensorrt_rtx")):
        return {}
    from kiln.rules.tensorrt import trt_toolchain  # imports torch in a child: only where it matters

    found = trt_toolchain.probe(host.interpreter, PYTHON_ACTION_ENV)
    return {
        "cuda": found.cuda or "-",
        "tensorrt": found.tensorrt or "-",
        "torch_tensorrt_flavour": found.flavour or "-",
    }
