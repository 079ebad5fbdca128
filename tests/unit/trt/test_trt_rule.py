"""trt_engine / trt_windows_engine analysis: actions, specs, keys, input ranges, preflight.

The rule runs here with probes of imagined machines (trt_fixtures): analysis only,
no action runs. The CLI tests fake the probe with KILN_TRT_PROBE_JSON.
"""

from __future__ import annotations

from typing import Any

import pytest
from kiln.action_graph import Action
from kiln.cache.digest import digest_bytes
from kiln.exec.action_key import compute_key
from kiln.rule_api import ShapeRange
from kiln.rule_api.context import AnalysisError
from kiln.rule_api.providers import DefaultInfo
from kiln.rules.tensorrt.trt_engine import TrtEngineInfo
from kiln.rules.tensorrt.trt_toolchain import FAKE_ENV, Gpu
from trt_fixtures import (
    CPU_ONLY,
    GPU_RTX,
    GPU_STANDARD,
    MLP,
    TWO_INPUTS,
    analyze,
    by_mnemonic,
    probe_file,
    written,
)

from tests.kiln_workspace import MakeWorkspace


def _key(actions: list[Action]) -> str:
    """The TrtEngine action's key, its inputs digested as the executor would."""
    engine = by_mnemonic(actions, "TrtEngine")
    digests = {}
    for file in engine.inputs:
        (writer,) = [a for a in actions if file in a.outputs] or [None]
        # A spec's content; an action's output (unknown at analysis) stands by its path
        content = writer.content if writer is not None else None
        digests[file.path] = digest_bytes(content or file.path.encode(), "sha256")
    return compute_key(engine, digests, "sha256").key


def test_actions_outputs_and_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    providers, actions = analyze(monkeypatch, {"name": "mlp_win"}, windows_rule=True)
    assert [a.mnemonic for a in actions] == ["FileWrite", "TrtEngine", "FileWrite", "TrtLoader"]
    engine = by_mnemonic(actions, "TrtEngine")
    assert engine.argv[1:] == (
        "-m",
        "kiln.actions.tensorrt.engine",
        "kiln-out/models/mlp_win.trt.json",
    )
    assert [(f.path, f.directory) for f in engine.outputs] == [
        ("kiln-out/models/mlp_win.engines", True),
        ("kiln-out/models/mlp_win.ep", False),
        ("kiln-out/models/mlp_win.manifest.json", False),
    ]
    assert {f.path for f in engine.inputs} == {"kiln-out/models/mlp_win.trt.json", "models/mlp.py"}
    assert engine.resources.gpu == 1
    assert engine.supports_workers

    loader = by_mnemonic(actions, "TrtLoader")
    assert loader.argv[1:] == (
        "-m",
        "kiln.actions.tensorrt.render_loader",
        "kiln-out/models/mlp_win.loader.json",
    )
    assert {f.path for f in loader.inputs} == {
        "kiln-out/models/mlp_win.loader.json",
        "kiln-out/models/mlp_win.manifest.json",
    }
    assert [(f.path, f.directory) for f in loader.outputs] == [
        ("kiln-out/models/mlp_win_loader", True)
    ]
    assert loader.resources.gpu == 0
    assert loader.supports_workers

    default = next(p for p in providers if isinstance(p, DefaultInfo))
    assert [f.path for f in default.files] == [
        "kiln-out/models/mlp_win.ep",
        "kiln-out/models/mlp_win.manifest.json",
        "kiln-out/models/mlp_win.engines",
        "kiln-out/models/mlp_win_loader",
    ]
    info = next(p for p in providers if isinstance(p, TrtEngineInfo))
    assert info.platform == "windows_x86_64"
    assert info.engines.directory and info.loader.directory


