"""The pure pieces of the TrtEngine action, on the CPU: settings, engines, fallback, shapes."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
from kiln.action_specs import ShapeRange
from kiln.actions.spec import ActionFailure
from kiln.actions.tensorrt import engine as trt_engine
from kiln.actions.tensorrt.compiler import accepted_settings
from kiln.actions.tensorrt.engine import (
    engine_file_names,
    fallback_ops,
    find_engines,
    program_io,
    read_inline_engine,
)
from trt_standin import StandInEngine, StandInTrtModule

pytestmark = pytest.mark.torch


def test_settings_the_function_does_not_name_are_dropped() -> None:
    def compile_fn(
        exported_program: Any, inputs: Any = None, *, min_block_size: int = 5, **kwargs: Any
    ) -> None:
        del exported_program, inputs, min_block_size, kwargs

    passed, dropped = accepted_settings(
        compile_fn, {"min_block_size": 1, "use_explicit_typing": True, "enabled_precisions": 1}
    )
    assert passed == {"min_block_size": 1}
    # **kwargs does not count: 2.13 raises on names it removed
    assert dropped == ["enabled_precisions", "use_explicit_typing"]


def test_settings_are_filtered_through_an_undecorated_wrapper() -> None:
    def needs_cross_compile(f: Any) -> Any:  # as in torch_tensorrt._features: no wraps
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return f(*args, **kwargs)

        return wrapper

    @needs_cross_compile
    def cross_compile_for_windows(
        exported_program: Any, *, arg_inputs: Any = None, hardware_compatible: bool = False
    ) -> None:
        del exported_program, arg_inputs, hardware_compatible

    passed, dropped = accepted_settings(
        cross_compile_for_windows, {"hardware_compatible": True, "enabled_precisions": 1}
    )
    assert passed == {"hardware_compatible": True}
    assert dropped == ["enabled_precisions"]
    # Nothing to look through: everything is passed rather than nothing.
    assert accepted_settings(lambda *a, **k: None, {"x": 1}) == ({"x": 1}, [])


def test_engine_files_are_named_after_the_target() -> None:
    assert engine_file_names("mlp_win", 1) == ["mlp_win.engine"]
    assert engine_file_names("mlp_win", 3) == [
        "mlp_win_0.engine",
        "mlp_win_1.engine",
        "mlp_win_2.engine",
    ]
    assert engine_file_names("mlp_win", 0) == []


class _Gpu(torch.nn.Module):
    """A PyTorch-executed submodule, as Torch-TensorRT's partitioner names `_run_on_gpu_N`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x).add(x.size(0) * 2)  # a tensor method; size arithmetic


def _partitioned() -> torch.fx.GraphModule:
    """x -> _run_on_acc_0 -> getitem -> _run_on_gpu_0 -> sym_size (shape arithmetic)
    -> _run_on_acc_1 -> aten.cat -> output."""
    root = torch.nn.Module()
    root.add_module("_run_on_gpu_0", torch.fx.symbolic_trace(_Gpu()))
    root.add_module("_run_on_acc_1", StandInTrtModule(b"one", ["getitem"], ["output0"]))
    root.add_module("_run_on_acc_0", StandInTrtModule(b"zero", ["x"], ["output0", "output1"]))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    both = graph.call_module("_run_on_acc_0", (x,))
    first = graph.call_function(operator.getitem, (both, 0))
    gpu = graph.call_module("_run_on_gpu_0", (first,))
    size = graph.call_function(torch.ops.aten.sym_size.int, (gpu, 0))
    size.meta["val"] = 4  # a shape value, not a tensor: not a fallback op
    acc = graph.call_module("_run_on_acc_1", (gpu,))
    cat = graph.call_function(torch.ops.aten.cat.default, ([acc, first],))
    graph.output(cat)
    return torch.fx.GraphModule(root, graph)


def test_engines_are_found_in_call_order() -> None:
    module = _partitioned()
    assert [name for name, _ in find_engines(module)] == ["_run_on_acc_0", "_run_on_acc_1"]


