"""The private inductor cache's path, which a package embeds: named after what is compiled."""

from __future__ import annotations

from pathlib import Path

import pytest
from kiln.action_specs import CompileSpec, CpuTarget, PackageSpec
from kiln.actions import temp_state
from kiln.actions.aoti_compile import inductor_configs
from kiln.actions.inductor_cache import inductor_cache_dir

from tests.model_fixtures import MLP


def _spec(root: str, program: Path, cpu_target: CpuTarget = "native") -> PackageSpec:
    return PackageSpec(
        program=str(program),
        output=f"{root}/models/mlp_pt2.pt2",
        device="cpu",
        backend="inductor",
        cpu_target=cpu_target,
        inductor_configs={},
        signature=MLP.signature,
        tensorrt=None,
        refit=None,
    )


def test_output_root_and_program_path_do_not_name_the_cache(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "mlp_pt2.ep.pt2").write_bytes(b"program")
    kiln = _spec("kiln-out", tmp_path / "a/mlp_pt2.ep.pt2")
    bazel = _spec("bazel-out/k8-fastbuild/bin", tmp_path / "b/mlp_pt2.ep.pt2")
    assert kiln.to_json() != bazel.to_json()
    assert inductor_cache_dir(kiln) == inductor_cache_dir(bazel)


def test_settings_and_program_bytes_do(tmp_path: Path) -> None:
    program = tmp_path / "mlp_pt2.ep.pt2"
    program.write_bytes(b"program")
    first = inductor_cache_dir(_spec("kiln-out", program))
    assert inductor_cache_dir(_spec("kiln-out", program, cpu_target="x86-64-v3")) != first
    program.write_bytes(b"another program")
    assert inductor_cache_dir(_spec("kiln-out", program)) != first
    # Beside the shared torch state, per user (issue 11 A6), never a world-writable /tmp path.
    assert first.parent == temp_state.shared_dir().parent
    assert first.name.startswith("kiln-inductor-")


def test_the_compile_of_a_structure_is_named_the_same_way(tmp_path: Path) -> None:
    """AotiCompile's cache: its structure's bytes and settings, not where its files lie."""

    def compile_spec(root: str) -> CompileSpec:
        structure = tmp_path / root / "mlp_pt2.structure.pt2"
        structure.parent.mkdir(parents=True, exist_ok=True)
        structure.write_bytes(b"structure")
        return CompileSpec(
            structure=str(structure),
            output=f"{root}/models/mlp_pt2.program.pt2",
            layout=f"{root}/models/mlp_pt2.layout.json",
            device="cpu",
            cpu_target="native",
            cpu_isa="x86-64-v4",
            inductor_configs={},
        )

    kiln, bazel = compile_spec("kiln-out"), compile_spec("bazel-out/k8-fastbuild/bin")
    assert inductor_cache_dir(kiln) == inductor_cache_dir(bazel)
    other = kiln.model_copy(update={"cpu_target": "x86-64-v3", "cpu_isa": "x86-64-v3"})
    assert inductor_cache_dir(other) != inductor_cache_dir(kiln)


def _compile(device: str, **configs: object) -> CompileSpec:
    return CompileSpec(
        structure="s.pt2",
        output="p.pt2",
        layout="l.json",
        device=device,  # type: ignore[arg-type]
        cpu_target="native",
        cpu_isa="x86-64-v4",
        inductor_configs=dict(configs),
    )


@pytest.mark.torch  # inductor_configs of a CUDA compile imports torch
def test_a_cuda_compile_picks_its_kernel_configs_by_heuristic_not_by_timing() -> None:
    """Timing-based autotuning made two H200 builds of one program differ."""
    assert inductor_configs(_compile("cuda"), "k")["triton.autotune_pointwise"] is False
    assert "triton.autotune_pointwise" not in inductor_configs(_compile("cpu"), "k")
    asked = inductor_configs(_compile("cuda", **{"triton.autotune_pointwise": True}), "k")
    assert asked["triton.autotune_pointwise"] is True  # the target's own setting wins
    assert asked["freezing"] is False  # never the split settings
