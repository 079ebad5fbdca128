"""trt_engine: a TensorRT engine of a torch_model, for Linux or cross-compiled for Windows.

    trt_engine(name = "mlp_trt", model = ":mlp", platform = "linux_x86_64")
    trt_windows_engine(name = "resnet_win", model = ":resnet", hardware_compatible = True)

trt_windows_engine (rules/tensorrt/trt_windows_engine.py) is trt_engine with the
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
built).

Refit (Linux, `refit = True`, the default, where the toolchain can refit): the
engine is built once per architecture and weights are refit into it, so a
retrained model rebuilds no engine:

    TorchExport   model + weights -> <name>.structure.pt2 (placeholders) + weights file
    TrtCompile    structure -> <name>.refittable.ep (immutable_weights = False)
    TrtEngine     refittable program + weights -> refit_module_weights -> .ep, engines,
                  manifest (which records how the weights got in: manifest.weights)

Windows engines cannot be refit on Linux (TensorRT deserializes an engine only on
the platform it targets): trt_windows_engine always builds with the weights.

The spec holds every setting and the input ranges, and the platform properties
hold the target platform, the toolchain versions and the build GPU (name, compute
capability): all of it is in the action key.

Preflight, at analysis: the rule reads the TENSORRT toolchain (the actions'
interpreter probed once, rules/tensorrt/trt_toolchain.py) and fails the target, before any
action runs,
unless the host is Linux x86-64 with a CUDA GPU and an importable
torch_tensorrt, and for Windows one whose ENABLED_FEATURES.windows_cross_compile
is set. The error says what is missing and what to install.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Self

from kiln.rule_api import (
    TRT_FORCED_OFF,
    BuildGpu,
    DefaultInfo,
    DType,
    ExportSpec,
    File,
    LabelAttr,
    Resources,
    Rule,
    RuleAttrs,
    RuleContext,
    ShapeRange,
    TargetPlatform,
    TrtCompileSpec,
    TrtEngineSpec,
    TrtLoaderSpec,
    TrtRefit,
)
from kiln.rules.model.torch_model import TorchModelInfo
from kiln.rules.tensorrt import trt_toolchain
from kiln.rules.tensorrt.trt_toolchain import TENSORRT
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# cross_compile_for_windows forces these off; kiln records them in the manifest and
# never passes them (the engine cache is off on Linux too: kiln.actions.tensorrt.settings).
FORCED_OFF = tuple(TRT_FORCED_OFF)
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

    model: LabelAttr = Field(description="the torch_model to build an engine of")
    inputs: list[InputRange] | None = Field(
        default=None,
        description="[{'name', 'min', 'opt', 'max'}] per model input; default: the "
        "model's example shapes widened on its dynamic_dims",
    )
    # Torch-TensorRT settings, passed as named (when the installed version accepts them)
    hardware_compatible: bool = Field(
        default=False, description="the engine runs on Ampere and newer, not only the build GPU"
    )
    version_compatible: bool = Field(
        default=False, description="the engine loads in newer TensorRT within its major version"
    )
    optimization_level: int | None = Field(
        default=None, ge=0, le=5, description="TensorRT builder optimization level"
    )
    min_block_size: int = Field(
        default=1, ge=1, description="fewest ops in a TensorRT block (Torch-TensorRT)"
    )
    require_full_compilation: bool = Field(
        default=False, description="fail unless every op runs in TensorRT"
    )
    workspace_size: int = Field(
        default=0, ge=0, description="TensorRT workspace in bytes (0: TensorRT's default)"
    )
    torch_executed_ops: list[str] = Field(
        default_factory=list, description="ops left to PyTorch, e.g. 'torch.ops.aten.sub.Tensor'"
    )
    disable_tf32: bool = Field(default=False, description="no TF32 in float32 layers")
    truncate_double: bool = Field(default=False, description="float64 weights as float32")
    sparse_weights: bool = Field(default=False, description="let TensorRT use sparse tactics")
    immutable_weights: bool = Field(
        default=True, description="weights baked into the engine (False: refittable)"
    )
    max_aux_streams: int | None = Field(
        default=None, ge=0, description="auxiliary CUDA streams TensorRT may use"
    )
    extra_settings: dict[str, bool | int | float | str] = Field(
        default_factory=dict,
        description="any other setting of torch_tensorrt.dynamo.compile, by name",
    )
    cc_loader: bool = Field(
        default=True,
        description="render the raw-engine C++ loader (needs one engine, no fallback ops)",
    )
    memory_mb: int = Field(
        default=8000, ge=0, description="memory the engine build may take, for the scheduler (MB)"
    )

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
    def target_platform(self) -> TargetPlatform:
        return "windows_x86_64"


class TrtEngineAttrs(TrtEngineBaseAttrs):
    platform: TargetPlatform = Field(
        default="linux_x86_64", description="'linux_x86_64', or 'windows_x86_64' cross-compiled"
    )
    refit: bool = Field(
        default=True,
        description="linux_x86_64: build a refittable engine from the model's structure once "
        "and refit each weights change into it (where the toolchain can refit); False: "
        "build with the weights, each change of them rebuilds",
    )

    @property
    def target_platform(self) -> TargetPlatform:
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


def input_ranges(attrs: TrtEngineBaseAttrs, model: TorchModelInfo) -> tuple[ShapeRange, ...]:
    """The ranges the engine is built for; ValueError if `inputs` does not fit the model."""
    given = attrs.inputs
    ranges = model.signature.ranges() if given is None else _checked_ranges(given, model)
    for item in ranges:
        if item.dtype == "float64":
            raise ValueError(
                f"input '{item.name}' is float64, which TensorRT has no type for: declare "
                "it float32 in the torch_model (and cast in the model if needed)"
            )
    return ranges


def _checked_ranges(given: list[InputRange], model: TorchModelInfo) -> tuple[ShapeRange, ...]:
    inputs, dims = model.signature.inputs, model.signature.dynamic_dims
    names = [spec.name for spec in inputs]
    if [r.name for r in given] != names:
        raise ValueError(
            f"attribute 'inputs' names {', '.join(r.name for r in given) or 'nothing'}; the "
            f"torch_model {model.label} declares {', '.join(names)} (in this order): give one "
            "range per model input"
        )
    bound = {(n, axis): dim for dim in dims for n, axis in dim.axes.items()}
    ranges = []
    for item, spec in zip(given, inputs, strict=True):
        where = f"input '{item.name}'"
        if len(item.min) != len(spec.shape):
            raise ValueError(
                f"{where} has rank {len(item.min)} in 'inputs' but rank {len(spec.shape)} in "
                f"{model.label} (example shape {list(spec.shape)})"
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
            ShapeRange(
                name=item.name,
                dtype=spec.dtype,
                min=tuple(item.min),
                opt=tuple(item.opt),
                max=tuple(item.max),
            )
        )
    return tuple(ranges)


def platform_properties(found: trt_toolchain.Probe, target_platform: str) -> dict[str, str]:
    """What the engine depends on besides its inputs and the Python toolchain: the
    TensorRT toolchain the probe found, the build GPU, the target platform.

    The versions of torch and Torch-TensorRT are not here: they are distributions
    (the action's `packages`), which python_platform writes as the installed
    distribution's version, the value a machine offers (platform_match) and a
    node's labels say. The modules' `__version__` can differ from it (the H200
    image's torch says 2.11.0+cu130, its distribution 2.11.0): a property holding
    it made the TensorRT actions infeasible on the very node that resolved them."""
    gpu = found.gpu
    return {
        "device": "cuda",
        "target_platform": target_platform,
        "cuda": found.cuda or "-",
        "torch_tensorrt_flavour": found.flavour or "-",
        "tensorrt": found.tensorrt or "-",
        "gpu_name": gpu.name if gpu else "-",
        "compute_capability": gpu.compute_capability if gpu else "-",
    }


def implementation(ctx: RuleContext[TrtEngineBaseAttrs]) -> list[object]:
    attrs = ctx.attrs
    target = attrs.target_platform
    model = ctx.provider("model", attrs.model, TorchModelInfo, "a torch_model target")
    try:
        ranges = input_ranges(attrs, model)
    except ValueError as error:
        raise ctx.error(str(error)) from None

    found = ctx.toolchain(TENSORRT)
    failed = trt_toolchain.preflight(found, target)
    if failed is not None:
        raise ctx.error(failed.message, hint=failed.hint)
    platform = platform_properties(found, target)
    packages = ["torch", *(d for d in (found.torch_tensorrt_dist, found.tensorrt_dist) if d)]
    settings = compile_settings(attrs)
    refit = target == "linux_x86_64" and getattr(attrs, "refit", False)
    if refit and attrs.immutable_weights and "immutable_weights" in attrs.model_fields_set:
        raise ctx.error(
            "immutable_weights = True builds engines that cannot be refit",
            hint="set refit = False to build the engine with the weights (each change of "
            "them rebuilds it), or leave immutable_weights out",
        )

    name = ctx.name
    program = ctx.declare_file(f"{name}.ep")
    manifest = ctx.declare_file(f"{name}.manifest.json")
    engines = ctx.declare_directory(f"{name}.engines")
    refit_inputs, needs = (
        _refit_actions(ctx, model, ranges, settings, platform, packages)
        if (refit and found.refit)
        else (None, None)
    )
    spec = ctx.declare_file(f"{name}.trt.json")
    ctx.actions.write_spec(
        spec,
        TrtEngineSpec(
            label=ctx.label,
            name=name,
            model=model.spec,
            device="cuda",
            target_platform=target,
            ranges=ranges,
            settings=settings,
            build_gpu=BuildGpu(
                name=platform["gpu_name"], compute_capability=platform["compute_capability"]
            ),
            program=program.path,
            manifest=manifest.path,
            engines=engines.path,
            refit=refit_inputs,
        ),
    )
    if refit_inputs is not None:
        inputs = [File(refit_inputs.compiled), File(refit_inputs.structure)]
        inputs.append(File(refit_inputs.weights))
    else:
        inputs = model.files
    ctx.actions.run_python(
        mnemonic="TrtEngine",
        module="tensorrt.engine",
        spec=spec,
        inputs=inputs,
        outputs=[program, manifest, engines],
        packages=[*packages, *(["safetensors"] if refit_inputs else [])],
        python_env=model.python_env,
        needs=needs,
        platform=platform,
        resources=Resources(cpu=1, gpu=1, memory_mb=attrs.memory_mb),
        progress_message=f"TrtEngine {ctx.label} ({target})",
    )

    loader = ctx.declare_directory(f"{name}_loader")
    loader_spec = ctx.declare_file(f"{name}.loader.json")
    ctx.actions.write_spec(
        loader_spec,
        TrtLoaderSpec(
            label=ctx.label,
            name=name,
            manifest=manifest.path,
            output=loader.path,
            cc_loader=attrs.cc_loader,
        ),
    )
    ctx.actions.run_python(
        mnemonic="TrtLoader",
        module="tensorrt.render_loader",
        spec=loader_spec,
        inputs=[manifest],
        outputs=[loader],
        packages=("jinja2",),
        resources=Resources(cpu=1, gpu=0, memory_mb=200),
    )
    info = TrtEngineInfo(ctx.label, target, program, manifest, engines, loader)
    return [DefaultInfo((program, manifest, engines, loader)), info]


def _refit_actions(
    ctx: RuleContext[TrtEngineBaseAttrs],
    model: TorchModelInfo,
    ranges: tuple[ShapeRange, ...],
    settings: dict[str, Any],
    platform: dict[str, str],
    packages: list[str],
) -> tuple[TrtRefit, File]:
    """TorchExport (structure + weights) and TrtCompile (the refittable program): what
    TrtEngine refits the weights into, and the export's record of what loading the
    structure imports (the actions after the export are keyed on it)."""
    name = ctx.name
    structure = ctx.declare_file(f"{name}.structure.pt2")
    weights = ctx.declare_file(f"{name}.weights.safetensors")
    needs = ctx.declare_file(f"{name}.needs.json")
    export_spec = ctx.declare_file(f"{name}.export.json")
    ctx.actions.write_spec(
        export_spec,
        ExportSpec(
            model=model.spec,
            device="cuda",
            output=structure.path,
            goldens=None,  # trt_engine has no validation action to read them
            weights=weights.path,
            needs=needs.path,
        ),
    )
    ctx.actions.run_python(
        mnemonic="TorchExport",
        module="torch_export",
        spec=export_spec,
        inputs=model.files,
        outputs=[structure, weights, needs],
        packages=("torch", "safetensors"),
        python_env=model.python_env,
        platform={"device": "cuda"},
        resources=Resources(cpu=1, gpu=1, memory_mb=2000),
    )
    compiled = ctx.declare_file(f"{name}.refittable.ep")
    compile_spec = ctx.declare_file(f"{name}.compile.json")
    ctx.actions.write_spec(
        compile_spec,
        TrtCompileSpec(
            label=ctx.label,
            structure=structure.path,
            device="cuda",
            signature=model.signature,
            ranges=ranges,
            settings={**settings, "immutable_weights": False},
            output=compiled.path,
        ),
    )
    ctx.actions.run_python(
        mnemonic="TrtCompile",
        module="tensorrt.compile_structure",
        spec=compile_spec,
        inputs=[structure],
        outputs=[compiled],
        packages=packages,
        python_env=model.python_env,
        needs=needs,
        platform=platform,
        resources=Resources(cpu=1, gpu=1, memory_mb=ctx.attrs.memory_mb),
        progress_message=f"TrtCompile {ctx.label} (refittable, from the structure)",
    )
    refit = TrtRefit(compiled=compiled.path, structure=structure.path, weights=weights.path)
    return refit, needs


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
    toolchains=(TENSORRT,),
)