def test_fallback_ops_are_the_tensor_ops_outside_engines() -> None:
    module = _partitioned()
    ops = fallback_ops(module, {"_run_on_acc_0", "_run_on_acc_1"})
    # not: getitem (of _run_on_acc_0's outputs), sym_size, x.size(0) * 2
    assert sorted(ops) == ["Tensor.add", "aten.cat.default", "torch.sin"]


def _loaded() -> torch.fx.GraphModule:
    """A module as a loaded program has it (refit returns one): x -> execute_engine on the
    inline `_run_on_acc_0_engine` -> getitem -> aten.relu (left to PyTorch) -> output."""
    root = torch.nn.Module()
    root._run_on_acc_0_engine = StandInEngine(b"\x00zero\xff", ["x"], ["output0"])  # type: ignore[assignment]
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    engine = graph.get_attr("_run_on_acc_0_engine")
    outs = graph.call_function(torch.ops.tensorrt.execute_engine.default, ([x], engine))
    first = graph.call_function(operator.getitem, (outs, 0))
    graph.output(graph.call_function(torch.ops.aten.relu.default, (first,)))
    return torch.fx.GraphModule(root, graph)


def test_inline_engines_are_found_with_their_bytes_and_bindings() -> None:
    ((name, engine),) = find_engines(_loaded())
    assert name == "_run_on_acc_0"  # as the submodule of a fresh compile is named
    assert trt_engine.engine_bytes(name, engine) == b"\x00zero\xff"  # base64 decoded
    assert engine.input_binding_names == ("x",)
    assert engine.output_binding_names == ("output0",)


def test_the_call_of_an_inline_engine_is_not_a_fallback_op() -> None:
    assert fallback_ops(_loaded(), {"_run_on_acc_0"}) == ["aten.relu.default"]


def test_an_inline_engine_without_binding_names_has_none() -> None:
    engine = read_inline_engine(StandInEngine(b"e", [], []))
    assert engine.input_binding_names == engine.output_binding_names == ()


def test_an_engine_without_bytes_fails_the_action(tmp_path: Any) -> None:
    module = StandInTrtModule(b"", ["x"], ["output0"])
    with pytest.raises(ActionFailure, match="_run_on_acc_0 holds no serialized engine"):
        trt_engine.write_engines([("_run_on_acc_0", module)], tmp_path, "m")


class _TwoOutputs(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        both = torch.cat([x, y], dim=0)  # batch x + batch y
        return both.sum(dim=1).to(torch.int64), x[:, :2].half()


def test_output_shapes_follow_from_the_input_ranges() -> None:
    batch = torch.export.Dim("batch", min=1, max=32)
    other = torch.export.Dim("other", min=2, max=8)
    program = torch.export.export(
        _TwoOutputs(),
        (torch.randn(4, 5), torch.randn(3, 5)),
        dynamic_shapes=({0: batch}, {0: other}),
    )
    ranges = (
        ShapeRange(name="a", min=(1, 5), opt=(4, 5), max=(32, 5), dtype="float32"),
        ShapeRange(name="b", min=(2, 5), opt=(3, 5), max=(8, 5), dtype="float32"),
    )
    inputs, outputs = program_io(program, ranges)
    assert inputs == {"x": ranges[0], "y": ranges[1]}  # by position: forward's names
    assert outputs == [
        {"dtype": "int64", "min": [3], "opt": [7], "max": [40]},
        {"dtype": "float16", "min": [1, 2], "opt": [4, 2], "max": [32, 2]},
    ]


class _Small(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + 1


def test_programs_saved_inside_torch_tensorrt_save_carry_no_stack_traces(tmp_path: Any) -> None:
    """torch_tensorrt.save ends in torch.export.save of a re-exported program whose
    stack traces name the building process's files: kiln's save leaves them out."""
    import zipfile

    program = torch.export.export(_Small(), (torch.randn(2, 3),))
    assert any("stack_trace" in n.meta for n in program.graph.nodes)  # what could leak
    original = torch.export.save
    with trt_engine.canonical_export_saves():
        torch.export.save(program, tmp_path / "p.ep")  # as torch_tensorrt.save calls it
    assert torch.export.save is original  # put back
    with zipfile.ZipFile(tmp_path / "p.ep") as archive:
        saved = b"".join(archive.read(n) for n in archive.namelist())
    assert b"stack_trace" not in saved
    assert __file__.encode() not in saved
