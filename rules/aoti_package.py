"""aoti_package: an AOTInductor .pt2 package of a torch_model, validated, with a C++ loader.

    aoti_package(name = "resnet_pt2", model = ":resnet", device = "cpu")

Actions, each cached on its own:

    TorchExport   model source + weights -> <name>.ep.pt2 (canonical: no stack traces)
                  and <name>.golden.safetensors (eager's outputs at min/opt/max)
    AotiPackage   <name>.ep.pt2 -> <name>.pt2          (10-60 s; early cutoff: an edit
                                                        that keeps the graph is a hit)
    AotiValidate  <name>.pt2 vs the goldens at min/opt/max -> <name>.validation.json
                  (reads no model source: an edit that keeps eager's outputs is a hit)
    FileWrite     the C++ loader library (<name>_loader/...) and the Python loader
                  (<name>_loader.py)

Backend "tensorrt" compiles with Torch-TensorRT and needs torch_tensorrt.
"""

from __future__ import annotations

from typing import Any

from kiln.rule_api import (
    GPUS,
    Backend,
    CpuTarget,
    DefaultInfo,
    Device,
    ExportSpec,
    File,
    LabelAttr,
    PackageSpec,
    Resources,
    Rule,
    RuleAttrs,
    RuleContext,
    TensorRTSettings,
    ValidateSpec,
)
from kiln.rules import aoti_loader
from kiln.rules.torch_model import TorchModelInfo
from pydantic import Field

# The standard and the TensorRT-RTX flavours of Torch-TensorRT install under different names.
TRT_DISTRIBUTIONS = ("torch_tensorrt", "torch_tensorrt_rtx")


class AotiPackageAttrs(RuleAttrs):
    model: LabelAttr = Field(description="the torch_model to export and package")
    device: Device = Field(default="cpu", description="'cpu' or 'cuda'")
    backend: Backend = Field(
        default="inductor",
        description="'inductor' (AOTInductor) or 'tensorrt' (Torch-TensorRT engines inside)",
    )
    cpu_target: CpuTarget = Field(
        default="native",
        description="the CPU instruction set inductor compiles for ('native': this machine's)",
    )
    inductor_configs: dict[str, Any] = Field(
        default_factory=dict, description="torch._inductor config overrides, by name"
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
    use_explicit_typing: bool | None = Field(
        default=None, description="Torch-TensorRT < 2.13 only (strong typing is always on)"
    )
    memory_mb: int = Field(
        default=4000, ge=0, description="memory the packaging may take, for the scheduler (MB)"
    )


def implementation(ctx: RuleContext[AotiPackageAttrs]) -> list[object]:
    attrs = ctx.attrs
    model = ctx.provider("model", attrs.model, TorchModelInfo, "a torch_model target")
    if attrs.backend == "tensorrt" and attrs.device != "cuda":
        raise ctx.error("backend = 'tensorrt' needs device = 'cuda'")
    flavour = next((d for d in TRT_DISTRIBUTIONS if ctx.host.version(d)), None)
    if attrs.backend == "tensorrt" and flavour is None:
        raise ctx.error(
            "backend = 'tensorrt' needs torch_tensorrt, which is not installed",
            hint="install kiln's 'trt' extra (torch-tensorrt==2.13.0) on a machine with "
            "TensorRT and a CUDA GPU, or use backend = 'inductor'",
        )
    gpu = 1 if attrs.device == "cuda" else 0
    packages = ("torch", flavour) if attrs.backend == "tensorrt" and flavour else ("torch",)
    platform = {"device": attrs.device, **(_gpu_properties(ctx) if gpu else {})}
    name = ctx.name

    def run(
        mnemonic: str,
        module: str,
        spec: File,
        inputs: list[File],
        outputs: list[File],
        memory_mb: int,
        *,
        workers: bool = True,
    ) -> None:
        ctx.actions.run_python(
            mnemonic=mnemonic,
            module=module,
            spec=spec,
            inputs=inputs,
            outputs=outputs,
            packages=packages,
            python_env=model.python_env,
            platform=platform,
            resources=Resources(cpu=1, gpu=gpu, memory_mb=memory_mb),
            supports_workers=workers,
        )

    program = ctx.declare_file(f"{name}.ep.pt2")
    # Eager's outputs at the shape points, for validation: made where the model is built
    # anyway, so that validation reads no model source (a comment-only edit re-runs
    # only the export, whose outputs come out byte-identical).
    goldens = ctx.declare_file(f"{name}.golden.safetensors") if attrs.validate_ else None
    export_spec = ctx.declare_file(f"{name}.export.json")
    ctx.actions.write_spec(
        export_spec,
        ExportSpec(
            model=model.spec,
            device=attrs.device,
            output=program.path,
            goldens=goldens.path if goldens else None,
        ),
    )
    exported = [program, *([goldens] if goldens else [])]
    run("TorchExport", "torch_export", export_spec, model.files, exported, 2000)

    package = ctx.declare_file(f"{name}.pt2")
    package_spec = ctx.declare_file(f"{name}.package.json")
    ctx.actions.write_spec(
        package_spec,
        PackageSpec(
            program=program.path,
            output=package.path,
            device=attrs.device,
            backend=attrs.backend,
            cpu_target=attrs.cpu_target,
            inductor_configs=attrs.inductor_configs,
            signature=model.signature,
            tensorrt=_tensorrt_settings(attrs) if attrs.backend == "tensorrt" else None,
        ),
    )
    run("AotiPackage", "aoti_package", package_spec, [program], [package], attrs.memory_mb)

    outputs = [package]
    if goldens is not None:
        report = ctx.declare_file(f"{name}.validation.json")
        validate_spec = ctx.declare_file(f"{name}.validate.json")
        ctx.actions.write_spec(
            validate_spec,
            ValidateSpec(
                label=ctx.label,
                model=model.label,
                signature=model.signature,
                goldens=goldens.path,
                package=package.path,
                output=report.path,
                device=attrs.device,
                backend=attrs.backend,
                rtol=attrs.rtol,
                atol=attrs.atol,
                min_cosine=attrs.min_cosine,
            ),
        )
        # The package and eager's goldens, not the model's source. Never in a worker:
        # a package that aborts must fail this check, not a worker.
        run(
            "AotiValidate",
            "validate",
            validate_spec,
            [package, goldens],
            [report],
            2000,
            workers=False,
        )
        outputs.append(report)

    library = aoti_loader.declare_loader_library(
        ctx, package=package, model=model, device=attrs.device, backend=attrs.backend
    )
    python_loader = aoti_loader.declare_python_loader(
        ctx, package=package, model=model, device=attrs.device, backend=attrs.backend
    )
    return [DefaultInfo((*outputs, *library, python_loader))]


def _gpu_properties(ctx: RuleContext[AotiPackageAttrs]) -> dict[str, str]:
    """The build GPU, which a CUDA package's kernels are compiled for: part of the key."""
    gpus = ctx.toolchain(GPUS)
    if not gpus:
        return {}
    return {"gpu_name": gpus[0].name, "compute_capability": gpus[0].compute_capability}


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
    toolchains=(GPUS,),
)
