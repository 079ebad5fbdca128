"""A recording stand-in for torch_tensorrt: TensorRT cannot be installed here.

StandIn builds module objects named `torch_tensorrt`, `torch_tensorrt.dynamo` and
`tensorrt` whose entry points (Input, dynamo.compile,
dynamo.cross_compile_for_windows, save, load, dynamo.save_cross_compiled_exported_program,
dynamo.refit_module_weights) record every call, with its arguments, in `calls`, and
behave the way Torch-TensorRT's sources say the real ones do (v2.11-v2.13, read, not run):

- the compile functions return a torch.fx.GraphModule whose TensorRT submodules
  are `_run_on_acc_N` children carrying `serialized_engine` bytes and
  `input_binding_names` (the graph's placeholders) / `output_binding_names`
  (output0, output1, ...);
- the module refit returns is a loaded program's: its engines are inline,
  `_run_on_acc_N_engine` attributes (StandInEngine, pickled state as
  torch.classes.tensorrt.Engine's) passed to torch.ops.tensorrt.execute_engine, an op
  defined here by its schema only (never run);
- `save` of a cross-compiled module fails with "Engine has not been setup yet"
  (pytorch/TensorRT#3100) unless told otherwise;
- the signatures name the real parameters, so kiln's filtering by
  inspect.signature sees what it would see there (`missing` removes some, as a
  version without them would);
- `save(..., output_format="aot_inductor")` writes an archive laid out as torch 2.13's
  AOTInductor packages one (kiln.actions.tensorrt.package_archive): a wrapper "library"
  derived from the graph, each engine as a TorchBind constant
  (`data/constants/custom_obj_N`, bytes of `torch._C._pickle_save`, which `install`
  teaches to pickle a StandInEngine) named in `custom_objs_config.json`, and the
  model's metadata record;
- `load` gives back (as an ExportedProgram stands, with .module()) what `save` saved
  at that path; `refit_module_weights(compiled_module, new_weight_module, arg_inputs,
  kwarg_inputs, verify_output, in_place)` (2.13's parameters) returns a new module whose
  engines hold bytes derived from the new program's weights (refit_engine_bytes), and
  raises NotImplementedError where ENABLED_FEATURES.refit is False (@needs_refit).

What this checks is the contract kiln relies on, not TensorRT: the real library
runs only on the GPU machine (tools/gpu_check.sh).
"""

from __future__ import annotations

import base64
import importlib.machinery
import inspect
import operator
import sys
import types
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

FeatureSet = namedtuple("FeatureSet", ["windows_cross_compile", "tensorrt_rtx", "refit"])

NOT_SET_UP = "Engine has not been setup yet"

# The op a loaded program's graph calls its inline engines with, so that a stand-in graph
# names it as a real one does. Where the real runtime is loaded (on the GPU machine) it is
# already defined.
if not hasattr(torch.ops.tensorrt, "execute_engine"):
    _TENSORRT_OPS = torch.library.Library("tensorrt", "FRAGMENT")
    _TENSORRT_OPS.define("execute_engine(Tensor[] input_tensors, Any engine) -> Tensor[]")


