"""TrtEngine: a TensorRT engine of a model, for Linux or cross-compiled for Windows.

    program = torch.export.export(model, examples, dynamic_shapes=...)     (on the GPU)
    linux:   trt_gm = torch_tensorrt.dynamo.compile(program, arg_inputs=[Input(min, opt, max)],
                                                    **settings)
             torch_tensorrt.save(trt_gm, "<name>.ep", arg_inputs=examples)
    windows: trt_gm = torch_tensorrt.dynamo.cross_compile_for_windows(program,
                                                    arg_inputs=[Input(min, opt, max)], **settings)
             torch_tensorrt.save(trt_gm, "<name>.ep", arg_inputs=examples)      (documented)
             or, if that fails ("Engine has not been setup yet", pytorch/TensorRT#3100),
             torch_tensorrt.dynamo.save_cross_compiled_exported_program(trt_gm, "<name>.ep")

then the serialized engine of every TensorRT submodule (`_run_on_acc_N`), or of every
inline engine where the module was loaded from a saved program (find_engines), goes to
<name>.engines/ and a manifest to <name>.manifest.json (see build_manifest).

The compile, its settings policy and the engine cache forced off are
kiln.actions.tensorrt.compiler's; the manifest lists the settings left out.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import inspect
import operator
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.action_specs import (
    Binding,
    BuildGpu,
    Compatibility,
    EngineRecord,
    RawEngine,
    SavedProgram,
    ShapeRange,
    TrtEngineSpec,
    TrtManifest,
    TrtToolchain,
    TrtWeights,
)
from kiln.actions import spec as action_spec
from kiln.actions.spec import ActionFailure
from kiln.actions.tensorrt.compiler import (  # the one compile and settings policy
    COMPILE,
    CROSS_COMPILE,
    compile_program,
    import_torch_tensorrt,
)
from kiln.actions.tensorrt.compiler import brief as _brief
from kiln.actions.tensorrt.settings import FORCED_OFF

DOCUMENTED_SAVE = "torch_tensorrt.save"
CODED_SAVE = "torch_tensorrt.dynamo.save_cross_compiled_exported_program"
TRT_SUBMODULE_PREFIX = "_run_on_acc"
# The op a loaded program calls its inline engines with (find_engines).
EXECUTE_ENGINE = "tensorrt.execute_engine"
SHAPE_METHODS = frozenset({"size", "dim", "numel", "stride"})  # not ops left to PyTorch


def main(spec: TrtEngineSpec) -> None:
    import torch

    torch_tensorrt = import_torch_tensorrt()

    from kiln.actions.model_loading import dynamic_shapes, example_inputs

    windows = spec.target_platform == "windows_x86_64"
    flavour = _flavour(torch_tensorrt)
    if windows and not getattr(torch_tensorrt.ENABLED_FEATURES, "windows_cross_compile", False):
        raise ActionFailure(
            "torch_tensorrt.ENABLED_FEATURES.windows_cross_compile is False on this machine "
            f"({'TensorRT-RTX' if flavour == 'rtx' else 'TensorRT'} {_tensorrt_version()}): "
            "its TensorRT has no Windows builder resource; cross-compile with the standard "
            "TensorRT on Linux x86-64 (the TensorRT-RTX flavour cannot)"
        )

    device = torch.device(spec.device)
    signature = spec.model.signature
    examples = [t.to(device) for t in example_inputs(signature.inputs)]
    if spec.refit is not None:
        from kiln.actions.tensorrt import refit as trt_refit

        program, trt_gm, passed, dropped, weights = trt_refit.refitted(
            torch_tensorrt,
            spec.refit,
            examples,
            device=spec.device,
            settings=spec.settings,
            ranges=spec.ranges,
        )
        io = program_io(program, spec.ranges)
    else:
        from kiln.actions.torch_export import export_model

        _, program = export_model(spec.model, device)
        # Read before compiling: Torch-TensorRT lowers the program it is given.
        io = program_io(program, spec.ranges)
        trt_gm, passed, dropped = compile_program(
            torch_tensorrt, program, spec.ranges, spec.settings, windows=windows
        )
        weights = TrtWeights(
            refit=False,
            how="built with the model's weights: a change of weights rebuilds the engine",
            weights_sha256=None,
        )

    # The engines first: saving may re-export the module it is given.
    engines = find_engines(trt_gm)
    files = write_engines(engines, Path(spec.engines), spec.name)
    # Without them the save re-exports at the example's shapes (seen on the GPU
    # machine: the .ep then rejected any other batch with "Guard failed").
    shapes = dynamic_shapes(signature)
    saved = save_program(
        torch_tensorrt, trt_gm, Path(spec.program), examples, windows=windows, shapes=shapes
    )

    manifest = build_manifest(
        spec,
        io=io,
        trt_gm=trt_gm,
        engines=engines,
        engine_files=files,
        saved=saved,
        settings=passed,
        dropped=dropped,
        toolchain=TrtToolchain(
            torch=torch.__version__,
            cuda=torch.version.cuda,
            torch_tensorrt=getattr(torch_tensorrt, "__version__", None),
            flavour=flavour,
            tensorrt=_tensorrt_version(),
            torch_tensorrt_abi=_abi_version(torch),
        ),
        build_gpu=_build_gpu(torch, spec),
        weights=weights,
    )
    path = Path(spec.manifest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(manifest.to_json())


def save_program(
    torch_tensorrt: Any,
    trt_gm: Any,
    path: Path,
    examples: list[Any],
    *,
    windows: bool,
    shapes: tuple[Any, ...] | None = None,
) -> SavedProgram:
    """Save the compiled program; what was used, and how to load it on the target.

    `shapes` are the dynamic shapes (torch.export style, by position), passed
    where the installed torch_tensorrt.save takes them.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    name = path.name
    documented_error = None
    extra: dict[str, Any] = {}
    if shapes is not None and _accepts(torch_tensorrt.save, "dynamic_shapes"):
        extra["dynamic_shapes"] = shapes
    try:
        with canonical_export_saves():
            torch_tensorrt.save(trt_gm, str(path), arg_inputs=examples, **extra)
    except Exception as error:
        if not windows:
            raise ActionFailure(f"{DOCUMENTED_SAVE} failed: {_brief(error)}") from error
        documented_error = _brief(error)
        path.unlink(missing_ok=True)  # whatever the failed save left
    else:
        return SavedProgram(
            file=name,
            saved_with=DOCUMENTED_SAVE,
            load=f'torch_tensorrt.load("{name}").module()',
            load_on="Windows x86-64" if windows else "Linux x86-64",
        )
    try:
        with canonical_export_saves():
            torch_tensorrt.dynamo.save_cross_compiled_exported_program(trt_gm, str(path))
    except Exception as error:
        raise ActionFailure(
            f"saving the cross-compiled program failed both ways: {DOCUMENTED_SAVE}: "
            f"{documented_error}; {CODED_SAVE}: {_brief(error)}"
        ) from error
    return SavedProgram(
        file=name,
        saved_with=CODED_SAVE,
        documented_save_error=documented_error,
        load=f'torch_tensorrt.load_cross_compiled_exported_program("{name}").module()',
        load_on="Windows x86-64",
    )


