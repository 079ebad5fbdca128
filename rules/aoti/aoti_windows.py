"""aoti_package(target_platform = "windows_x86_64"): an AOTInductor CPU package for Windows,
built on Linux.

    TorchExport      the structure, the weights apart, eager's goldens (as on Linux)
    AotiCompile      structure -> <name>.program.pt2 + layout, by torch's cross path:
                     MinGW-w64, linked against PyPI's Windows torch (the toolchain input
                     WINDOWS_TORCH: version and sha256 in the key, never a path)
                     (kiln.actions.windows.aoti_compile; keyed on the structure)
    AotiJoin         program + weights -> <name>.pt2 (the Linux join, unchanged)
    FileWrite        <name>_windows_loader/: the loader library (C: header, source), a
                     runner and a CMakeLists for MSVC (rules/aoti/templates/windows_*.j2)
    AotiValidate     <name>.pt2 under wine64 against the goldens, run by the runner
                     built with MinGW from the same loader source
                     (kiln.actions.windows.validate)

The structure/weights split holds: a change of weights alone re-runs the export, the
join and the validation, never the compile. docs/windows.md says what the cross path
can and cannot do.
"""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING

from kiln.rule_api import (
    File,
    Provenance,
    RuleContext,
    WindowsCompileSpec,
    WindowsTorch,
    WindowsValidateSpec,
    environment,
)

if TYPE_CHECKING:
    from kiln.rules.aoti.aoti_package import AotiPackageAttrs, _Actions
    from kiln.rules.model.torch_model import TorchModelInfo

# tools/windows/torch_win_amd64.lock pins the same wheel (a test holds them equal).
WINDOWS_TORCH = WindowsTorch(
    version="2.13.0",
    wheel="torch-2.13.0-cp311-cp311-win_amd64.whl",
    sha256="a0d8b11f16a48d60e2015d8213aa0390744cbebb98e58b62b3514dddc656e330",
)


def check_windows(ctx: RuleContext[AotiPackageAttrs], model: TorchModelInfo) -> None:
    """What a Windows package can be, refused at analysis with what is possible instead."""
    attrs = ctx.attrs
    if attrs.device == "cuda" or attrs.backend == "tensorrt":
        raise ctx.error(
            "target_platform = 'windows_x86_64' builds CPU packages only (device = 'cpu', "
            "backend = 'inductor'): PyPI's Windows torch has no CUDA libraries, and "
            "TensorRT's Windows builder is not available here",
            hint="drop device/backend for a Windows CPU package, or use trt_windows_engine "
            "for a TensorRT engine (needs a Windows GPU builder)",
        )
    if attrs.weights == "separate":
        raise ctx.error(
            "weights = 'separate' is not available for target_platform = 'windows_x86_64' "
            "(its loader binds the package's weights blob)",
            hint="use weights = 'packaged'",
        )
    if attrs.cpu_target == "native":
        raise ctx.error(
            "cpu_target = 'native' names this machine's CPU, not a Windows machine's",
            hint="name a level: 'x86-64-v3' (the default), 'x86-64-v4' or 'x86-64'",
        )
    inputs = model.signature.inputs
    if len(inputs) != 1 or inputs[0].dtype != "float32":
        raise ctx.error(
            "the Windows loader takes one float32 input; "
            f"{model.label} takes {len(inputs)}: "
            + ", ".join(f"{i.name} ({i.dtype})" for i in inputs),
            hint="build it for linux_x86_64, or give the model one float32 input",
        )


def compile_and_join(
    ctx: RuleContext[AotiPackageAttrs],
    model: TorchModelInfo,
    actions: _Actions,
    structure: File,
    weights: File,
) -> File:
    """AotiCompile for Windows and the join: the .pt2."""
    attrs = ctx.attrs
    isa = attrs.cpu_target
    return actions.compile_and_join(
        structure,
        weights,
        module="windows.aoti_compile",
        compile_spec=lambda program, layout: WindowsCompileSpec(
            structure=structure.path,
            output=program,
            layout=layout,
            cpu_target=attrs.cpu_target,
            cpu_isa=isa,
            inductor_configs=attrs.inductor_configs,
            windows_torch=WINDOWS_TORCH,
        ),
        form="packaged",
        windows_torch=WINDOWS_TORCH,
        provenance=Provenance(
            target=ctx.label,
            model=model.label,
            device="cpu",
            cpu_target=attrs.cpu_target,
            cpu_isa=isa,
            toolchain={
                "python": ctx.host.python,
                "os": "windows",
                "arch": "x86_64",
                "windows_torch": WINDOWS_TORCH.version,
                "windows_torch_sha256": WINDOWS_TORCH.sha256,
            },
        ),
    )


# template -> the file it renders, {name} being the loader's C name
LOADER_TEMPLATES = {
    "windows_loader.h.j2": "{name}.h",
    "windows_loader.c.j2": "{name}.c",
    "windows_run.c.j2": "{name}_run.c",
    "windows_CMakeLists.txt.j2": "CMakeLists.txt",
}


def declare_loader(
    ctx: RuleContext[AotiPackageAttrs], model: TorchModelInfo, package: File
) -> dict[str, File]:
    """<name>_windows_loader/: the rendered loader library, by template."""
    name = re.sub(r"[^A-Za-z0-9]+", "_", ctx.name).strip("_") or "model"
    name = f"{name}_loader" if not name[0].isdigit() else f"m{name}_loader"
    (shape_range,) = model.signature.ranges()
    files = {
        template: ctx.declare_file(f"{ctx.name}_windows_loader/{out.format(name=name)}")
        for template, out in LOADER_TEMPLATES.items()
    }
    folder = posixpath.dirname(files["windows_run.c.j2"].path)
    values = {
        "name": name,
        "macro": name.upper(),
        "guard": f"{name.upper()}_H",
        "label": ctx.label,
        "package": posixpath.relpath(package.path, folder),
        "torch_version": WINDOWS_TORCH.version,
        "input": shape_range,
    }
    for template, file in files.items():
        ctx.actions.write(file, environment().get_template(template).render(values))
    return files


def validate(
    ctx: RuleContext[AotiPackageAttrs],
    model: TorchModelInfo,
    actions: _Actions,
    package: File,
    goldens: File,
    loader: dict[str, File],
) -> File:
    """AotiValidate under wine64: the report."""
    attrs = ctx.attrs
    report = ctx.declare_file(f"{ctx.name}.validation.json")
    spec = ctx.declare_file(f"{ctx.name}.validate.json")
    ctx.actions.write_spec(
        spec,
        WindowsValidateSpec(
            label=ctx.label,
            model=model.label,
            signature=model.signature,
            goldens=goldens.path,
            package=package.path,
            output=report.path,
            rtol=attrs.rtol,
            atol=attrs.atol,
            min_cosine=attrs.min_cosine,
            windows_torch=WINDOWS_TORCH,
            loader_source=loader["windows_loader.c.j2"].path,
            runner_source=loader["windows_run.c.j2"].path,
        ),
    )
    actions.run(
        "AotiValidate",
        "windows.validate",
        spec,
        [package, goldens, *loader.values()],
        [report],
        2000,
        extra_packages=("safetensors",),
        windows_torch=WINDOWS_TORCH,
    )
    return report
