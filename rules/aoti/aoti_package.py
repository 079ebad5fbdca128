"""aoti_package: an AOTInductor .pt2 package of a torch_model, validated, with a C++ loader.

    aoti_package(name = "resnet_pt2", model = ":resnet", device = "cpu")

Compiled once per architecture, weights joined after. Actions, each cached on its own:

    TorchExport   model source + weights -> <name>.structure.pt2 (placeholders for the
                  weights, no stack traces) + <name>.weights.safetensors (the values)
                  + <name>.golden.safetensors (eager's outputs at min/opt/max)
                  + <name>.needs.json (what loading the program imports)
    AotiCompile   <name>.structure.pt2 -> <name>.program.pt2 + <name>.layout.json
                  (10-60 s; keyed on structure: a change of weights alone, or an edit
                  that keeps the graph, is a cache hit)
    AotiJoin      program + layout + weights -> <name>.pt2, with provenance metadata
    AotiValidate  <name>.pt2 (+ its weights file) vs the goldens at min/opt/max
                  -> <name>.validation.json (reads no model source: an edit that keeps
                  eager's outputs is a hit)
    FileWrite     the C++ loader library (<name>_loader/...) and the Python loader
                  (<name>_loader.py)
    AotiManifest  <name>.pt2 -> <name>.manifest.json (how the weights got in, the
                  package's kiln.* metadata; an output, so a cache hit shows it)

Every action after the export runs in the model's environment but is keyed on
<name>.needs.json, not on the environment's locked packages: a library bump that
leaves the exported program alone re-runs the export only.

`weights` picks the deployment form: "packaged" (a self-contained .pt2) or
"separate" (the .pt2 holds the program alone; <name>.weights.safetensors is loaded
at start). Backend "tensorrt" compiles with Torch-TensorRT and needs torch_tensorrt:
where it can refit (and `refit` is left on), TorchExport (structure + weights),
TrtCompile (the refittable program, once per architecture), AotiPackage (that
program in Torch-TensorRT's AOTInductor packaging, once per architecture) and
AotiRefit (the weights refit in, the package's engine objects replaced: no
recompile; it writes the manifest); otherwise TorchExport (weights inside) and
AotiPackage (which writes the manifest). Validation as above.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kiln.rule_api import (
    DEFAULT_CPU_TARGET,
    GPUS,
    Backend,
    BuildGpu,
    CompileSpec,
    CpuTarget,
    DefaultInfo,
    Device,
    ExportSpec,
    File,
    HostFacts,
    JoinSpec,
    LabelAttr,
    ManifestSpec,
    Provenance,
    PythonPackage,
    Resources,
    Rule,
    RuleAttrs,
    RuleContext,
    Spec,
    TargetPlatform,
    TensorRTSettings,
    TrtCompileSpec,
    TrtPackageSpec,
    TrtRefit,
    TrtRefitSpec,
    ValidateSpec,
    WeightsForm,
    resolve_cpu_target,
    weights_file_of,
)
from kiln.rules.aoti import aoti_loader, aoti_windows
from kiln.rules.model.torch_model import TorchModelInfo
from kiln.rules.tensorrt.trt_toolchain import TENSORRT
from pydantic import Field, JsonValue

if TYPE_CHECKING:
    from kiln.windows_specs import WindowsTorch

# The standard and the TensorRT-RTX flavours of Torch-TensorRT install under different names.
TRT_DISTRIBUTIONS = ("torch_tensorrt", "torch_tensorrt_rtx")

# inductor_configs kiln sets itself to keep weight values out of the compiled code
# (kiln.actions.aoti_compile), and settings that would put them back in.
SPLIT_SETTINGS = (
    "always_keep_tensor_constants",
    "aot_inductor.package_constants_in_so",
    "aot_inductor.package_constants_on_disk_format",
)
VALUE_SETTINGS = {
    "freezing": "folds the weights into the compiled graph",
    "freezing_discard_parameters": "folds the weights into the compiled graph",
    "aot_inductor.use_runtime_constant_folding": "computes constants from weights when loaded",
    "aot_inductor.force_mmap_weights": "links the weights into the .so",
}


class AotiPackageAttrs(RuleAttrs):
    model: LabelAttr = Field(description="the torch_model to export and package")
    device: Device = Field(default="cpu", description="'cpu' or 'cuda'")
    backend: Backend = Field(
        default="inductor",
        description="'inductor' (AOTInductor) or 'tensorrt' (Torch-TensorRT engines inside)",
    )
    cpu_target: CpuTarget = Field(
        default=DEFAULT_CPU_TARGET,
        description="the x86-64 level inductor compiles for: 'x86-64-v3' (AVX2, the default: "
        "every x86 server in service), 'x86-64-v4' (AVX-512), or 'native': what inductor "
        "picks on the analyzing machine, resolved there and keyed (docs/models.md)",
    )
    target_platform: TargetPlatform = Field(
        default="linux_x86_64",
        description="where the package runs: 'linux_x86_64', or 'windows_x86_64' (a CPU "
        "package cross-compiled with MinGW against PyPI's Windows torch, validated under "
        "wine64: docs/windows.md)",
    )
    inductor_configs: dict[str, Any] = Field(
        default_factory=dict, description="torch._inductor config overrides, by name"
    )
    weights: WeightsForm = Field(
        default="packaged",
        description="'packaged': one self-contained .pt2, weights inside; 'separate': a .pt2 "
        "of the program alone and <name>.weights.safetensors, which the loaders load at start",
    )
    validate_: bool = Field(
        default=True, alias="validate", description="check the package against eager"
    )
    # Each output passes if max |package - eager| <= atol + rtol * max |eager| and the
    # cosine similarity of the two is >= min_cosine: tolerances scale with the output, so
    # an all-zero package fails even where eager's outputs are of magnitude 1e-5.
    rtol: float = Field(
        default=1e-4,
        ge=0,
        description="validation's tolerance, relative to each output's largest magnitude",
    )
    atol: float = Field(
        default=0.0,
        ge=0,
        description="validation's absolute floor, for outputs that are (nearly) all zero",
    )
    min_cosine: float = Field(
        default=0.999,
        ge=-1,
        le=1,
        description="validation: the lowest cosine similarity of an output with eager's",
    )
    # Torch-TensorRT settings (backend = "tensorrt")
    min_block_size: int = Field(default=1, ge=1, description="Torch-TensorRT min_block_size")
    workspace_size: int = Field(
        default=0, ge=0, description="TensorRT workspace in bytes (0: TensorRT's default)"
    )
    optimization_level: int | None = Field(
        default=None, ge=0, le=5, description="TensorRT builder optimization level"
    )
    hardware_compatible: bool = Field(
        default=False, description="engines for Ampere and newer, not only the build GPU"
    )
    version_compatible: bool = Field(
        default=False, description="engines for newer TensorRT within the major version"
    )
    torch_executed_ops: list[str] = Field(
        default_factory=list,
        description="backend 'tensorrt': ops left to PyTorch around the engines, e.g. "
        "'torch.ops.aten.relu.default'",
    )
    use_explicit_typing: bool | None = Field(
        default=None, description="Torch-TensorRT < 2.13 only (strong typing is always on)"
    )
    refit: bool = Field(
        default=True,
        description="backend 'tensorrt': build the engines once from the model's structure "
        "and refit each weights change into them (where the toolchain can refit); False: "
        "build them with the weights, so each change of weights rebuilds them",
    )
    memory_mb: int = Field(
        default=4000, ge=0, description="memory the packaging may take, for the scheduler (MB)"
    )


def implementation(ctx: RuleContext[AotiPackageAttrs]) -> list[object]:
    attrs = ctx.attrs
    model = ctx.provider("model", attrs.model, TorchModelInfo, "a torch_model target")
    if attrs.target_platform == "windows_x86_64":
        return _windows_package(ctx, model)
    if attrs.backend == "tensorrt" and attrs.device != "cuda":
        raise ctx.error("backend = 'tensorrt' needs device = 'cuda'")
    # A CUDA package is built where GPU actions run: that machine's distributions count.
    host = ctx.gpu_host if attrs.device == "cuda" else ctx.host
    flavour = next((d for d in TRT_DISTRIBUTIONS if host.version(d)), None)
    if attrs.backend == "tensorrt" and flavour is None:
        raise ctx.error(
            "backend = 'tensorrt' needs torch_tensorrt, which is not installed",
            hint="install kiln's 'trt' extra (torch-tensorrt==2.13.0) on a machine with "
            "TensorRT and a CUDA GPU, or use backend = 'inductor'",
        )
    if attrs.backend == "tensorrt" and attrs.weights == "separate":
        raise ctx.error(
            "weights = 'separate' needs backend = 'inductor': a Torch-TensorRT package "
            "holds its weights inside its engines"
        )
    if attrs.backend == "inductor" and attrs.torch_executed_ops:
        raise ctx.error(
            "torch_executed_ops needs backend = 'tensorrt': it names ops left out of "
            "TensorRT's engines",
            hint="remove torch_executed_ops, or set backend = 'tensorrt'",
        )
    if attrs.backend == "inductor":
        _check_split_settings(ctx)
    packages = ("torch", flavour) if attrs.backend == "tensorrt" and flavour else ("torch",)
    actions = _Actions(ctx, packages, model.python_env)

    # Eager's outputs at the shape points, for validation: made by the export, where the
    # model is built anyway, so that validation reads no model source (a comment-only
    # edit re-runs only the export, whose outputs come out byte-identical).
    goldens = ctx.declare_file(f"{ctx.name}.golden.safetensors") if attrs.validate_ else None
    if attrs.backend == "inductor":
        package, weights = _compile_and_join(ctx, model, actions, goldens)
        manifest = None
    else:
        (package, manifest), weights = _tensorrt_package(ctx, model, actions, goldens), None

    outputs = [package, *([weights] if weights else [])]
    if goldens is not None:
        report = ctx.declare_file(f"{ctx.name}.validation.json")
        validate_spec = ctx.declare_file(f"{ctx.name}.validate.json")
        separate = weights if attrs.weights == "separate" else None
        ctx.actions.write_spec(
            validate_spec,
            ValidateSpec(
                label=ctx.label,
                model=model.label,
                signature=model.signature,
                goldens=goldens.path,
                package=package.path,
                weights=separate.path if separate else None,
                output=report.path,
                device=attrs.device,
                backend=attrs.backend,
                rtol=attrs.rtol,
                atol=attrs.atol,
                min_cosine=attrs.min_cosine,
            ),
        )
        # The package (and its weights file) and eager's goldens, not the model's source.
        # In a worker too: the checks run in a child forked from the worker's fork server,
        # so a package that aborts fails this check, never the worker.
        actions.run(
            "AotiValidate",
            "validate",
            validate_spec,
            [package, *([separate] if separate else []), goldens],
            [report],
            2000,
            extra_packages=("safetensors",),
        )
        outputs.append(report)
    if manifest is None:
        manifest = _manifest(ctx, model, actions, package)
    outputs.append(manifest)

    library = aoti_loader.declare_loader_library(
        ctx,
        package=package,
        model=model,
        device=attrs.device,
        backend=attrs.backend,
        weights_form=attrs.weights,
    )
    python_loader = aoti_loader.declare_python_loader(
        ctx,
        package=package,
        model=model,
        device=attrs.device,
        backend=attrs.backend,
        weights_form=attrs.weights,
    )
    return [DefaultInfo((*outputs, *library, python_loader))]


def _windows_package(ctx: RuleContext[AotiPackageAttrs], model: TorchModelInfo) -> list[object]:
    """Export on Linux, compile for Windows, join, validate under Wine (aoti_windows.py)."""
    aoti_windows.check_windows(ctx, model)
    _check_split_settings(ctx)
    actions = _Actions(ctx, ("torch",), model.python_env)
    goldens = ctx.declare_file(f"{ctx.name}.golden.safetensors") if ctx.attrs.validate_ else None
    structure, weights = _export_structure(ctx, model, actions, goldens)
    package = aoti_windows.compile_and_join(ctx, model, actions, structure, weights)
    loader = aoti_windows.declare_loader(ctx, model, package)
    outputs = [package, weights, *loader.values()]
    if goldens is not None:
        outputs.append(aoti_windows.validate(ctx, model, actions, package, goldens, loader))
    return [DefaultInfo(tuple(outputs))]


class _Actions:
    """The Python actions of one aoti_package target: its device, GPU and packages, and
    the model's environment (the locked closure of its @pip// deps) for every one."""

    def __init__(
        self,
        ctx: RuleContext[AotiPackageAttrs],
        packages: tuple[str, ...],
        python_env: tuple[PythonPackage, ...],
    ):
        self.ctx = ctx
        self.packages = packages
        self.python_env = python_env
        # TorchExport's record of what loading its program imports: every action after
        # the export loads the program (or what was compiled from it), and is keyed on
        # this instead of the environment's locked packages (kiln.actions.program_needs).
        self.needs: File | None = None
        self.gpu = 1 if ctx.attrs.device == "cuda" else 0
        self.platform = {
            "device": ctx.attrs.device,
            **(_gpu_properties(ctx) if self.gpu else {}),
            **_native_properties(ctx),
        }

    def run(
        self,
        mnemonic: str,
        module: str,
        spec: File,
        inputs: list[File],
        outputs: list[File],
        memory_mb: int,
        *,
        extra_packages: tuple[str, ...] = (),
        windows_torch: WindowsTorch | None = None,
        light: bool = False,
    ) -> None:
        """light: the action imports no torch and needs no GPU (it reads and writes a few
        records): a plain process holding no GPU. In a persistent worker it gained nothing
        and, when the worker was busy, cost a second worker's start (a torch import) for
        a few milliseconds of work, holding the GPU meanwhile."""
        self.ctx.actions.run_python(
            mnemonic=mnemonic,
            module=module,
            spec=spec,
            inputs=inputs,
            outputs=outputs,
            packages=(*self.packages, *extra_packages),
            python_env=self.python_env,
            needs=self.needs,
            platform=self.platform,
            resources=Resources(cpu=1, gpu=0 if light else self.gpu, memory_mb=memory_mb),
            supports_workers=not light,
            windows_torch=windows_torch,
        )

    def compile_and_join(
        self,
        structure: File,
        weights: File,
        *,
        module: str,
        compile_spec: Callable[[str, str], Spec],
        form: WeightsForm,
        provenance: Provenance,
        windows_torch: WindowsTorch | None = None,
    ) -> File:
        """AotiCompile of the structure by `module` (its spec made from the program's and the
        layout's paths), then AotiJoin of the weights: the .pt2 (Linux and Windows alike)."""
        ctx, name = self.ctx, self.ctx.name
        program = ctx.declare_file(f"{name}.program.pt2")
        layout = ctx.declare_file(f"{name}.layout.json")
        spec = ctx.declare_file(f"{name}.compile.json")
        ctx.actions.write_spec(spec, compile_spec(program.path, layout.path))
        self.run(
            "AotiCompile",
            module,
            spec,
            [structure],
            [program, layout],
            ctx.attrs.memory_mb,
            windows_torch=windows_torch,
        )
        package = ctx.declare_file(f"{name}.pt2")
        join_spec = ctx.declare_file(f"{name}.join.json")
        ctx.actions.write_spec(
            join_spec,
            JoinSpec(
                program=program.path,
                layout=layout.path,
                weights=weights.path,
                output=package.path,
                form=form,
                provenance=provenance,
            ),
        )
        self.run(
            "AotiJoin",
            "aoti_join",
            join_spec,
            [program, layout, weights],
            [package],
            2000,
            extra_packages=("safetensors",),
        )
        return package


