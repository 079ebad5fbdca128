"""The records of Windows cross builds (aoti_package, target_platform = "windows_x86_64").

    rule, at analysis                                 actions
    WindowsCompileSpec(structure, windows_torch, ...)  kiln.actions.windows.aoti_compile
    WindowsValidateSpec(package, goldens, ...)         kiln.actions.windows.validate

`WindowsTorch` names the Windows torch libraries by the wheel's exact version and
sha256: that, never a path of this machine, is what the action keys hold. The
actions fetch the wheel into kiln's cache once (kiln.actions.windows.torch_libs).
Apart from kiln.action_specs so that Linux actions' code digests (and keys) do not
move with these records.
"""

from __future__ import annotations

from pydantic import JsonValue

from kiln.action_specs import CpuTarget, ModelSignature, Record, Spec


class WindowsTorch(Record):
    """PyPI's torch win_amd64 wheel, by exact version and content."""

    version: str  # "2.13.0"
    wheel: str  # the wheel's file name
    sha256: str

    def requirement(self) -> str:
        """pip's requirements line: the wheel by version and hash, nothing else."""
        return f"torch=={self.version} --hash=sha256:{self.sha256}\n"


class WindowsCompileSpec(Spec):
    """AotiCompile for Windows: the structure compiled by MinGW against the Windows torch
    libraries into a program whose weights are data (the same split as on Linux)."""

    structure: str
    output: str
    layout: str
    cpu_target: CpuTarget
    cpu_isa: str | None
    inductor_configs: dict[str, JsonValue]
    windows_torch: WindowsTorch


class WindowsValidateSpec(Spec):
    """The package run under wine64 by a MinGW-built test program, against eager's
    goldens at every shape point, with the Linux validation's measure."""

    label: str
    model: str
    signature: ModelSignature
    goldens: str
    package: str
    output: str
    rtol: float
    atol: float
    min_cosine: float
    windows_torch: WindowsTorch
    # The generated loader library's source and its runner's (rules/aoti/templates/windows_*):
    # the test program is built from what a Windows application builds.
    loader_source: str
    runner_source: str