def test_spec_holds_settings_ranges_and_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    _, actions = analyze(
        monkeypatch,
        {
            "name": "mlp_win",
            "hardware_compatible": True,
            "optimization_level": 0,
            "workspace_size": 1 << 30,
            "torch_executed_ops": ["torch.ops.aten.sub.Tensor"],
            "extra_settings": {"use_fp32_acc": True},
        },
        windows_rule=True,
    )
    spec = written(actions, "kiln-out/models/mlp_win.trt.json")
    assert spec["target_platform"] == "windows_x86_64"
    assert spec["device"] == "cuda"
    assert spec["ranges"] == [
        {"name": "x", "min": [1, 10], "opt": [8, 10], "max": [64, 10], "dtype": "float32"}
    ]
    assert spec["settings"] == {
        "hardware_compatible": True,
        "version_compatible": False,
        "min_block_size": 1,
        "require_full_compilation": False,
        "disable_tf32": False,
        "truncate_double": False,
        "sparse_weights": False,
        "immutable_weights": True,
        "optimization_level": 0,
        "workspace_size": 1 << 30,
        "torch_executed_ops": ["torch.ops.aten.sub.Tensor"],
        "use_fp32_acc": True,
    }
    assert spec["build_gpu"] == {"name": "NVIDIA H200", "compute_capability": "9.0"}
    assert spec["model"]["source"]["factory"] == "mlp:build"
    assert spec["program"] == "kiln-out/models/mlp_win.ep"
    assert spec["engines"] == "kiln-out/models/mlp_win.engines"


def test_platform_properties_name_toolchain_gpu_and_target(monkeypatch: pytest.MonkeyPatch) -> None:
    _, actions = analyze(
        monkeypatch, {"name": "mlp_trt", "platform": "linux_x86_64"}, probe=GPU_RTX
    )
    platform = dict(by_mnemonic(actions, "TrtEngine").platform)
    assert platform["target_platform"] == "linux_x86_64"
    assert platform["gpu_name"] == "NVIDIA H200"
    assert platform["compute_capability"] == "9.0"
    assert platform["cuda"] == "13.0"
    assert platform["torch_tensorrt_flavour"] == "rtx"
    assert platform["tensorrt"] == "1.4.0.76"
    assert {"os", "arch", "python", "kiln_actions", "torch_tensorrt_rtx"} <= set(platform)