def _export_structure(
    ctx: RuleContext[AotiPackageAttrs],
    model: TorchModelInfo,
    actions: _Actions,
    goldens: File | None,
) -> tuple[File, File]:
    """TorchExport of the model's structure (placeholders for weights) and its weights
    apart, with eager's goldens: (the structure, the weights file)."""
    structure = ctx.declare_file(f"{ctx.name}.structure.pt2")
    weights = ctx.declare_file(weights_file_of(f"{ctx.name}.pt2"))
    _export(ctx, model, actions, goldens, program=structure, weights=weights)
    return structure, weights


def _export_with_weights(
    ctx: RuleContext[AotiPackageAttrs],
    model: TorchModelInfo,
    actions: _Actions,
    goldens: File | None,
) -> File:
    """TorchExport of the program with its weights inside (and eager's goldens)."""
    program = ctx.declare_file(f"{ctx.name}.ep.pt2")
    _export(ctx, model, actions, goldens, program=program, weights=None)
    return program


def _export(
    ctx: RuleContext[AotiPackageAttrs],
    model: TorchModelInfo,
    actions: _Actions,
    goldens: File | None,
    *,
    program: File,
    weights: File | None,
) -> None:
    """The TorchExport action: `program`, and the weights apart where `weights` is a file;
    what the program needs of the runtime goes to `actions.needs`."""
    needs = ctx.declare_file(f"{ctx.name}.needs.json")
    export_spec = ctx.declare_file(f"{ctx.name}.export.json")
    ctx.actions.write_spec(
        export_spec,
        ExportSpec(
            model=model.spec,
            device=ctx.attrs.device,
            output=program.path,
            goldens=goldens.path if goldens else None,
            weights=weights.path if weights else None,
            needs=needs.path,
        ),
    )
    actions.run(
        "TorchExport",
        "torch_export",
        export_spec,
        model.files,
        [program, *([weights] if weights else []), needs, *([goldens] if goldens else [])],
        2000,
        extra_packages=("safetensors",),
    )
    actions.needs = needs


