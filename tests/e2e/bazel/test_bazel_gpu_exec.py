"""GPU actions under Bazel: marked requires-gpu, sent to an execution platform with a GPU.

No GPU here, so the CUDA target //gpu:mlp_cuda_pt2 is analyzed, not built: with an
execution platform that carries @kiln//bazel:cuda (a REAPI pool's, here
//gpu_platform:h200 with its GPU facts as exec properties) the target resolves, and
each of kiln's actions that holds a GPU has the execution requirement `requires-gpu`
(the planning action, which needs none, has not). Without such a platform Bazel
refuses the target at analysis, instead of running CUDA work on a CPU host.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.bazel.conftest import Twins

pytestmark = pytest.mark.torch

TARGET = "//gpu:mlp_cuda_pt2"


def _actions(text: str) -> dict[str, str]:
    """mnemonic -> its ExecutionInfo line ('' without one), from `bazel aquery` text."""
    found: dict[str, str] = {}
    for block in re.split(r"^action ", text, flags=re.MULTILINE)[1:]:
        mnemonic = re.search(r"Mnemonic: (\w+)", block)
        info = re.search(r"ExecutionInfo: (\{[^}]*\})", block)
        if mnemonic:
            found[mnemonic.group(1)] = info.group(1) if info else ""
    return found


def test_gpu_actions_require_a_gpu_and_the_plan_does_not(twins: Twins) -> None:
    run = twins.bazel.ok(
        "aquery", "--extra_execution_platforms=//gpu_platform:h200", f"deps({TARGET}, 1)"
    )
    actions = _actions(run.out)
    for mnemonic in ("TorchExport", "AotiCompile", "AotiJoin", "AotiValidate"):
        assert actions[mnemonic] == "{requires-gpu: 1}", mnemonic
    assert actions["KilnPlan"] == ""


def test_the_macro_asks_for_a_cuda_execution_platform(twins: Twins) -> None:
    run = twins.bazel.ok("query", "--output=build", TARGET)
    assert 'exec_compatible_with = ["//bazel:cuda"]' in run.out
    cpu = twins.bazel.ok("query", "--output=build", "//models:mlp_pt2")
    assert "exec_compatible_with" not in cpu.out


def test_without_a_gpu_platform_the_target_is_refused_at_analysis(twins: Twins) -> None:
    run = twins.bazel.build("--nobuild", TARGET)
    assert run.code != 0
    assert "python_toolchain_type" in run.err  # no execution platform offers both
