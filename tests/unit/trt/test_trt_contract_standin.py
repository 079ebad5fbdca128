"""Contract tests with a recording stand-in for torch_tensorrt (TensorRT cannot run here).

Each test analyzes a trt_engine / trt_windows_engine target with the rule (on an
imagined GPU machine's probe), takes the spec the rule writes, exports a tiny
model for real on the CPU, and runs the TrtEngine action's main() in-process
against trt_standin.StandIn, which records every call into "torch_tensorrt". The
tests pin the call sequence and arguments kiln makes, and the files it writes
from what comes back. Whether real TensorRT builds an engine from those calls is
checked only on the GPU machine (tools/gpu_check.sh).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from kiln.action_specs import TrtEngineSpec, TrtLoaderSpec
from kiln.actions import spec as action_spec
from kiln.actions.spec import ActionFailure
from kiln.actions.tensorrt import engine as trt_engine
from kiln.actions.tensorrt import render_loader as render_trt_loader
from kiln.rule_api import DynamicDim, TensorSpec
from trt_fixtures import GPU_STANDARD, analyze, written
from trt_manifests import record
from trt_standin import NOT_SET_UP, Input, StandIn, engine_bytes
from trt_tiny import model_execroot

from tests.model_fixtures import model_info

pytestmark = pytest.mark.torch


TINY = model_info(
    "//models:tiny",
    "models/trt_contract_tiny.py",
    "trt_contract_tiny:build",
    (TensorSpec(name="x", shape=(8, 10), dtype="float32"),),
    (DynamicDim(name="batch", min=1, max=64, axes={"x": 0}),),
)


@pytest.fixture
def execroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with model_execroot(tmp_path, monkeypatch, "trt_contract_tiny") as root:
        yield root


def run_engine_action(
    monkeypatch: pytest.MonkeyPatch,
    standin: StandIn,
    attrs: dict[str, Any],
    *,
    windows_rule: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the spec the rule wrote, the manifest the action wrote)."""
    _, actions = analyze(monkeypatch, attrs, windows_rule=windows_rule, model=TINY)
    spec = written(actions, f"kiln-out/models/{attrs['name']}.trt.json")
    spec["device"] = "cpu"  # the rule says cuda; there is none here
    standin.install(monkeypatch)
    trt_engine.main(record(spec, TrtEngineSpec))
    manifest: dict[str, Any] = json.loads(Path(spec["manifest"]).read_text())
    return spec, manifest


def _input_shapes(value: Input) -> tuple[Any, Any, Any]:
    return value.min_shape, value.opt_shape, value.max_shape


