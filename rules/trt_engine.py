"""trt_engine: a TensorRT engine of a torch_model, for Linux or cross-compiled for Windows.

    trt_engine(name = "mlp_trt", model = ":mlp", platform = "linux_x86_64")
    trt_windows_engine(name = "resnet_win", model = ":resnet", hardware_compatible = True)

trt_windows_engine (rules/trt_windows_engine.py) is trt_engine with the
platform fixed to windows_x86_64: the "Cross-Compiling for Windows" workflow
of Torch-TensorRT. Outputs, for target `name`:

    <name>.ep              the compiled program (torch_tensorrt.save; for Windows, if
                           that fails, save_cross_compiled_exported_program)
    <name>.manifest.json   how it was built and how to load it: settings, toolchain,
                           build GPU, engines and their bindings, fallback ops
    <name>.engines/        the raw serialized engine of every TensorRT submodule:
                           <name>.engine, or <name>_0.engine, <name>_1.engine, ...
    <name>_loader/         a C++ class over the TensorRT runtime API for the engine,
                           its CMakeLists.txt, a runner, and load_<name>.py

Actions: FileWrite <name>.trt.json; TrtEngine (GPU: export, compile, save,
write engines and manifest); FileWrite <name>.loader.json; TrtLoader (renders
the loader from the manifest: binding names are known only once the engine is
built). The spec holds every setting and the input ranges, and the platform
properties hold the target platform, the toolchain versions and the build GPU
(name, compute capability): all of it is in the action key.

Preflight, at analysis: the rule probes the actions' interpreter
(kiln.exec.trt_probe, cached) and fails the target, before any action runs,
unless the host is Linux x86-64 with a CUDA GPU and an importable
torch_tensorrt, and for Windows one whose ENABLED_FEATURES.windows_cross_compile
is set. The error says what is missing and what to install.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, Self

from kiln.action_graph import File, Resources
from kiln.exec import trt_probe
from kiln.exec.toolchain import python_toolchain
from kiln.rule_api import LabelAttr, Rule, RuleAttrs
from kiln.rule_api.context import PYTHON_ACTION_ENV, RuleContext
from kiln.rule_api.providers import DefaultInfo
from kiln.rules.torch_model import DType, TorchModelInfo
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TargetPlatform = Literal["linux_x86_64", "windows_x86_64"]

# cross_compile_for_windows forces these off; kiln records them in the manifest and
# never passes them (on Linux too: Torch-TensorRT's engine cache keys leave out the
# weights, the TensorRT version and the GPU, so it must never stand in for kiln's).
FORCED_OFF = (
    "use_python_runtime",
    "lazy_engine_init",
    "cache_built_engines",
    "reuse_cached_engines",
)
# Arguments kiln passes itself.
RESERVED = (
    "inputs",
    "arg_inputs",
    "kwarg_inputs",
    "exported_program",
    "device",
    "timing_cache_path",
    "enable_cross_compile_for_windows",
    "engine_cache_dir",
    "engine_cache_size",
    "custom_engine_cache",
)


class InputRange(BaseModel):
    """The shapes one input may take: torch_tensorrt.Input(min_shape, opt_shape, max_shape)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: str
    min: list[int]
    opt: list[int]
    max: list[int]
    dtype: DType | None = None  # default: the torch_model's dtype of this input

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        ranks = {len(self.min), len(self.opt), len(self.max)}
        if len(ranks) != 1:
            raise ValueError(
                f"input '{self.name}': min, opt and max have different ranks "
                f"({len(self.min)}, {len(self.opt)}, {len(self.max)})"
            )
        for axis, (lo, opt, hi) in enumerate(zip(self.min, self.opt, self.max, strict=True)):
            if lo < 0:
                raise ValueError(f"input '{self.name}' axis {axis}: min {lo} is negative")
            if not lo <= opt <= hi:
                raise ValueError(
                    f"input '{self.name}' axis {axis}: min <= opt <= max does not hold "
                    f"({lo}, {opt}, {hi})"
                )
        return self


class TrtEngineBaseAttrs(RuleAttrs):
    """The attributes trt_engine and trt_windows_engine share."""

    model: LabelAttr
    inputs: list[InputRange] | None = None  # default: from the model's inputs and dynamic_dims
    # Torch-TensorRT settings, passed as named (when the installed version accepts them)
    hardware_compatible: bool = False
    version_compatible: bool = False
    optimization_level: int | None = Field(default=None, ge=0, le=5)
    min_block_size: int = Field(default=1, ge=1)
    require_full_compilation: bool = False
    workspace_size: int = Field(default=0, ge=0)  # bytes; 0: TensorRT's default
    torch_executed_ops: list[str] = Field(default_factory=list)
    disable_tf32: bool = False
    truncate_double: bool = False
    sparse_weights: bool = False
    immutable_weights: bool = True
    max_aux_streams: int | None = Field(default=None, ge=0)
    # Any other setting of torch_tensorrt.dynamo.compile, by name.
    extra_settings: dict[str, bool | int | float | str] = Field(default_factory=dict)
    # Render the raw-engine C++ loader (it needs one engine and no fallback ops).
    cc_loader: bool = True
    # Memory the engine build may take, for the scheduler (MB).
    memory_mb: int = Field(default=8000, ge=0)

    @field_validator("extra_settings")
    @classmethod
    def _extra_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        named = set(TrtEngineBaseAttrs.model_fields) - set(RuleAttrs.model_fields)
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"'{key}' is not a setting name")
            if key in FORCED_OFF:
                raise ValueError(
                    f"'{key}' is forced off by cross_compile_for_windows, and kiln keeps it "
                    "off on Linux too"
                )
            if key in RESERVED:
                raise ValueError(f"'{key}' is set by kiln itself")
            if key in named:
                raise ValueError(f"'{key}' is an attribute of its own: set {key} = ...")
        return value

    @property
    def target_platform(self) -> str:
        return "windows_x86_64"