@dataclass
class Call:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class Input:
    """torch_tensorrt.Input(min_shape=, opt_shape=, max_shape=, dtype=)."""

    def __init__(
        self,
        *args: Any,
        min_shape: Any = None,
        opt_shape: Any = None,
        max_shape: Any = None,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        assert not args, "kiln passes Input's shapes by keyword"
        self.min_shape, self.opt_shape, self.max_shape = min_shape, opt_shape, max_shape
        self.dtype = dtype
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"Input(min={self.min_shape}, opt={self.opt_shape}, max={self.max_shape})"


class StandInTrtModule(torch.nn.Module):
    """A `_run_on_acc_N` submodule as cross_compile_for_windows leaves it: bytes, not set up."""

    def __init__(self, engine: bytes, inputs: list[str], outputs: list[str]) -> None:
        super().__init__()
        self.serialized_engine = engine
        self.input_binding_names = inputs
        self.output_binding_names = outputs

    def forward(self, *args: Any) -> Any:
        raise RuntimeError(NOT_SET_UP)


class StandInEngine:
    """An inline engine (torch.classes.tensorrt.Engine): its pickled state is Torch-TensorRT's
    serialized-engine list, the engine base64 at index 3, binding names joined by "%" at 4
    and 5 (2.11's layout), wrapped in a tuple as `__getstate__` gives it."""

    def __init__(
        self, engine: bytes, inputs: list[str], outputs: list[str], name: str = "standin"
    ) -> None:
        info = ["" for _ in range(11)]
        info[1] = name  # NAME_IDX: the TensorRT submodule's name
        info[3] = base64.b64encode(engine).decode()
        info[4], info[5] = "%".join(inputs), "%".join(outputs)
        self._info = info

    def __getstate__(self) -> tuple[list[str]]:
        return (list(self._info),)


STANDIN_PICKLE = b"standin-pickle:"


def pickled_engine(engine: StandInEngine) -> bytes:
    """A StandInEngine as torch._C._pickle_save gives a TorchBind object: its state."""
    return STANDIN_PICKLE + "|".join(engine.__getstate__()[0]).encode()


def unpickled_engine(data: bytes) -> StandInEngine:
    """pickled_engine's inverse, as torch._C._pickle_load_obj gives the object back."""
    engine = StandInEngine(b"", [], [])
    engine._info = data[len(STANDIN_PICKLE) :].decode().split("|")
    return engine


def module_engines(module: Any) -> list[tuple[str, StandInEngine]]:
    """(constant name, engine) as a retraced program names them: inline engines by
    their attribute, a `_run_on_acc_N` submodule's as `_run_on_acc_N_engine`."""
    found = []
    for name, child in module.named_children():
        if isinstance(child, StandInTrtModule):
            engine = StandInEngine(
                child.serialized_engine,
                child.input_binding_names,
                child.output_binding_names,
                name,
            )
            found.append((f"{name}_engine", engine))
    found += [(n, v) for n, v in vars(module).items() if isinstance(v, StandInEngine)]
    return sorted(found, key=lambda item: item[0])


def aoti_archive(module: Any, path: str, prefix: str = "") -> None:
    """What aoti_compile_and_package writes for a module with TensorRT engines (the
    layout of torch 2.13's, kiln.actions.tensorrt.package_archive): a "wrapper library"
    from the graph's code, the engines as custom objects, the metadata record."""
    import json

    from torch.export.pt2_archive import PT2ArchiveWriter

    engines = module_engines(module)
    config = {prefix + name: f"custom_obj_{i}" for i, (name, _) in enumerate(engines)}
    model = "data/aotinductor/model/"
    with PT2ArchiveWriter(path) as writer:
        writer.write_bytes(model + "model.wrapper.so", module.code.encode())
        writer.write_bytes(model + "custom_objs_config.json", json.dumps(config).encode())
        writer.write_bytes(model + "model_metadata.json", b'{"AOTI_DEVICE_KEY": "cuda"}')
        for i, (_, engine) in enumerate(engines):
            writer.write_bytes(f"data/constants/custom_obj_{i}", pickled_engine(engine))


def _needs_cross_compile(f: Any) -> Any:
    """As Torch-TensorRT's decorator of that name (2.11-2.13): no functools.wraps, so the
    wrapper's own signature is (*args, **kwargs)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return f(*args, **kwargs)

    return wrapper


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    # torch looks modules up with importlib.util.find_spec, which needs a __spec__.
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return module


def engine_bytes(index: int) -> bytes:
    return b"\x00standin-engine-" + str(index).encode() + b"\xff\xfe"


def refit_engine_bytes(index: int, program: Any) -> bytes:
    """What the stand-in's refit puts into engine `index`: bytes of the program's weights."""
    total = sum(float(t.detach().double().sum()) for t in program.state_dict.values())
    return engine_bytes(index) + f"refit:{total:.6f}".encode()


class StandInProgram:
    """What torch_tensorrt.load returns for an .ep: an ExportedProgram's .module()."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        self._module = module

    def module(self) -> torch.fx.GraphModule:
        return self._module


# The parameters the real compile functions name (2.11), less the inputs.
_SETTINGS = (
    "device",
    "disable_tf32",
    "sparse_weights",
    "workspace_size",
    "truncate_double",
    "require_full_compilation",
    "min_block_size",
    "torch_executed_ops",
    "max_aux_streams",
    "version_compatible",
    "optimization_level",
    "use_python_runtime",
    "hardware_compatible",
    "timing_cache_path",
    "lazy_engine_init",
    "cache_built_engines",
    "reuse_cached_engines",
    "immutable_weights",
)


@dataclass
class StandIn:
    engines: int = 1
    windows_cross_compile: bool = True
    rtx: bool = False
    save_error: str | None = NOT_SET_UP  # what torch_tensorrt.save raises (None: it works)
    fallback_op: bool = False  # leave aten.relu outside the engines
    missing: tuple[str, ...] = ()  # parameters this "version" lacks
    tensorrt_version: str = "11.0.0.12"
    refit: bool = True  # ENABLED_FEATURES.refit
    constant_prefix: str = ""  # before each engine's constant name in an AOTInductor package
    calls: list[Call] = field(default_factory=list)
    saved: dict[str, Any] = field(default_factory=dict)  # path -> the module saved there

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        package, dynamo, tensorrt = self._modules()
        monkeypatch.setitem(sys.modules, "torch_tensorrt", package)
        monkeypatch.setitem(sys.modules, "torch_tensorrt.dynamo", dynamo)
        monkeypatch.setitem(sys.modules, "tensorrt", tensorrt)
        original = torch._C._pickle_save

        def pickle_save(obj: Any) -> bytes:
            if isinstance(obj, StandInEngine):
                return pickled_engine(obj)
            return bytes(original(obj))

        monkeypatch.setattr(torch._C, "_pickle_save", pickle_save)
        original_load = torch._C._pickle_load_obj

        def pickle_load_obj(data: bytes) -> Any:
            if data.startswith(STANDIN_PICKLE):
                return unpickled_engine(data)
            return original_load(data)

        monkeypatch.setattr(torch._C, "_pickle_load_obj", pickle_load_obj)

    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    def call(self, name: str) -> Call:
        (found,) = [c for c in self.calls if c.name == name]
        return found

    # -- the stand-in modules --------------------------------------------------------------

    def _modules(self) -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
        package, dynamo, tensorrt = (
            _module(name) for name in ("torch_tensorrt", "torch_tensorrt.dynamo", "tensorrt")
        )
        tensorrt.__version__ = self.tensorrt_version  # type: ignore[attr-defined]
        package.__version__ = "2.13.0"  # type: ignore[attr-defined]
        package.ENABLED_FEATURES = FeatureSet(self.windows_cross_compile, self.rtx, self.refit)  # type: ignore[attr-defined]
        standin = self

        def make_input(*args: Any, **kwargs: Any) -> Input:
            standin.calls.append(Call("Input", args, kwargs))
            return Input(*args, **kwargs)

        def save(module: Any, file_path: str = "", **kwargs: Any) -> None:
            standin.calls.append(Call("save", (module, file_path), kwargs))
            if standin.save_error is not None:
                raise RuntimeError(standin.save_error)
            standin.saved[file_path] = module
            if kwargs.get("output_format") == "aot_inductor":
                aoti_archive(module, file_path, standin.constant_prefix)
                return
            with open(file_path, "wb") as f:
                f.write(b"standin: torch_tensorrt.save")

        def load(file_path: str, **kwargs: Any) -> StandInProgram:
            standin.calls.append(Call("load", (file_path,), kwargs))
            return StandInProgram(standin.saved[file_path])

        def refit_module_weights(
            compiled_module: Any,
            new_weight_module: Any,
            arg_inputs: Any = None,
            kwarg_inputs: Any = None,
            verify_output: bool = False,
            in_place: bool = False,
        ) -> torch.fx.GraphModule:
            standin.calls.append(
                Call(
                    "refit_module_weights",
                    (compiled_module, new_weight_module),
                    {
                        "arg_inputs": arg_inputs,
                        "verify_output": verify_output,
                        "in_place": in_place,
                    },
                )
            )
            if not standin.refit:
                raise NotImplementedError("Refit feature is currently not available")
            return standin._graph_module(new_weight_module, refit=True)

        def save_cross_compiled_exported_program(gm: Any, file_path: str) -> None:
            standin.calls.append(Call("save_cross_compiled_exported_program", (gm, file_path), {}))
            with open(file_path, "wb") as f:
                f.write(b"standin: save_cross_compiled_exported_program")

        package.Input = make_input  # type: ignore[attr-defined]
        package.save = save  # type: ignore[attr-defined]
        package.load = load  # type: ignore[attr-defined]
        dynamo.refit_module_weights = refit_module_weights  # type: ignore[attr-defined]
        package.dynamo = dynamo  # type: ignore[attr-defined]
        dynamo.compile = self._compile_function("compile")  # type: ignore[attr-defined]
        dynamo.cross_compile_for_windows = self._compile_function("cross_compile_for_windows")  # type: ignore[attr-defined]
        dynamo.save_cross_compiled_exported_program = save_cross_compiled_exported_program  # type: ignore[attr-defined]
        return package, dynamo, tensorrt

    def _compile_function(self, name: str) -> Any:
        standin = self

        def compile_fn(exported_program: Any, inputs: Any = None, **kwargs: Any) -> Any:
            standin.calls.append(Call(name, (exported_program,), dict(kwargs)))
            return standin._graph_module(exported_program)

        params = [
            inspect.Parameter("exported_program", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("inputs", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
            inspect.Parameter("arg_inputs", inspect.Parameter.KEYWORD_ONLY, default=None),
            inspect.Parameter("kwarg_inputs", inspect.Parameter.KEYWORD_ONLY, default=None),
            *(
                inspect.Parameter(s, inspect.Parameter.KEYWORD_ONLY, default=None)
                for s in _SETTINGS
                if s not in self.missing
            ),
            inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
        ]
        compile_fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        compile_fn.__name__ = name
        if name == "cross_compile_for_windows":
            return _needs_cross_compile(compile_fn)
        return compile_fn

    def _graph_module(self, program: Any, *, refit: bool = False) -> torch.fx.GraphModule:
        """placeholders -> _run_on_acc_0 [-> aten.relu] [-> _run_on_acc_1 ...] -> output;
        refit's module has the engines inline (execute_engine on `_run_on_acc_N_engine`)."""
        graph = torch.fx.Graph()
        root = torch.nn.Module()
        names = list(program.graph_signature.user_inputs)
        values: list[Any] = [graph.placeholder(n) for n in names]
        for i in range(self.engines):
            binding_inputs = [v.name for v in values]
            if refit:
                data = refit_engine_bytes(i, program)
                setattr(
                    root,
                    f"_run_on_acc_{i}_engine",
                    StandInEngine(data, binding_inputs, ["output0"], f"_run_on_acc_{i}"),
                )
                engine = graph.get_attr(f"_run_on_acc_{i}_engine")
                run = torch.ops.tensorrt.execute_engine.default
                outs = graph.call_function(run, (list(values), engine))
                out = graph.call_function(operator.getitem, (outs, 0))
            else:
                module = StandInTrtModule(engine_bytes(i), binding_inputs, ["output0"])
                root.add_module(f"_run_on_acc_{i}", module)
                out = graph.call_module(f"_run_on_acc_{i}", tuple(values))
            if self.fallback_op and i == 0:
                out = graph.call_function(torch.ops.aten.relu.default, (out,))
            values = [out]
        graph.output(values[0])
        return torch.fx.GraphModule(root, graph)