@contextlib.contextmanager
def canonical_export_saves() -> Iterator[None]:
    """torch.export.save writes each program canonicalized (torch_export.canonicalize: no
    stack_trace) while the block runs.

    torch_tensorrt.save re-exports the compiled module and passes that program to
    torch.export.save (looked up at the call, in 2.11 to 2.13) with each node's
    stack_trace, which names the files of the process that traced it: the `.ep` of a
    remote node and of a local build differed (H200, 2026-12-01) while their engines
    were the same bytes. And without each node's `from_node`: the re-export records
    the nodes it came from with `graph_id`, the Python id() of their graph, which
    differs from process to process (mlp_trt.ep of a local and a remote build differed
    in nothing else, H100, issue 29). torch.export from eager, the CPU path's, records
    no from_node, so kiln.actions.torch_export has nothing to drop.
    """
    import torch

    from kiln.actions.torch_export import canonicalize

    original = torch.export.save

    def save(program: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(program, torch.export.ExportedProgram):
            canonicalize(program)
            drop_node_sources(program)
        return original(program, *args, **kwargs)

    torch.export.save = save  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.export.save = original


def drop_node_sources(program: Any) -> None:
    """Drop each node's `from_node` (the passes and graphs it came from, by id())."""
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        for node in graph.nodes if graph is not None else ():
            node.meta.pop("from_node", None)


def _accepts(function: Any, name: str) -> bool:
    parameters = inspect.signature(function).parameters
    return name in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def find_engines(trt_gm: Any) -> list[tuple[str, Any]]:
    """The TensorRT engines (name, holder), in the order the graph calls them.

    A module fresh from compile holds them as `_run_on_acc_N` submodules. One loaded
    from a saved program, which is what refit_module_weights returns for the refittable
    .ep, holds them inline: `_run_on_acc_N_engine` attributes (torch.classes.tensorrt
    .Engine objects) that the graph passes to torch.ops.tensorrt.execute_engine (seen on
    the H200, 2026-12-01: the refit mlp_trt had no submodule and one such call). Both
    are named `_run_on_acc_N` here, so the manifest reads the same either way.
    """
    children = dict(trt_gm.named_children())

    def is_trt(name: str) -> bool:
        module = children.get(name)
        return hasattr(module, "serialized_engine") or name.startswith(TRT_SUBMODULE_PREFIX)

    called = [n.target for n in trt_gm.graph.nodes if n.op == "call_module"]
    order = list(dict.fromkeys([*called, *children]))
    found = [(name, children[name]) for name in order if name in children and is_trt(name)]
    for node in trt_gm.graph.nodes:
        if _executes_engine(node) and getattr(node.args[1], "op", None) == "get_attr":
            attribute = str(node.args[1].target)
            holder = read_inline_engine(_attribute(trt_gm, attribute))
            found.append((attribute.removesuffix("_engine"), holder))
    return found


def _executes_engine(node: Any) -> bool:
    return node.op == "call_function" and op_name(node.target).startswith(EXECUTE_ENGINE)


def _attribute(module: Any, dotted: str) -> Any:
    value = module
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class InlineEngine:
    """An inline engine's bytes and binding names, as a `_run_on_acc_N` submodule has them."""

    serialized_engine: bytes
    input_binding_names: tuple[str, ...]
    output_binding_names: tuple[str, ...]


def read_inline_engine(engine: Any) -> InlineEngine:
    """What a torch.classes.tensorrt.Engine holds, from its pickled state.

    The state is Torch-TensorRT's serialized-engine list (as its refit reads it:
    `engine.__getstate__()[0]`): the engine base64-encoded at ENGINE_IDX, the binding
    names joined by SERIALIZED_ENGINE_BINDING_DELIM. The indices come from the runtime's
    own ops where it registers them, else 2.11-2.13's values.
    """
    state = engine.__getstate__()
    info = state[0] if state and isinstance(state[0], (list, tuple)) else state
    engine_at = _runtime_constant("ENGINE_IDX", 3)
    inputs_at = _runtime_constant("INPUT_BINDING_NAMES_IDX", 4)
    outputs_at = _runtime_constant("OUTPUT_BINDING_NAMES_IDX", 5)
    delim = str(_runtime_constant("SERIALIZED_ENGINE_BINDING_DELIM", "%"))[:1]

    def names(packed: Any) -> tuple[str, ...]:
        text = packed.decode() if isinstance(packed, bytes) else str(packed)
        return tuple(text.split(delim)) if text else ()

    return InlineEngine(
        serialized_engine=_decoded_engine(info[engine_at]),
        input_binding_names=names(info[inputs_at]),
        output_binding_names=names(info[outputs_at]),
    )


def _decoded_engine(data: Any) -> bytes:
    raw = data.encode("latin-1") if isinstance(data, str) else bytes(data)
    try:
        return base64.b64decode(raw, validate=True)
    except binascii.Error:  # not base64: the engine's own bytes
        return raw


def _runtime_constant(name: str, default: Any) -> Any:
    try:
        import torch

        return getattr(torch.ops.tensorrt, name)()
    except Exception:  # no Torch-TensorRT runtime registered (or no such op in it)
        return default


def engine_bytes(name: str, module: Any) -> bytes:
    data = getattr(module, "serialized_engine", None)
    if isinstance(data, str):
        data = data.encode("latin-1")
    if not data:
        raise ActionFailure(f"the TensorRT submodule {name} holds no serialized engine")
    return bytes(data)


def engine_file_names(name: str, count: int) -> list[str]:
    """<name>.engine for one engine; <name>_0.engine, <name>_1.engine, ... for several."""
    if count == 1:
        return [f"{name}.engine"]
    return [f"{name}_{i}.engine" for i in range(count)]


def write_engines(engines: list[tuple[str, Any]], folder: Path, name: str) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    files = engine_file_names(name, len(engines))
    for (submodule, module), file in zip(engines, files, strict=True):
        (folder / file).write_bytes(engine_bytes(submodule, module))
    return files


def fallback_ops(trt_gm: Any, engine_names: set[str]) -> list[str]:
    """The PyTorch ops left outside TensorRT: tensor-producing calls in the top graph
    (not getitem, not shape arithmetic) and those of non-TensorRT submodules."""
    ops: list[str] = []
    for node in trt_gm.graph.nodes:
        if node.op == "call_module" and node.target not in engine_names:
            sub = trt_gm.get_submodule(node.target)
            graph = getattr(sub, "graph", None)
            if graph is None:
                ops.append(f"module {node.target} ({type(sub).__name__})")
            else:
                ops.extend(_tensor_ops(graph))
    ops.extend(_tensor_ops(trt_gm.graph))
    return ops


def _tensor_ops(graph: Any) -> list[str]:
    out = []
    for node in graph.nodes:
        if _executes_engine(node):  # an inline engine (find_engines), not a PyTorch op
            continue
        if node.op == "call_method" and node.target not in SHAPE_METHODS:
            out.append(f"Tensor.{node.target}")
        elif node.op == "call_function" and _computes_tensor(node):
            out.append(op_name(node.target))
    return out


def _computes_tensor(node: Any) -> bool:
    """Whether a call computes a tensor (a PyTorch op left outside TensorRT), as opposed to
    indexing a TensorRT module's outputs or shape arithmetic on sizes."""
    target = node.target
    if target is operator.getitem:
        return False
    val = node.meta.get("val")
    if val is not None:
        import torch

        items = val if isinstance(val, (tuple, list)) else [val]
        return any(isinstance(v, torch.Tensor) for v in items)
    schema = getattr(target, "_schema", None)
    if schema is not None:  # an aten op: by what it returns (sym_size returns an int)
        return any("Tensor" in str(r.type) for r in schema.returns)
    # Python operators in an exported (ATen) graph work on sizes: tensor math is aten.*.
    return getattr(target, "__module__", None) not in ("_operator", "operator", "math", "builtins")


def op_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    if hasattr(target, "_schema"):  # an OpOverload: aten.relu.default
        return str(target)
    from torch.fx.node import _get_qualified_name  # how fx prints a call: torch.sin, operator.add

    try:
        return str(_get_qualified_name(target))
    except Exception:
        return repr(target)


def program_io(
    program: Any, ranges: tuple[ShapeRange, ...]
) -> tuple[dict[str, ShapeRange], list[dict[str, Any] | None]]:
    """({placeholder name: range} of the user inputs, [spec of each user output]).

    An output's min/opt/max come from its symbolic shape, evaluated at the inputs'
    min/opt/max (None for a dimension that does not follow from them).
    """
    import torch

    signature = program.graph_signature
    nodes = {n.name: n for n in program.graph.nodes}
    inputs: dict[str, ShapeRange] = {}
    symbols: dict[Any, tuple[int, int, int]] = {}
    for name, item in zip(signature.user_inputs, ranges, strict=False):
        inputs[name] = item
        val = nodes[name].meta.get("val") if name in nodes else None
        for axis, size in enumerate(getattr(val, "shape", ())):
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                symbols[size.node.expr] = (item.min[axis], item.opt[axis], item.max[axis])
    output = next(n for n in program.graph.nodes if n.op == "output")
    user = set(signature.user_outputs)
    results = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    outputs = [
        tensor_spec(getattr(r, "meta", {}).get("val"), symbols)
        for r in results
        if getattr(r, "name", None) in user
    ]
    return inputs, outputs


def tensor_spec(val: Any, symbols: dict[Any, tuple[int, int, int]]) -> dict[str, Any] | None:
    """dtype and min/opt/max of a traced value (a FakeTensor), or None if it is not one."""
    import torch

    from kiln.actions.model_loading import DTYPES

    if not isinstance(val, torch.Tensor):
        return None
    names = {v: k for k, v in DTYPES.items()}
    shapes: list[list[int | None]] = [[], [], []]
    for size in val.shape:
        for which in range(3):
            shapes[which].append(_evaluate(size, symbols, which))
    return {
        "dtype": names.get(val.dtype, str(val.dtype).removeprefix("torch.")),
        "min": shapes[0],
        "opt": shapes[1],
        "max": shapes[2],
    }


def _evaluate(size: Any, symbols: dict[Any, tuple[int, int, int]], which: int) -> int | None:
    if isinstance(size, int):
        return size
    expr = size.node.expr.subs({s: v[which] for s, v in symbols.items()})
    return int(expr) if expr.is_Integer else None


def build_manifest(
    spec: TrtEngineSpec,
    *,
    io: tuple[dict[str, ShapeRange], list[dict[str, Any] | None]],
    trt_gm: Any,
    engines: list[tuple[str, Any]],
    engine_files: list[str],
    saved: SavedProgram,
    settings: dict[str, Any],
    dropped: list[str],
    toolchain: TrtToolchain,
    build_gpu: BuildGpu,
    weights: TrtWeights,
) -> TrtManifest:
    """What a deployment needs to know about the engines, as one record.

    `io` is program_io() of the exported program: the ranges of its inputs by
    placeholder name, and the dtype and shape range of each of its outputs.
    """
    windows = spec.target_platform == "windows_x86_64"
    inputs, outputs = io
    names = {name for name, _ in engines}
    fallback = fallback_ops(trt_gm, names)
    folder = Path(spec.engines).name
    records = []
    for (submodule, module), file in zip(engines, engine_files, strict=True):
        data = engine_bytes(submodule, module)
        records.append(
            EngineRecord(
                file=f"{folder}/{file}",
                submodule=submodule,
                bytes=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                inputs=_bindings(module, "input_binding_names", inputs),
                outputs=_output_bindings(module, outputs, whole=len(engines) == 1),
            )
        )
    problems = []
    if len(engines) != 1:
        problems.append(f"{len(engines)} TensorRT engines (a raw-engine deployment needs one)")
    if fallback:
        counted = Counter(fallback)
        listed = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in sorted(counted.items()))
        problems.append(f"{len(fallback)} PyTorch fallback ops remain ({listed})")
    trt = f"{'TensorRT-RTX' if toolchain.flavour == 'rtx' else 'TensorRT'} {toolchain.tensorrt}"
    hardware = bool(settings.get("hardware_compatible", False))
    version = bool(settings.get("version_compatible", False))
    return TrtManifest(
        label=spec.label,
        name=spec.name,
        model=spec.model.label,
        platform=spec.target_platform,
        compile_api=CROSS_COMPILE if windows else COMPILE,
        program=saved,
        engines=tuple(records),
        inputs=spec.ranges,
        fallback_ops=dict(sorted(Counter(fallback).items())),
        fallback_op_count=len(fallback),
        raw_engine=RawEngine(deployable=not problems, problems=tuple(problems)),
        toolchain=toolchain,
        build_gpu=build_gpu,
        compatibility=Compatibility(
            hardware_compatible=hardware,
            version_compatible=version,
            gpus=(
                "compute capability 8.0 (Ampere) and newer"
                if hardware
                else f"compute capability {build_gpu.compute_capability} (the build GPU's; "
                "Torch-TensorRT checks it at load)"
            ),
            tensorrt=f"{trt} or newer within its major version" if version else f"{trt} exactly",
        ),
        settings=settings,
        settings_not_accepted=tuple(dropped),
        forced_off=dict(FORCED_OFF) if windows else {},
        timing_cache="private to the action (under its TMPDIR)",
        weights=weights,
    )