class TrtEngineAttrs(TrtEngineBaseAttrs):
    platform: TargetPlatform = "linux_x86_64"

    @property
    def target_platform(self) -> str:
        return self.platform


@dataclass(frozen=True)
class TrtEngineInfo:
    """A built TensorRT engine, for rules that package or deploy it."""

    label: str
    platform: str
    program: File  # <name>.ep
    manifest: File  # <name>.manifest.json
    engines: File  # <name>.engines/ (a directory)
    loader: File  # <name>_loader/ (a directory)


def compile_settings(attrs: TrtEngineBaseAttrs) -> dict[str, Any]:
    """The settings the action passes to torch_tensorrt, by name (unset ones left out)."""
    settings: dict[str, Any] = {
        "hardware_compatible": attrs.hardware_compatible,
        "version_compatible": attrs.version_compatible,
        "min_block_size": attrs.min_block_size,
        "require_full_compilation": attrs.require_full_compilation,
        "disable_tf32": attrs.disable_tf32,
        "truncate_double": attrs.truncate_double,
        "sparse_weights": attrs.sparse_weights,
        "immutable_weights": attrs.immutable_weights,
    }
    if attrs.optimization_level is not None:
        settings["optimization_level"] = attrs.optimization_level
    if attrs.workspace_size:
        settings["workspace_size"] = attrs.workspace_size
    if attrs.torch_executed_ops:
        settings["torch_executed_ops"] = list(attrs.torch_executed_ops)
    if attrs.max_aux_streams is not None:
        settings["max_aux_streams"] = attrs.max_aux_streams
    settings.update(attrs.extra_settings)
    return settings


def default_ranges(model: TorchModelInfo) -> list[dict[str, Any]]:
    """min/opt/max per input: the example shape, widened on every dynamic dimension.

    opt is the dynamic dim's opt, or else the example's size (never min alone: an
    opt equal to min has failed in some Torch-TensorRT versions, pytorch/TensorRT#4103).
    """
    ranges = []
    for spec in model.inputs:
        lo, opt, hi = list(spec.shape), list(spec.shape), list(spec.shape)
        for dim in model.dynamic_dims:
            axis = dim.axes.get(spec.name)
            if axis is None:
                continue
            lo[axis], hi[axis] = dim.min, dim.max
            opt[axis] = dim.opt if dim.opt is not None else spec.shape[axis]
        ranges.append({"name": spec.name, "min": lo, "opt": opt, "max": hi, "dtype": spec.dtype})
    return ranges


def input_ranges(attrs: TrtEngineBaseAttrs, model: TorchModelInfo) -> list[dict[str, Any]]:
    """The ranges the engine is built for; ValueError if `inputs` does not fit the model."""
    given = attrs.inputs
    ranges = default_ranges(model) if given is None else _checked_ranges(given, model)
    for item in ranges:
        if item["dtype"] == "float64":
            raise ValueError(
                f"input '{item['name']}' is float64, which TensorRT has no type for: declare "
                "it float32 in the torch_model (and cast in the model if needed)"
            )
    return ranges


def _checked_ranges(given: list[InputRange], model: TorchModelInfo) -> list[dict[str, Any]]:
    names = [spec.name for spec in model.inputs]
    if [r.name for r in given] != names:
        raise ValueError(
            f"attribute 'inputs' names {', '.join(r.name for r in given) or 'nothing'}; the "
            f"torch_model {model.label} declares {', '.join(names)} (in this order): give one "
            "range per model input"
        )
    bound = {(n, axis): dim for dim in model.dynamic_dims for n, axis in dim.axes.items()}
    ranges = []
    for item, spec in zip(given, model.inputs, strict=True):
        where = f"input '{item.name}'"
        if len(item.min) != len(spec.shape):
            raise ValueError(
                f"{where} has rank {len(item.min)} in 'inputs' but rank {len(spec.shape)} in "
                f"{model.label} (example shape {spec.shape})"
            )
        if item.dtype is not None and item.dtype != spec.dtype:
            raise ValueError(
                f"{where} is {item.dtype} in 'inputs' but {spec.dtype} in {model.label}: the "
                "program is exported with the model's dtypes"
            )
        for axis, size in enumerate(spec.shape):
            lo, opt, hi = item.min[axis], item.opt[axis], item.max[axis]
            dim = bound.get((item.name, axis))
            if dim is None and not lo == opt == hi == size:
                raise ValueError(
                    f"{where} axis {axis} is static in {model.label} (size {size}; no dynamic "
                    f"dim binds it), so min, opt and max must all be {size}, not "
                    f"{lo}, {opt}, {hi}"
                )
            if dim is not None and not dim.min <= lo <= hi <= dim.max:
                raise ValueError(
                    f"{where} axis {axis}: [{lo}, {hi}] is outside [{dim.min}, {dim.max}], the "
                    f"range of the dynamic dim '{dim.name}' that torch.export exports with"
                )
        ranges.append(
            {
                "name": item.name,
                "min": list(item.min),
                "opt": list(item.opt),
                "max": list(item.max),
                "dtype": spec.dtype,
            }
        )
    return ranges


