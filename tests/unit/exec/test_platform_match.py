"""Matching a machine against an action's platform: what placement and workers check."""

from __future__ import annotations

from kiln import code_digest
from kiln.action_graph import Action, File
from kiln.exec.platform_match import MachineOffer, describe, mismatches
from kiln.host_facts import HostFacts
from kiln.machine import Gpu

HOST = HostFacts(
    "linux", "x86_64", "3.12.3", "cpython", "/gpu/venv/bin/python", (("torch", "2.13.0"),)
)


def _action(argv: tuple[str, ...] = ("/bin/true",), **platform: str) -> Action:
    return Action(
        owner="//p:t",
        mnemonic="M",
        argv=argv,
        inputs=(),
        outputs=(File("kiln-out/p/o"),),
        platform=tuple(platform.items()),
    )


def test_host_gpu_and_distribution_properties_are_compared() -> None:
    offer = MachineOffer(HOST, (Gpu("NVIDIA H200", "9.0"),))
    ok = _action(os="linux", python="3.12.3", torch="2.13.0", gpu_name="NVIDIA H200")
    assert mismatches(ok, offer) == []
    bad = _action(python="3.11.7", compute_capability="8.0", torch_tensorrt="2.13.0")
    found = {m.name: (m.wanted, m.here) for m in mismatches(bad, offer)}
    assert found == {
        "python": ("3.11.7", "3.12.3"),
        "compute_capability": ("8.0", "9.0"),
        "torch_tensorrt": ("2.13.0", "-"),  # a distribution this machine lacks
    }
    assert "python '3.11.7' (this machine: '3.12.3')" in describe(mismatches(bad, offer))


def test_artifact_properties_and_unknown_probe_facts_are_left_alone() -> None:
    offer = MachineOffer(HOST)
    # python_env: every Python action has it; a GPU worker refused them all (on the H200).
    action = _action(device="cuda", target_platform="windows_x86_64", cuda="13.0", python_env="1")
    assert mismatches(action, offer) == []
    probed = MachineOffer(HOST, extra={"cuda": "12.8"})
    assert [m.name for m in mismatches(action, probed)] == ["cuda"]


def test_locked_packages_are_left_alone_the_machine_that_runs_the_action_installs_them() -> None:
    """A `pip:<name>` property is the action's environment, not a fact of the machine: a
    node makes it of the wheels the driver sends (remote_exec/node_env.py)."""
    offer = MachineOffer(HOST)
    assert mismatches(_action(**{"pip:teamlib": "1.0 sha256:" + "0" * 64}), offer) == []


def test_the_code_of_the_actions_module_must_be_this_machines() -> None:
    module = "kiln.actions.torch_export"
    argv = ("/driver/venv/bin/python", "-m", module, "spec.json")
    here = code_digest.content_digest((module,))
    assert mismatches(_action(argv, kiln_actions=here), MachineOffer(HOST)) == []
    stale = _action(argv, kiln_actions="0" * 64)
    assert [m.name for m in mismatches(stale, MachineOffer(HOST))] == ["kiln_actions"]
    assert mismatches(stale, MachineOffer(HOST), check_code=False) == []


def test_a_native_action_runs_only_on_a_machine_of_its_instruction_set() -> None:
    """cpu_target = "native" resolved on the driver: a node of another CPU refuses it."""
    native = _action(cpu_isa="x86-64-v4+vnni+amx")
    avx2_node = MachineOffer(
        HostFacts("linux", "x86_64", "3.12.3", "cpython", "/p", (), cpu_isa="x86-64-v3")
    )
    assert describe(mismatches(native, avx2_node)) == (
        "cpu_isa 'x86-64-v4+vnni+amx' (this machine: 'x86-64-v3')"
    )
    amx_node = MachineOffer(
        HostFacts("linux", "x86_64", "3.12.3", "cpython", "/p", (), cpu_isa="x86-64-v4+vnni+amx")
    )
    assert mismatches(native, amx_node) == []
    assert mismatches(_action(), avx2_node) == []  # a named level asks nothing of the CPU