def _binding(name: str, item: ShapeRange | dict[str, Any] | None) -> Binding:
    if item is None:
        return Binding(name=name, dtype=None, min=None, opt=None, max=None)
    if isinstance(item, ShapeRange):
        return Binding(name=name, dtype=item.dtype, min=item.min, opt=item.opt, max=item.max)
    return Binding(name=name, **item)


def _bindings(module: Any, attr: str, inputs: dict[str, ShapeRange]) -> tuple[Binding, ...]:
    names = list(getattr(module, attr, None) or [])
    return tuple(_binding(name, inputs.get(name)) for name in names)


def _output_bindings(
    module: Any, outputs: list[dict[str, Any] | None], *, whole: bool
) -> tuple[Binding, ...]:
    names = list(getattr(module, "output_binding_names", None) or [])
    # One engine computing the whole program: its outputs are the program's, in order.
    known = outputs if whole and len(outputs) == len(names) else [None] * len(names)
    return tuple(_binding(name, item) for name, item in zip(names, known, strict=True))


def _flavour(torch_tensorrt: Any) -> str:
    rtx = getattr(getattr(torch_tensorrt, "ENABLED_FEATURES", None), "tensorrt_rtx", False)
    return "rtx" if rtx else "standard"


def _tensorrt_version() -> str | None:
    module = sys.modules.get("tensorrt")  # torch_tensorrt puts its proxy (or tensorrt_rtx) here
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def _abi_version(torch: Any) -> str | None:
    try:
        return str(torch.ops.tensorrt.ABI_VERSION())
    except Exception:
        return None


def _build_gpu(torch: Any, spec: TrtEngineSpec) -> BuildGpu:
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return BuildGpu(name=props.name, compute_capability=f"{props.major}.{props.minor}")
    return spec.build_gpu


if __name__ == "__main__":
    action_spec.run(main, TrtEngineSpec, sys.argv[1:])