def test_the_machine_that_resolved_the_toolchain_matches_and_is_routed_its_actions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the H200 the probe's torch.__version__ (2.11.0+cu130) was a property beside the
    distribution's version (2.11.0): the node that resolved the toolchain offered the
    one, the key wanted the other, and every TrtEngine was infeasible on the cluster."""
    from kiln.exec.platform_match import MachineOffer, mismatches
    from kiln.host_facts import HostFacts
    from kiln.remote_exec.routing import node_labels, route

    _, actions = analyze(
        monkeypatch, {"name": "mlp_trt", "platform": "linux_x86_64"}, probe=GPU_RTX
    )
    extra = {"cuda": "13.0", "tensorrt": "1.4.0.76", "torch_tensorrt_flavour": "rtx"}
    offer = MachineOffer(HostFacts.of_this_machine(), GPU_RTX.gpus, extra)
    engine = by_mnemonic(actions, "TrtEngine")
    assert mismatches(engine, offer, check_code=False) == []
    assert route(engine).labels.items() <= node_labels(offer).items()


@pytest.mark.parametrize(
    ("change", "other"),
    [
        ("platform", {"platform": "windows_x86_64"}),
        ("hardware_compatible", {"hardware_compatible": True}),
        ("version_compatible", {"version_compatible": True}),
        ("optimization_level", {"optimization_level": 5}),
        ("min_block_size", {"min_block_size": 3}),
        ("require_full_compilation", {"require_full_compilation": True}),
        ("workspace_size", {"workspace_size": 1 << 20}),
        ("inputs", {"inputs": [{"name": "x", "min": [2, 10], "opt": [8, 10], "max": [64, 10]}]}),
        ("extra_settings", {"extra_settings": {"use_fp32_acc": True}}),
    ],
)
def test_every_setting_and_the_target_platform_change_the_key(
    monkeypatch: pytest.MonkeyPatch, change: str, other: dict[str, Any]
) -> None:
    base = {"name": "mlp_trt", "platform": "linux_x86_64"}
    _, first = analyze(monkeypatch, base)
    _, same = analyze(monkeypatch, dict(base))
    _, changed = analyze(monkeypatch, {**base, **other})
    assert _key(first) == _key(same)
    assert _key(first) != _key(changed), change


@pytest.mark.parametrize(
    "probe",
    [
        GPU_STANDARD.__class__(**{**GPU_STANDARD.__dict__, "gpus": (Gpu("NVIDIA A100", "8.0"),)}),
        GPU_STANDARD.__class__(**{**GPU_STANDARD.__dict__, "gpus": (Gpu("NVIDIA H100", "9.0"),)}),
        GPU_STANDARD.__class__(**{**GPU_STANDARD.__dict__, "tensorrt": "11.0.1.3"}),
        GPU_RTX,
    ],
    ids=["compute_capability", "gpu_name", "tensorrt", "flavour"],
)
def test_build_gpu_and_toolchain_change_the_key(
    monkeypatch: pytest.MonkeyPatch, probe: Any
) -> None:
    attrs = {"name": "mlp_trt", "platform": "linux_x86_64"}
    _, first = analyze(monkeypatch, attrs)
    _, other = analyze(monkeypatch, attrs, probe=probe)
    assert _key(first) != _key(other)


@pytest.mark.parametrize("distribution", ["torch", "torch_tensorrt"])
def test_the_installed_torch_and_torch_tensorrt_versions_change_the_key(
    monkeypatch: pytest.MonkeyPatch, distribution: str
) -> None:
    """They are in the key as distributions (what a machine offers), not as the probe's
    module versions."""
    from kiln import machine

    installed = dict(machine.distributions())

    def with_version(version: str) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({**installed, distribution: version}.items()))

    attrs = {"name": "mlp_trt", "platform": "linux_x86_64"}
    monkeypatch.setattr(machine, "distributions", lambda: with_version("2.13.0"))
    _, first = analyze(monkeypatch, attrs)
    monkeypatch.setattr(machine, "distributions", lambda: with_version("2.13.1"))
    _, other = analyze(monkeypatch, attrs)
    assert _key(first) != _key(other)


def test_loader_spec_and_manifest_are_wired(monkeypatch: pytest.MonkeyPatch) -> None:
    _, actions = analyze(monkeypatch, {"name": "mlp_win", "cc_loader": False}, windows_rule=True)
    assert written(actions, "kiln-out/models/mlp_win.loader.json") == {
        "label": "//models:mlp_win",
        "name": "mlp_win",
        "manifest": "kiln-out/models/mlp_win.manifest.json",
        "output": "kiln-out/models/mlp_win_loader",
        "cc_loader": False,
    }


# -- input ranges ----------------------------------------------------------------------------


def test_default_ranges_widen_dynamic_dims_and_use_their_opt() -> None:
    assert TWO_INPUTS.signature.ranges() == (
        ShapeRange(
            name="image",
            min=(1, 3, 32, 48),
            opt=(4, 3, 64, 48),  # batch opt 4; height: the example's 64
            max=(8, 3, 512, 48),
            dtype="float16",
        ),
        ShapeRange(name="class", min=(1, 7), opt=(4, 7), max=(8, 7), dtype="int64"),
    )


def test_given_ranges_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    ranges = [{"name": "x", "min": [2, 10], "opt": [16, 10], "max": [32, 10]}]
    _, actions = analyze(monkeypatch, {"name": "mlp_win", "inputs": ranges}, windows_rule=True)
    assert written(actions, "kiln-out/models/mlp_win.trt.json")["ranges"] == [
        {"name": "x", "min": [2, 10], "opt": [16, 10], "max": [32, 10], "dtype": "float32"}
    ]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            [{"name": "y", "min": [1, 10], "opt": [8, 10], "max": [64, 10]}],
            "attribute 'inputs' names y; the torch_model //models:mlp declares x (in this "
            "order): give one range per model input",
        ),
        (
            [{"name": "x", "min": [1], "opt": [8], "max": [64]}],
            "input 'x' has rank 1 in 'inputs' but rank 2 in //models:mlp (example shape [8, 10])",
        ),
        (
            [{"name": "x", "min": [1, 10], "opt": [8, 10], "max": [64, 12]}],
            "input 'x' axis 1 is static in //models:mlp (size 10; no dynamic dim binds it), so "
            "min, opt and max must all be 10, not 10, 10, 12",
        ),
        (
            [{"name": "x", "min": [1, 10], "opt": [8, 10], "max": [128, 10]}],
            "input 'x' axis 0: [1, 128] is outside [1, 64], the range of the dynamic dim "
            "'batch' that torch.export exports with",
        ),
        (
            [{"name": "x", "min": [1, 10], "opt": [8, 10], "max": [64, 10], "dtype": "float16"}],
            "input 'x' is float16 in 'inputs' but float32 in //models:mlp: the program is "
            "exported with the model's dtypes",
        ),
    ],
    ids=["names", "rank", "static_axis", "dynamic_range", "dtype"],
)
def test_ranges_that_do_not_fit_the_model_fail_analysis(
    monkeypatch: pytest.MonkeyPatch, inputs: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(AnalysisError) as error:
        analyze(monkeypatch, {"name": "mlp_win", "inputs": inputs}, windows_rule=True)
    assert error.value.message == message
    assert error.value.label == "//models:mlp_win"


def test_bad_ranges_and_settings_are_attribute_errors(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "m/BUILD": """\
                torch_model(name = "mlp", src = "mlp.py", factory = "mlp:build",
                            inputs = [{"name": "x", "shape": [8, 10]}])
                trt_engine(name = "a", model = ":mlp",
                           inputs = [{"name": "x", "min": [1, 10], "opt": [0, 10], "max": [4, 10]}])
                """,
            "m/mlp.py": "",
        }
    )
    result = ws.kiln("query", "//m:a")
    assert result.code == 1
    assert result.err == (
        "ERROR: m/BUILD:3:1: //m:a: attribute 'inputs[0]' of trt_engine(): input "
        "'x' axis 0: min <= opt <= max does not hold (1, 0, 4)\n"
    )
    for attrs, expected in [
        ("optimization_level = 6", "attribute 'optimization_level' of trt_windows_engine() "),
        ("min_block_size = 0", "attribute 'min_block_size' of trt_windows_engine() "),
        ('platform = "linux_x86_64"', "trt_windows_engine() got an unknown attribute 'platform'"),
        (
            'extra_settings = {"use_python_runtime": True}',
            "'use_python_runtime' is forced off by cross_compile_for_windows",
        ),
    ]:
        ws.write(
            "w/BUILD",
            f"""\
                    trt_windows_engine(name = "w", model = "//m:mlp", {attrs})
                    """,
        )
        result = ws.kiln("query", "//w:w")
        assert result.code == 1, attrs
        assert expected in result.err, result.err


def test_trt_engine_platform_must_be_known(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "m/BUILD": """\
                torch_model(name = "mlp", src = "mlp.py", factory = "mlp:build",
                            inputs = [{"name": "x", "shape": [8, 10]}])
                trt_engine(name = "a", model = ":mlp", platform = "macos_arm64")
                """,
            "m/mlp.py": "",
        }
    )
    result = ws.kiln("query", "//m:a")
    assert result.code == 1
    assert "attribute 'platform' of trt_engine() should be 'linux_x86_64' or 'windows_x86_64'" in (
        result.err
    )


# -- preflight -------------------------------------------------------------------------------


def test_preflight_fails_the_target_before_any_action(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AnalysisError) as error:
        analyze(monkeypatch, {"name": "mlp_win"}, windows_rule=True, probe=GPU_RTX)
    assert error.value.message == (
        "cannot build a TensorRT engine for windows_x86_64 here: "
        "torch_tensorrt.ENABLED_FEATURES.windows_cross_compile is False: TensorRT-RTX 1.4.0.76 "
        "has no Windows builder resource (libnvinfer_builder_resource_win.so)"
    )
    assert error.value.hint is not None
    assert "the TensorRT-RTX flavour (torch-tensorrt-rtx) cannot cross-compile" in error.value.hint
    # The same machine builds Linux engines.
    analyze(monkeypatch, {"name": "mlp_trt", "platform": "linux_x86_64"}, probe=GPU_RTX)


WORKSPACE = {
    "models/BUILD": """\
        torch_model(
            name = "mlp",
            src = "mlp.py",
            factory = "mlp:build",
            inputs = [{"name": "x", "shape": [8, 10]}],
            dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
        )
        trt_windows_engine(name = "mlp_win", model = ":mlp")
        genrule(name = "notes", outs = ["notes.txt"], cmd = "echo hi > $@")
        """,
    "models/mlp.py": "",
}

CPU_ERROR = (
    "ERROR: models/BUILD:8:1: //models:mlp_win: cannot build a TensorRT engine for "
    "windows_x86_64 here: no CUDA GPU (torch 2.13.0+cpu is a CPU-only build); torch_tensorrt "
    "is not importable (ModuleNotFoundError: No module named 'torch_tensorrt')\n"
    "  hint: pip install torch-tensorrt==2.13.0 (kiln's 'trt' extra) on a Linux x86-64 machine "
    "with a CUDA GPU and a CUDA build of torch 2.13 (torch-tensorrt pins torch exactly); "
    "cross-compiling for Windows needs the standard TensorRT, whose Linux libraries ship the "
    "Windows builder resource: the TensorRT-RTX flavour (torch-tensorrt-rtx) cannot "
    "cross-compile for Windows\n"
)


def test_build_on_a_cpu_machine_fails_fast_with_the_preflight_error(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    ws = make_workspace(WORKSPACE)
    monkeypatch.setenv(FAKE_ENV, probe_file(tmp_path, CPU_ONLY))
    result = ws.kiln("build", "//models:mlp_win")
    assert result.code == 1
    assert result.err == CPU_ERROR
    assert "Traceback" not in result.out + result.err
    assert not (ws.root / "kiln-out/models/mlp_win.ep").exists()


def test_keep_going_builds_the_rest(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    ws = make_workspace(WORKSPACE)
    monkeypatch.setenv(FAKE_ENV, probe_file(tmp_path, CPU_ONLY))
    result = ws.kiln("build", "--keep_going", "//models:mlp_win", "//models:notes")
    assert result.code == 1
    assert CPU_ERROR in result.err
    assert (ws.root / "kiln-out/models/notes.txt").read_text() == "hi\n"


def test_query_never_probes(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    ws = make_workspace(WORKSPACE)
    monkeypatch.setenv(FAKE_ENV, str(tmp_path / "does-not-exist.json"))  # reading it would fail
    assert ws.query("//models:all") == [
        "//models:mlp",
        "//models:mlp_win",
        "//models:notes",
    ]


def test_model_must_be_a_torch_model(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "m/BUILD": """\
                genrule(name = "g", outs = ["g.txt"], cmd = "touch $@")
                trt_engine(name = "a", model = ":g")
                """
        }
    )
    result = ws.kiln("build", "//m:a")
    assert result.code == 1
    assert result.err == (
        "ERROR: m/BUILD:2:1: //m:a: attribute 'model' must name a torch_model target, not //m:g\n"
    )


def test_mlp_shape_in_the_fixture_matches_the_repository_model() -> None:
    assert MLP.signature.inputs[0].shape == (8, 10)