def _compile_and_join(
    ctx: RuleContext[AotiPackageAttrs],
    model: TorchModelInfo,
    actions: _Actions,
    goldens: File | None,
) -> tuple[File, File]:
    """Export (structure + weights), compile the structure, join: (the .pt2, the weights)."""
    attrs = ctx.attrs
    structure, weights = _export_structure(ctx, model, actions, goldens)

    package = actions.compile_and_join(
        structure,
        weights,
        module="aoti_compile",
        compile_spec=lambda program, layout: CompileSpec(
            structure=structure.path,
            output=program,
            layout=layout,
            device=attrs.device,
            cpu_target=attrs.cpu_target,
            cpu_isa=_cpu_isa(ctx),
            inductor_configs=attrs.inductor_configs,
        ),
        form=attrs.weights,
        provenance=_provenance(ctx, model),
    )
    return package, weights


def _tensorrt_package(
    ctx: RuleContext[AotiPackageAttrs],
    model: TorchModelInfo,
    actions: _Actions,
    goldens: File | None,
) -> tuple[File, File]:
    """Torch-TensorRT's AOTInductor packaging: (the .pt2, its manifest).

    Where the toolchain can refit (and `refit` is on), the engines and the package
    around them are built once per architecture:

        TorchExport   the structure (placeholders), the weights apart, eager's goldens
        TrtCompile    structure -> <name>.refittable.ep (immutable_weights False)
        AotiPackage   the refittable program packaged as it is -> <name>.program.pt2
        AotiRefit     the weights refit into the engines, and the program package
                      given the refit engine objects (no recompile) -> <name>.pt2 +
                      manifest: a change of weights alone re-runs this, never
                      TrtCompile or AotiPackage

    Otherwise TorchExport exports the program with its weights and AotiPackage
    compiles and packages it (and writes the manifest).
    """
    attrs, name = ctx.attrs, ctx.name
    settings = _tensorrt_settings(attrs)
    origin = _provenance(ctx, model)
    package = ctx.declare_file(f"{name}.pt2")
    manifest = ctx.declare_file(f"{name}.manifest.json")
    package_spec = ctx.declare_file(f"{name}.package.json")
    common = {
        "label": ctx.label,
        "provenance": origin,
        "device": attrs.device,
        "signature": model.signature,
        "inductor_configs": attrs.inductor_configs,
        "tensorrt": settings,
        "torch_executed_ops": tuple(attrs.torch_executed_ops),
    }

    def aoti_package(program: File, *, compiled: bool, output: File, manifest: File | None) -> None:
        ctx.actions.write_spec(
            package_spec,
            TrtPackageSpec(
                program=program.path,
                compiled=compiled,
                output=output.path,
                manifest=manifest.path if manifest else None,
                **common,  # type: ignore[arg-type]
            ),
        )
        outputs = [output, *([manifest] if manifest else [])]
        actions.run(
            "AotiPackage",
            "tensorrt.aoti_package",
            package_spec,
            [program],
            outputs,
            attrs.memory_mb,
        )

    if not (attrs.refit and ctx.toolchain(TENSORRT).refit):
        program = _export_with_weights(ctx, model, actions, goldens)
        aoti_package(program, compiled=False, output=package, manifest=manifest)
        return package, manifest

    refit = _refittable(ctx, model, actions, goldens, settings)
    compiled = File(refit.compiled)
    program_package = ctx.declare_file(f"{name}.program.pt2")
    # the refittable program packaged once per structure; AotiRefit gives it its weights
    aoti_package(compiled, compiled=True, output=program_package, manifest=None)
    refit_spec = ctx.declare_file(f"{name}.refit.json")
    ctx.actions.write_spec(
        refit_spec,
        TrtRefitSpec(
            package=program_package.path,
            refit=refit,
            output=package.path,
            manifest=manifest.path,
            **common,  # type: ignore[arg-type]
        ),
    )
    actions.run(
        "AotiRefit",
        "tensorrt.aoti_refit",
        refit_spec,
        [program_package, compiled, File(refit.structure), File(refit.weights)],
        [package, manifest],
        attrs.memory_mb,
        extra_packages=("safetensors",),
    )
    return package, manifest


