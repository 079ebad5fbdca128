"""aoti_package: an AOTInductor .pt2 package of a torch_model, validated, with a C++ loader.

    aoti_package(name = "resnet_pt2", model = ":resnet", device = "cpu")

Actions, each cached on its own:

    TorchExport   model source + weights -> <name>.ep.pt2 (canonical: no stack traces)
    AotiPackage   <name>.ep.pt2 -> <name>.pt2          (10-60 s; early cutoff: an edit
                                                        that keeps the graph is a hit)
    AotiValidate  <name>.pt2 vs eager at min/opt/max -> <name>.validation.json
    FileWrite     the C++ loader library (<name>_loader/...)

Backend "tensorrt" compiles with Torch-TensorRT and needs torch_tensorrt.
"""

from __future__ import annotations

from typing import Any, Literal

from kiln.action_graph import File, Resources
from kiln.exec.toolchain import gpu_properties, package_version, python_toolchain
from kiln.rule_api import LabelAttr, Rule, RuleAttrs
from kiln.rule_api.context import RuleContext
from kiln.rule_api.providers import DefaultInfo
from kiln.rules.torch_model import TorchModelInfo
from pydantic import Field

TRT_DISTRIBUTIONS = ("torch_tensorrt", "torch_tensorrt_rtx")


class AotiPackageAttrs(RuleAttrs):
    model: LabelAttr
    device: Literal["cpu", "cuda"] = "cpu"
    backend: Literal["inductor", "tensorrt"] = "inductor"
    cpu_target: Literal["native", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"] = "native"
    inductor_configs: dict[str, Any] = Field(default_factory=dict)
    validate_: bool = Field(default=True, alias="validate")
    rtol: float = Field(default=1e-4, ge=0)
    atol: float = Field(default=1e-4, ge=0)
    # Torch-TensorRT settings (backend = "tensorrt")
    min_block_size: int = Field(default=1, ge=1)
    workspace_size: int = Field(default=0, ge=0)
    optimization_level: int | None = Field(default=None, ge=0, le=5)
    hardware_compatible: bool = False
    version_compatible: bool = False
    use_explicit_typing: bool | None = None
    # Memory the packaging action may take, for the scheduler (MB).
    memory_mb: int = Field(default=4000, ge=0)


def implementation(ctx: RuleContext[AotiPackageAttrs]) -> list[object]:
    attrs = ctx.attrs
    model: TorchModelInfo | None = ctx.dep(attrs.model).get(TorchModelInfo)
    if model is None:
        raise ctx.error(f"attribute 'model' must name a torch_model target, not {attrs.model}")
    if attrs.backend == "tensorrt" and attrs.device != "cuda":
        raise ctx.error("backend = 'tensorrt' needs device = 'cuda'")
    # The standard and the TensorRT-RTX flavours install under different names.
    flavour = next((d for d in TRT_DISTRIBUTIONS if package_version(d)), None)
    if attrs.backend == "tensorrt" and flavour is None:
        raise ctx.error(
            "backend = 'tensorrt' needs torch_tensorrt, which is not installed",
            hint="install kiln's 'trt' extra (torch-tensorrt==2.13.0) on a machine with "
            "TensorRT and a CUDA GPU, or use backend = 'inductor'",
        )
    gpu = 1 if attrs.device == "cuda" else 0
    trt = (flavour,) if attrs.backend == "tensorrt" and flavour else ()
    platform = python_toolchain("torch", *trt)
    platform["device"] = attrs.device
    if gpu:
        platform.update(gpu_properties())
    name = ctx.name

    program = ctx.declare_file(f"{name}.ep.pt2")
    export_spec = ctx.declare_file(f"{name}.export.json")
    ctx.actions.write_json(
        export_spec, {**model.spec(), "device": attrs.device, "output": program.path}
    )
    _python(
        ctx,
        "TorchExport",
        "torch_export",
        export_spec,
        [*model.files],
        [program],
        platform,
        Resources(cpu=1, gpu=gpu, memory_mb=2000),
    )

    package = ctx.declare_file(f"{name}.pt2")
    package_spec = ctx.declare_file(f"{name}.package.json")
    ctx.actions.write_json(
        package_spec,
        (
            {
                "program": program.path,
                "output": package.path,
                "device": attrs.device,
                "backend": attrs.backend,
                "cpu_target": attrs.cpu_target,
                "inductor_configs": attrs.inductor_configs,
                "inputs": [i.model_dump() for i in model.inputs],
                "dynamic_dims": [d.model_dump() for d in model.dynamic_dims],
                "tensorrt": _tensorrt_settings(attrs),
            }
        ),
    )
    _python(
        ctx,
        "AotiPackage",
        "aoti_package",
        package_spec,
        [program],
        [package],
        platform,
        Resources(cpu=1, gpu=gpu, memory_mb=attrs.memory_mb),
    )

    outputs = [package]
    if attrs.validate_:
        report = ctx.declare_file(f"{name}.validation.json")
        validate_spec = ctx.declare_file(f"{name}.validate.json")
        ctx.actions.write_json(
            validate_spec,
            (
                {
                    **model.spec(),
                    "package": package.path,
                    "output": report.path,
                    "device": attrs.device,
                    "backend": attrs.backend,
                    "rtol": attrs.rtol,
                    "atol": attrs.atol,
                }
            ),
        )
        # Never in a worker: a package that aborts must fail this check, not a worker.
        _python(
            ctx,
            "AotiValidate",
            "validate",
            validate_spec,
            [package, *model.files],
            [report],
            platform,
            Resources(cpu=1, gpu=gpu, memory_mb=2000),
            workers=False,
        )
        outputs.append(report)

    from kiln.rules import aoti_loader

    library = aoti_loader.declare_loader_library(
        ctx, package=package, model=model, device=attrs.device, backend=attrs.backend
    )
    return [DefaultInfo(tuple(outputs + library))]


def _python(
    ctx: RuleContext[AotiPackageAttrs],
    mnemonic: str,
    module: str,
    spec: File,
    inputs: list[File],
    outputs: list[File],
    platform: dict[str, str],
    resources: Resources,
    *,
    workers: bool = True,
) -> None:
    ctx.actions.run_python(
        mnemonic=mnemonic,
        module=module,
        spec=spec,
        inputs=inputs,
        outputs=outputs,
        platform=platform,
        resources=resources,
        supports_workers=workers,
    )


def _tensorrt_settings(attrs: AotiPackageAttrs) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "min_block_size": attrs.min_block_size,
        "workspace_size": attrs.workspace_size,
        "hardware_compatible": attrs.hardware_compatible,
        "version_compatible": attrs.version_compatible,
    }
    if attrs.optimization_level is not None:
        settings["optimization_level"] = attrs.optimization_level
    if attrs.use_explicit_typing is not None:
        settings["use_explicit_typing"] = attrs.use_explicit_typing
    return settings


RULE = Rule(
    name="aoti_package",
    attrs=AotiPackageAttrs,
    doc=(
        "Exports `model` with torch.export and packages it with AOTInductor "
        "(or Torch-TensorRT when backend = 'tensorrt'); validates it against eager; "
        "emits a C++ loader library."
    ),
    impl=implementation,
)
