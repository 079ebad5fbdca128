"""AotiValidate for Windows: the package run under wine64, against eager's goldens.

    <name>_windows_loader/{<c name>.c, <c name>_run.c}  (the generated loader library,
              what a Windows application builds, and its runner: C only, so they meet the
              MinGW-built model and the MSVC-built torch_cpu.dll through C ABIs alone;
              weights bound with AOTInductorModelUpdateConstantsFromBlob)
              -> run.exe, built with MinGW
    <name>.pt2 -> run.exe under wine64 at every shape point TorchExport recorded goldens for
              -> <name>.validation.json, by kiln.actions.validate's measure

The inputs are the Linux validation's (the same seed, the same bytes); a package whose
outputs differ, or that fails to load or run, fails the build as on Linux. Wine runs
in a prefix kept in kiln's cache (made once, in about 5 s) with KMP_AFFINITY=disabled:
Wine 8.0 lacks GetNumaNodeProcessorMaskEx, which torch_cpu's Intel OpenMP calls.
The loader takes one float32 input and gives one float32 output; other signatures
are refused at analysis (rules/aoti/aoti_windows.py).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kiln.action_specs import ValidateSpec, ValidationReport
from kiln.actions import spec as action_spec
from kiln.actions.errors import ActionError
from kiln.actions.temp_state import shared_dir
from kiln.actions.validate import (
    _mismatch,
    _point_check,
    _where,
    compare,
    read_goldens,
    summary_text,
)
from kiln.actions.windows import torch_libs
from kiln.windows_specs import WindowsValidateSpec

WINE_LOADERS = ("wine64", "/usr/lib/wine/wine64")
INSTALL = "tools/windows_toolchain.sh install (Debian: g++-mingw-w64-x86-64-posix, wine64)"
# A Wine prefix is made on first use (seconds); a run of a small model takes about 1 s.
RUN_TIMEOUT_S = 300


def main(spec: WindowsValidateSpec) -> None:
    import torch

    from kiln.actions.model_loading import example_inputs

    wine = _wine()
    libs = torch_libs.lib_dir(spec.windows_torch)
    goldens, tensors = read_goldens(spec.goldens)
    linux = _as_validate_spec(spec)
    with tempfile.TemporaryDirectory(prefix="kiln-wine-") as tmp:
        work = Path(tmp)
        (work / "package.pt2").symlink_to(Path(spec.package).resolve())
        _build_runner(spec, work)
        for dll in libs.glob("*.dll"):
            (work / dll.name).symlink_to(dll)
        results = []
        for golden in goldens.points:
            where = _where(golden)
            (inp,) = example_inputs(spec.signature.inputs, golden.shapes, seed=goldens.input_seed)
            inp.contiguous().numpy().tofile(work / "input.bin")
            _run(wine, work, [str(d) for d in inp.shape], spec, where)
            (ref,) = golden.outputs
            expected = tensors.get_tensor(ref.tensor)
            values = torch.from_file(
                str(work / "output.bin"),
                size=(work / "output.bin").stat().st_size // 4,
                dtype=torch.float32,
            )
            if values.numel() != expected.numel():
                raise ActionError(
                    f"the Windows package gave {values.numel()} output values {where}, eager "
                    f"{expected.numel()}",
                    label=spec.label,
                )
            check = compare(
                ref.path or "output",
                values.view(expected.shape),
                expected,
                rtol=spec.rtol,
                atol=spec.atol,
                min_cosine=spec.min_cosine,
            )
            if not check.ok:
                raise _mismatch(linux, check, f"{where} under Wine", "")
            results.append(_point_check(golden, [check]))
    report = ValidationReport(
        package=Path(spec.package).name,
        rtol=spec.rtol,
        atol=spec.atol,
        min_cosine=spec.min_cosine,
        max_abs_error=max(c.max_abs_error for c in results),
        max_relative_error=max(
            (c.max_relative_error for c in results if c.max_relative_error is not None),
            default=None,
        ),
        checks=tuple(results),
    )
    Path(spec.output).write_text(report.to_json(), encoding="utf-8")
    print(summary_text(report))


def _as_validate_spec(spec: WindowsValidateSpec) -> ValidateSpec:
    return ValidateSpec(
        label=spec.label,
        model=spec.model,
        signature=spec.signature,
        goldens=spec.goldens,
        package=spec.package,
        weights=None,
        output=spec.output,
        device="cpu",
        backend="inductor",
        rtol=spec.rtol,
        atol=spec.atol,
        min_cosine=spec.min_cosine,
    )


def _wine() -> str:
    for name in WINE_LOADERS:
        found = shutil.which(name)
        if found:
            return found
    raise ActionError(
        "wine64 is not installed: a Windows package is validated by running it under Wine",
        hint=f"{INSTALL}; or validate = False on the aoti_package to skip the check",
    )


def _build_runner(spec: WindowsValidateSpec, work: Path) -> None:
    gcc = shutil.which("x86_64-w64-mingw32-gcc")
    if gcc is None:
        raise ActionError(
            "x86_64-w64-mingw32-gcc is not installed: the Windows test program is built with MinGW",
            hint=INSTALL,
        )
    built = subprocess.run(
        [gcc, "-O2", "-Wall", spec.runner_source, spec.loader_source, "-o", str(work / "run.exe")],
        check=False,
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        raise ActionError(f"the loader library does not compile with MinGW: {built.stderr[-2000:]}")


def _run(wine: str, work: Path, shape: list[str], spec: WindowsValidateSpec, where: str) -> None:
    prefix = shared_dir() / "wine-prefix"
    env = {
        **os.environ,
        "WINEPREFIX": str(prefix),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",  # no Mono or Gecko installer dialogs
        "KMP_AFFINITY": "disabled",
    }
    argv = [wine, "run.exe", "package.pt2", "input.bin", "output.bin"]
    prefix.parent.mkdir(parents=True, exist_ok=True)
    # One Wine at a time in the shared prefix: two starting while it is first made fail
    # (exit 53, no message, seen with two validations at once).
    with open(f"{prefix}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _run_locked(argv, shape, work, env, spec, where)


def _run_locked(
    argv: list[str],
    shape: list[str],
    work: Path,
    env: dict[str, str],
    spec: WindowsValidateSpec,
    where: str,
) -> None:
    try:
        ran = subprocess.run(
            [*argv, *shape],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise ActionError(
            f"the Windows package did not finish {where} under Wine in {RUN_TIMEOUT_S} s",
            label=spec.label,
        ) from error
    if ran.returncode != 0:
        # Wine's own lines (its loader, fontconfig without a cache folder) are not the package's.
        said = [
            ln
            for ln in (ran.stderr + ran.stdout).splitlines()
            if not ln.startswith(("wine:", "Fontconfig"))
        ]
        raise ActionError(
            f"the Windows package fails {where} under Wine (exit {ran.returncode}): "
            + ("; ".join(said[-3:]) or "no message"),
            label=spec.label,
        )


if __name__ == "__main__":
    action_spec.run(main, WindowsValidateSpec, sys.argv[1:], quiet=True)