def _provenance(ctx: RuleContext[AotiPackageAttrs], model: TorchModelInfo) -> Provenance:
    """Where the package comes from, for its kiln.* metadata (docs/models.md)."""
    attrs = ctx.attrs
    return Provenance(
        target=ctx.label,
        model=model.label,
        device=attrs.device,
        cpu_target=attrs.cpu_target,
        cpu_isa=_cpu_isa(ctx),
        toolchain={"python": ctx.host.python, "os": ctx.host.os, "arch": ctx.host.arch},
    )


def _manifest(
    ctx: RuleContext[AotiPackageAttrs],
    model: TorchModelInfo,
    actions: _Actions,
    package: File,
) -> File:
    """AotiManifest of an inductor package: its weights joined, its kiln.* metadata, the
    GPU its compile was keyed to; a declared output, so a cache hit shows it."""
    manifest = ctx.declare_file(f"{ctx.name}.manifest.json")
    spec = ctx.declare_file(f"{ctx.name}.manifest_spec.json")
    gpu = actions.platform.get("gpu_name")
    ctx.actions.write_spec(
        spec,
        ManifestSpec(
            label=ctx.label,
            model=model.label,
            package=package.path,
            output=manifest.path,
            device=ctx.attrs.device,
            build_gpu=BuildGpu(
                name=gpu, compute_capability=actions.platform.get("compute_capability", "")
            )
            if gpu
            else None,
        ),
    )
    actions.run("AotiManifest", "aoti_manifest", spec, [package], [manifest], 500, light=True)
    return manifest