def test_contract_with_standin_cross_compile_for_windows_call_sequence(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract test with a stand-in torch_tensorrt: export, cross_compile_for_windows with
    Input ranges and without the settings it forces off, the documented save, and the coded
    save when the documented one fails with "Engine has not been setup yet"."""
    standin = StandIn()
    spec, manifest = run_engine_action(
        monkeypatch, standin, {"name": "tiny_win", "hardware_compatible": True}
    )

    assert standin.names() == [
        "Input",
        "cross_compile_for_windows",
        "save",
        "save_cross_compiled_exported_program",
    ]
    made = standin.call("Input").kwargs
    assert made == {
        "min_shape": [1, 10],
        "opt_shape": [8, 10],
        "max_shape": [64, 10],
        "dtype": torch.float32,
    }

    compiled = standin.call("cross_compile_for_windows")
    assert isinstance(compiled.args[0], torch.export.ExportedProgram)
    kwargs = dict(compiled.kwargs)
    (given,) = kwargs.pop("arg_inputs")
    assert _input_shapes(given) == ([1, 10], [8, 10], [64, 10])
    timing = Path(kwargs.pop("timing_cache_path"))
    assert timing.is_relative_to(execroot / ".tmp")  # its own, not the shared /tmp file
    assert kwargs == {
        "hardware_compatible": True,
        "version_compatible": False,
        "min_block_size": 1,
        "require_full_compilation": False,
        "disable_tf32": False,
        "truncate_double": False,
        "sparse_weights": False,
        "immutable_weights": True,
    }
    for forced in ("use_python_runtime", "lazy_engine_init", "cache_built_engines"):
        assert forced not in compiled.kwargs

    save = standin.call("save")
    assert save.args[1] == spec["program"] == "kiln-out/models/tiny_win.ep"
    (example,) = save.kwargs["arg_inputs"]
    assert tuple(example.shape) == (8, 10)
    assert set(save.kwargs) == {"arg_inputs", "dynamic_shapes"}
    ((batch,),) = [tuple(d.values()) for d in save.kwargs["dynamic_shapes"]]
    assert (batch.min, batch.max) == (1, 64)  # the range, not the example's batch of 8
    coded = standin.call("save_cross_compiled_exported_program")
    assert coded.args == (save.args[0], "kiln-out/models/tiny_win.ep")

    out = execroot / "kiln-out" / "models"
    assert (out / "tiny_win.ep").read_bytes() == b"standin: save_cross_compiled_exported_program"
    assert sorted(p.name for p in (out / "tiny_win.engines").iterdir()) == ["tiny_win.engine"]
    assert (out / "tiny_win.engines" / "tiny_win.engine").read_bytes() == engine_bytes(0)

    assert manifest["program"] == {
        "file": "tiny_win.ep",
        "saved_with": "torch_tensorrt.dynamo.save_cross_compiled_exported_program",
        "documented_save_error": f"RuntimeError: {NOT_SET_UP}",
        "load": 'torch_tensorrt.load_cross_compiled_exported_program("tiny_win.ep").module()',
        "load_on": "Windows x86-64",
    }
    assert manifest["platform"] == "windows_x86_64"
    assert manifest["compile_api"] == "torch_tensorrt.dynamo.cross_compile_for_windows"
    assert manifest["forced_off"] == {
        "use_python_runtime": False,
        "lazy_engine_init": False,
        "cache_built_engines": False,
        "reuse_cached_engines": False,
    }
    (engine,) = manifest["engines"]
    assert engine["file"] == "tiny_win.engines/tiny_win.engine"
    assert engine["submodule"] == "_run_on_acc_0"
    assert engine["bytes"] == len(engine_bytes(0))
    assert engine["inputs"] == [
        {"name": "x", "dtype": "float32", "min": [1, 10], "opt": [8, 10], "max": [64, 10]}
    ]
    # output0's shape follows from the input's: Linear(10, 4) of a batch
    assert engine["outputs"] == [
        {"name": "output0", "dtype": "float32", "min": [1, 4], "opt": [8, 4], "max": [64, 4]}
    ]
    assert manifest["raw_engine"] == {"deployable": True, "problems": []}
    assert manifest["fallback_op_count"] == 0
    # the spec's GPU (analysis saw it); on a machine with a GPU, the one the action ran on
    assert manifest["build_gpu"] == (
        _this_gpu() or {"name": "NVIDIA H200", "compute_capability": "9.0"}
    )
    assert manifest["toolchain"]["tensorrt"] == "11.0.0.12"
    assert manifest["toolchain"]["flavour"] == "standard"
    assert manifest["compatibility"]["hardware_compatible"] is True
    assert manifest["compatibility"]["gpus"] == "compute capability 8.0 (Ampere) and newer"
    assert manifest["settings_not_accepted"] == []
    assert "timing_cache_path" not in manifest["settings"]  # a per-run path: not recorded


def test_contract_with_standin_documented_save_is_used_when_it_works(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract test with a stand-in torch_tensorrt: a save that works is the one recorded."""
    standin = StandIn(save_error=None)
    _, manifest = run_engine_action(monkeypatch, standin, {"name": "tiny_win"})
    assert standin.names() == ["Input", "cross_compile_for_windows", "save"]
    assert manifest["program"] == {
        "file": "tiny_win.ep",
        "saved_with": "torch_tensorrt.save",
        "documented_save_error": None,
        "load": 'torch_tensorrt.load("tiny_win.ep").module()',
        "load_on": "Windows x86-64",
    }
    assert (
        execroot / "kiln-out/models/tiny_win.ep"
    ).read_bytes() == b"standin: torch_tensorrt.save"


def test_contract_with_standin_linux_compile_keeps_engine_caching_off(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract test with a stand-in torch_tensorrt: the Linux path is dynamo.compile with the
    same Input ranges, engine caching passed off, then torch_tensorrt.save."""
    standin = StandIn(save_error=None)
    _, manifest = run_engine_action(
        monkeypatch,
        standin,
        {"name": "tiny_trt", "platform": "linux_x86_64", "optimization_level": 3, "refit": False},
        windows_rule=False,
    )
    assert standin.names() == ["Input", "compile", "save"]
    kwargs = standin.call("compile").kwargs
    assert kwargs["cache_built_engines"] is False
    assert kwargs["reuse_cached_engines"] is False
    assert kwargs["optimization_level"] == 3
    assert "use_python_runtime" not in kwargs
    assert "lazy_engine_init" not in kwargs
    assert _input_shapes(kwargs["arg_inputs"][0]) == ([1, 10], [8, 10], [64, 10])
    assert manifest["platform"] == "linux_x86_64"
    assert manifest["compile_api"] == "torch_tensorrt.dynamo.compile"
    assert manifest["forced_off"] == {}
    assert manifest["program"]["saved_with"] == "torch_tensorrt.save"
    assert manifest["program"]["load_on"] == "Linux x86-64"
    assert (execroot / "kiln-out/models/tiny_trt.engines/tiny_trt.engine").is_file()


def test_contract_with_standin_linux_save_failure_fails_the_action(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract test with a stand-in torch_tensorrt: on Linux there is no second way to save."""
    standin = StandIn(save_error="boom")
    with pytest.raises(ActionFailure, match=r"^torch_tensorrt.save failed: RuntimeError: boom$"):
        run_engine_action(
            monkeypatch,
            standin,
            {"name": "tiny_trt", "platform": "linux_x86_64", "refit": False},
            windows_rule=False,
        )
    assert "save_cross_compiled_exported_program" not in standin.names()


def test_contract_with_standin_no_windows_builder_fails_before_compiling(
    execroot: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Contract test with a stand-in torch_tensorrt: without ENABLED_FEATURES.windows_cross_compile
    the action fails with one kiln-action-error line, before exporting or compiling."""
    standin = StandIn(windows_cross_compile=False, rtx=True, tensorrt_version="1.4.0.76")
    _, actions = analyze(monkeypatch, {"name": "tiny_win"}, windows_rule=True, model=TINY)
    spec = written(actions, "kiln-out/models/tiny_win.trt.json")
    spec_file = execroot / "spec.json"
    spec_file.write_text(record(spec, TrtEngineSpec).to_json())
    standin.install(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        action_spec.run(trt_engine.main, TrtEngineSpec, [str(spec_file)])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == (
        "kiln-action-error: torch_tensorrt.ENABLED_FEATURES.windows_cross_compile is False on "
        "this machine (TensorRT-RTX 1.4.0.76): its TensorRT has no Windows builder resource; "
        "cross-compile with the standard TensorRT on Linux x86-64 (the TensorRT-RTX flavour "
        "cannot)\n"
    )
    assert standin.calls == []


def test_contract_with_standin_settings_an_older_version_lacks_are_recorded_not_passed(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract test with a stand-in torch_tensorrt: settings the installed version does not
    name are left out of the call (passing them is an error there) and listed in the manifest."""
    standin = StandIn(missing=("sparse_weights", "immutable_weights"))
    _, manifest = run_engine_action(monkeypatch, standin, {"name": "tiny_win"})
    kwargs = standin.call("cross_compile_for_windows").kwargs
    assert "sparse_weights" not in kwargs
    assert "immutable_weights" not in kwargs
    assert manifest["settings_not_accepted"] == ["immutable_weights", "sparse_weights"]


def test_contract_with_standin_several_engines_and_fallback_ops_are_numbered_and_reported(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract test with a stand-in torch_tensorrt: two engines with a PyTorch op between
    them give numbered engine files, and a manifest that says no raw-engine deployment."""
    standin = StandIn(engines=2, fallback_op=True)
    _, manifest = run_engine_action(monkeypatch, standin, {"name": "tiny_win"})
    folder = execroot / "kiln-out/models/tiny_win.engines"
    assert sorted(p.name for p in folder.iterdir()) == ["tiny_win_0.engine", "tiny_win_1.engine"]
    assert (folder / "tiny_win_1.engine").read_bytes() == engine_bytes(1)
    first, second = manifest["engines"]
    assert first["file"] == "tiny_win.engines/tiny_win_0.engine"
    assert second["submodule"] == "_run_on_acc_1"
    # The second engine's input is an intermediate value: no declared range for it.
    assert second["inputs"] == [
        {"name": "relu_default", "dtype": None, "min": None, "opt": None, "max": None}
    ]
    assert manifest["fallback_ops"] == {"aten.relu.default": 1}
    assert manifest["raw_engine"] == {
        "deployable": False,
        "problems": [
            "2 TensorRT engines (a raw-engine deployment needs one)",
            "1 PyTorch fallback ops remain (aten.relu.default)",
        ],
    }
    with pytest.raises(ActionFailure) as failure:
        render_trt_loader.render(record(manifest))
    assert str(failure.value) == (
        "no raw-engine C++ loader for //models:tiny_win: it needs exactly one TensorRT engine "
        "and no PyTorch fallback ops, and the build left 2 TensorRT engines (a raw-engine "
        "deployment needs one); 1 PyTorch fallback ops remain (aten.relu.default). Set "
        "require_full_compilation = True (and see which ops TensorRT cannot convert), or "
        "cc_loader = False to build the .ep and engines without the C++ loader"
    )
    assert sorted(render_trt_loader.render(record(manifest), cc_loader=False)) == [
        "load_tiny_win.py"
    ]


def test_contract_with_standin_manifest_renders_the_loader_folder(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract test with a stand-in torch_tensorrt: the TrtLoader action renders the loader
    from the manifest the engine action wrote, with the engine's binding names."""
    standin = StandIn()
    _, actions = analyze(monkeypatch, {"name": "tiny_win"}, windows_rule=True, model=TINY)
    spec = written(actions, "kiln-out/models/tiny_win.trt.json")
    spec["device"] = "cpu"
    standin.install(monkeypatch)
    trt_engine.main(record(spec, TrtEngineSpec))
    render_trt_loader.main(
        record(written(actions, "kiln-out/models/tiny_win.loader.json"), TrtLoaderSpec)
    )
    folder = execroot / "kiln-out/models/tiny_win_loader"
    assert sorted(p.name for p in folder.iterdir()) == [
        "CMakeLists.txt",
        "load_tiny_win.py",
        "tiny_win_trt.cpp",
        "tiny_win_trt.h",
        "tiny_win_trt_run.cpp",
    ]
    header = (folder / "tiny_win_trt.h").read_text()
    assert "class TinyWin {" in header
    assert '{"x", nvinfer1::DataType::kFLOAT, "float32", 2,' in header
    assert '{"output0", nvinfer1::DataType::kFLOAT, "float32", 2,' in header
    # the GPU the engine was built on: the analysis' one here, the real one on a GPU machine
    assert (_this_gpu() or {"name": GPU_STANDARD.gpus[0].name})["name"] in header


def _this_gpu() -> dict[str, str] | None:
    """What the action records on a machine with a GPU (tools/gpu_check.sh runs this file
    there): the GPU it ran on, not the one the test's analysis named."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"name": props.name, "compute_capability": f"{props.major}.{props.minor}"}