def platform_properties(found: trt_probe.Probe, target_platform: str) -> dict[str, str]:
    """What the engine depends on besides its inputs: toolchain, build GPU, target platform."""
    dists = [d for d in (found.torch_tensorrt_dist, found.tensorrt_dist) if d]
    props = python_toolchain("torch", *dists)
    gpu = found.gpu
    props.update(
        {
            "device": "cuda",
            "target_platform": target_platform,
            "torch": found.torch or "-",
            "cuda": found.cuda or "-",
            "torch_tensorrt": found.torch_tensorrt or "-",
            "torch_tensorrt_flavour": found.flavour or "-",
            "tensorrt": found.tensorrt or "-",
            "gpu_name": gpu.name if gpu else "-",
            "compute_capability": gpu.compute_capability if gpu else "-",
        }
    )
    return props


def implementation(ctx: RuleContext[TrtEngineBaseAttrs]) -> list[object]:
    attrs = ctx.attrs
    target = attrs.target_platform
    model: TorchModelInfo | None = ctx.dep(attrs.model).get(TorchModelInfo)
    if model is None:
        raise ctx.error(f"attribute 'model' must name a torch_model target, not {attrs.model}")
    try:
        ranges = input_ranges(attrs, model)
    except ValueError as error:
        raise ctx.error(str(error)) from None

    found = trt_probe.probe(ctx.python, PYTHON_ACTION_ENV)
    failed = trt_probe.preflight(found, target)
    if failed is not None:
        raise ctx.error(failed.message, hint=failed.hint)
    platform = platform_properties(found, target)

    name = ctx.name
    program = ctx.declare_file(f"{name}.ep")
    manifest = ctx.declare_file(f"{name}.manifest.json")
    engines = ctx.declare_directory(f"{name}.engines")
    spec = ctx.declare_file(f"{name}.trt.json")
    ctx.actions.write_json(
        spec,
        (
            {
                **model.spec(),
                "device": "cuda",
                "label": ctx.label,
                "name": name,
                "model_label": model.label,
                "target_platform": target,
                "ranges": ranges,
                "settings": compile_settings(attrs),
                "build_gpu": {
                    "name": platform["gpu_name"],
                    "compute_capability": platform["compute_capability"],
                },
                "program": program.path,
                "manifest": manifest.path,
                "engines": engines.path,
            }
        ),
    )
    ctx.actions.run_python(
        mnemonic="TrtEngine",
        module="trt_engine",
        spec=spec,
        inputs=model.files,
        outputs=[program, manifest, engines],
        platform=platform,
        resources=Resources(cpu=1, gpu=1, memory_mb=attrs.memory_mb),
        progress_message=f"TrtEngine {ctx.label} ({target})",
    )

    loader = ctx.declare_directory(f"{name}_loader")
    loader_spec = ctx.declare_file(f"{name}.loader.json")
    ctx.actions.write_json(
        loader_spec,
        (
            {
                "label": ctx.label,
                "name": name,
                "manifest": manifest.path,
                "output": loader.path,
                "cc_loader": attrs.cc_loader,
            }
        ),
    )
    ctx.actions.run_python(
        mnemonic="TrtLoader",
        module="render_trt_loader",
        spec=loader_spec,
        inputs=[manifest],
        outputs=[loader],
        platform=python_toolchain("jinja2"),
        resources=Resources(cpu=1, gpu=0, memory_mb=200),
    )
    info = TrtEngineInfo(ctx.label, target, program, manifest, engines, loader)
    return [DefaultInfo((program, manifest, engines, loader)), info]


RULE = Rule(
    name="trt_engine",
    attrs=TrtEngineAttrs,
    doc=(
        "A TensorRT engine of `model` for `platform` (linux_x86_64, or windows_x86_64 "
        "cross-compiled on Linux): the compiled .ep, the raw engines with a manifest, and "
        "a C++ loader over the TensorRT runtime API. Needs a Linux x86-64 host with a CUDA "
        "GPU and torch_tensorrt."
    ),
    impl=implementation,
)