def _refittable(
    ctx: RuleContext[AotiPackageAttrs],
    model: TorchModelInfo,
    actions: _Actions,
    goldens: File | None,
    settings: TensorRTSettings,
) -> TrtRefit:
    """TorchExport of the structure and TrtCompile of it: what AotiPackage refits into."""
    structure, weights = _export_structure(ctx, model, actions, goldens)
    compiled = ctx.declare_file(f"{ctx.name}.refittable.ep")
    compile_spec = ctx.declare_file(f"{ctx.name}.compile.json")
    ctx.actions.write_spec(
        compile_spec,
        TrtCompileSpec(
            label=ctx.label,
            structure=structure.path,
            device=ctx.attrs.device,
            signature=model.signature,
            ranges=model.signature.ranges(),
            settings={
                **settings.compile_kwargs(),
                **_executed_ops(ctx),
                "immutable_weights": False,
            },
            output=compiled.path,
        ),
    )
    memory_mb = ctx.attrs.memory_mb
    actions.run(
        "TrtCompile", "tensorrt.compile_structure", compile_spec, [structure], [compiled], memory_mb
    )
    return TrtRefit(compiled=compiled.path, structure=structure.path, weights=weights.path)


def _check_split_settings(ctx: RuleContext[AotiPackageAttrs]) -> None:
    """Refuse inductor_configs that would make the compile depend on weight values (or
    undo what keeps it from depending on them)."""
    configs = dict(ctx.attrs.inductor_configs)
    nested = configs.pop("aot_inductor", None)
    if isinstance(nested, dict):
        configs.update({f"aot_inductor.{k}": v for k, v in nested.items()})
    for key, value in configs.items():
        if key in SPLIT_SETTINGS:
            raise ctx.error(
                f"inductor_configs sets '{key}', which kiln sets itself: it compiles the "
                "program once per architecture and joins the weights after, and this setting "
                "is what keeps weight values out of the compiled code",
                hint=f"remove '{key}' from inductor_configs",
            )
        if key in VALUE_SETTINGS and value:
            raise ctx.error(
                f"inductor_configs sets '{key}', which {VALUE_SETTINGS[key]}: kiln compiles the "
                "program once per architecture, without weight values, and joins the weights "
                "after, so a retrained model needs no new compile",
                hint=f"remove '{key}' from inductor_configs",
            )
        if key == "aot_inductor.metadata" and (
            not isinstance(value, dict) or any(str(k).startswith("kiln.") for k in value)
        ):
            raise ctx.error(
                "inductor_configs 'aot_inductor.metadata' must be a dict of strings whose keys "
                "do not start with 'kiln.' (kiln's provenance keys)"
            )


