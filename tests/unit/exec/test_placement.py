"""Where an action runs: the placement policy's table, as Bazel's strategies read."""

from __future__ import annotations

import dataclasses

from kiln.action_graph import Action, File, PythonPackage, Resources
from kiln.exec.placement import PlacementPolicy
from kiln.exec.platform_match import MachineOffer
from kiln.host_facts import HostFacts

HOST = HostFacts("linux", "x86_64", "3.11.7", "cpython", "/venv/bin/python", (("torch", "2.13.0"),))


def _action(mnemonic: str = "Genrule", gpu: int = 0, **platform: str) -> Action:
    return Action(
        owner="//p:t",
        mnemonic=mnemonic,
        argv=("/bin/true",),
        inputs=(),
        outputs=(File("kiln-out/p/o"),),
        platform=tuple(platform.items()),
        resources=Resources(gpu=gpu),
    )


def test_without_a_remote_executor_everything_runs_here() -> None:
    policy = PlacementPolicy(local_gpus=0)
    assert policy.placement(_action(gpu=1)) == "worker"
    assert PlacementPolicy(default="local").placement(_action()) == "local"


def test_auto_sends_only_what_this_host_cannot_run() -> None:
    policy = PlacementPolicy(remote=True, local_gpus=0, here=MachineOffer(HOST))
    assert policy.placement(_action()) == "worker"
    assert policy.placement(_action(gpu=1)) == "remote"
    # a toolchain this host lacks: torch_tensorrt, or another torch
    assert policy.placement(_action(torch_tensorrt="2.13.0")) == "remote"
    assert policy.placement(_action(torch="2.12.0")) == "remote"
    assert policy.placement(_action(torch="2.13.0", device="cuda")) == "worker"
    assert policy.gpu_actions_remote


def test_spawn_strategy_and_per_mnemonic_strategies() -> None:
    policy = PlacementPolicy(
        remote=True,
        default="remote",
        by_mnemonic={"TorchExport": "local", "AotiPackage": "dynamic"},
        local_gpus=1,
        here=MachineOffer(HOST),
    )
    assert policy.placement(_action("Genrule")) == "remote"
    assert policy.placement(_action("TorchExport")) == "local"
    assert policy.placement(_action("AotiPackage")) == "dynamic"
    # dynamic cannot race what this host cannot run at all
    assert policy.placement(_action("AotiPackage", gpu=2)) == "remote"
    # a file write never leaves
    write = dataclasses.replace(_action(), content=b"x")
    assert policy.placement(write) == "local"


def test_a_remote_action_holds_only_a_job_slot_here() -> None:
    policy = PlacementPolicy(remote=True, local_gpus=0, here=MachineOffer(HOST))
    heavy = dataclasses.replace(_action(gpu=1), resources=Resources(cpu=4, gpu=1, memory_mb=9000))
    assert policy.reserved(heavy) == Resources(cpu=1, gpu=0, memory_mb=0)
    light = _action()
    assert policy.reserved(light) == light.resources


def test_an_action_with_pip_packages_is_placed_as_any_other() -> None:
    """A node makes its Python environment of the wheels the driver sends, so @pip//
    packages decide nothing: the strategies, and what this host cannot run, do."""
    timm = PythonPackage("timm", "1.0.0", ("sha256:" + "0" * 64,))
    pip = {"pip:timm": "1.0.0 sha256:" + "0" * 64}
    action = dataclasses.replace(_action(**pip), python_env=(timm,))
    here = MachineOffer(HOST)
    assert PlacementPolicy(remote=True, default="remote", here=here).placement(action) == "remote"
    by_mnemonic = PlacementPolicy(remote=True, by_mnemonic={"Genrule": "remote"}, here=here)
    assert by_mnemonic.placement(action) == "remote"
    assert PlacementPolicy(remote=True, default="dynamic", here=here).placement(action) == "dynamic"
    # auto: this host can run it (a package is no toolchain it lacks), so here it runs
    assert PlacementPolicy(remote=True, here=here).placement(action) == "worker"
    gpu = dataclasses.replace(action, resources=Resources(gpu=1))
    assert PlacementPolicy(remote=True, here=here).placement(gpu) == "remote"
    # without a remote executor, nothing leaves
    assert PlacementPolicy(default="remote", here=here).placement(action) == "worker"