def _cpu_isa(ctx: RuleContext[AotiPackageAttrs]) -> str | None:
    """The instruction set the compile targets: cpu_target, with `native` resolved to
    what inductor picks on the host that analyzes (kiln.cpu_isa)."""
    isa = resolve_cpu_target(ctx.attrs.cpu_target, _compiling_host(ctx).cpu_isa)
    return isa.name if isa else None


def _compiling_host(ctx: RuleContext[AotiPackageAttrs]) -> HostFacts:
    # A CUDA package is compiled where GPU actions run (its CPU wrapper too).
    return ctx.gpu_host if ctx.attrs.device == "cuda" else ctx.host


def _native_properties(ctx: RuleContext[AotiPackageAttrs]) -> dict[str, str]:
    """`native` is this host's instruction set: its actions run on a machine of that
    set alone (remote execution matches a node's cpu_isa), and the key holds it. A
    named level compiles alike on any host, so it holds none."""
    if ctx.attrs.cpu_target != "native":
        return {}
    return {"cpu_isa": _compiling_host(ctx).cpu_isa or "-"}


def _gpu_properties(ctx: RuleContext[AotiPackageAttrs]) -> dict[str, str]:
    """The build GPU, which a CUDA package's kernels are compiled for: part of the key."""
    gpus = ctx.toolchain(GPUS)
    if not gpus:
        return {}
    return {"gpu_name": gpus[0].name, "compute_capability": gpus[0].compute_capability}


def _executed_ops(ctx: RuleContext[AotiPackageAttrs]) -> dict[str, JsonValue]:
    ops: list[JsonValue] = list(ctx.attrs.torch_executed_ops)
    return {"torch_executed_ops": ops} if ops else {}


def _tensorrt_settings(attrs: AotiPackageAttrs) -> TensorRTSettings:
    return TensorRTSettings(
        min_block_size=attrs.min_block_size,
        workspace_size=attrs.workspace_size,
        optimization_level=attrs.optimization_level,
        hardware_compatible=attrs.hardware_compatible,
        version_compatible=attrs.version_compatible,
        use_explicit_typing=attrs.use_explicit_typing,
    )


RULE = Rule(
    name="aoti_package",
    attrs=AotiPackageAttrs,
    doc=(
        "Exports `model` with torch.export and packages it with AOTInductor "
        "(or Torch-TensorRT when backend = 'tensorrt'); validates it against eager; "
        "emits a C++ loader library."
    ),
    impl=implementation,
    toolchains=(GPUS, TENSORRT),
)
