"""Standalone check of torch 2.13's Windows cross path for an AOTInductor CPU package.

    .venv/bin/python tools/windows/cross_repro.py WIN_TORCH_LIB WORKDIR

WIN_TORCH_LIB is the torch/lib folder of PyPI's torch win_amd64 wheel, unpacked
(tools/windows_toolchain.sh wheel fetches the wheel). Steps, each printed with its
time and result: export models/mlp.py, compile it with
aot_inductor.cross_target_platform = "windows" (x86_64-w64-mingw32-g++), list the
package, build tools/windows/aoti_runner.c with MinGW, run it under wine64 on the
package's DLL and weights blob, compare with eager. docs/windows.md records what it
showed. Kept outside kiln on purpose: it is the reproduction upstream can run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tools/windows/aoti_runner.c"


def step(name: str) -> float:
    print(f"== {name}", flush=True)
    return time.monotonic()


def done(start: float, what: str = "") -> None:
    print(f"   ok ({time.monotonic() - start:.1f} s) {what}", flush=True)


class _Exp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)


def _define_math_constants() -> None:
    """MinGW's <math.h> defines M_PI only with _USE_MATH_DEFINES under -std=c++20
    (__STRICT_ANSI__), and ATen/core/PhiloxRNGEngine.h uses it: add the definition to
    the cross compile's (torch has no setting for extra compiler flags)."""
    from torch._inductor import cpp_builder

    original = cpp_builder._get_os_related_cpp_definitions

    def definitions(cpp_compiler: str) -> list[str]:
        return [*original(cpp_compiler), "_USE_MATH_DEFINES"]

    cpp_builder._get_os_related_cpp_definitions = definitions


def _link_sleef(work: Path) -> None:
    """torch links sleef.lib only when the *host* is Windows (`if _IS_WINDOWS`), so a
    vectorised transcendental (Vectorized<float>::tanh: Sleef_tanhf8_u10) is an undefined
    reference in the cross link: link the wheel's sleef.lib too, and MSVC's /GS symbols
    that it needs (REPRO_GS_STUBS=0 shows the link without them)."""
    from torch._inductor import cpp_builder

    extra = ["sleef"]
    if os.environ.get("REPRO_GS_STUBS", "1") == "1":
        stubs = work / "msvc_gs_stubs.o"
        source = ROOT / "tools/windows/msvc_gs_stubs.c"
        gcc, ar = "x86_64-w64-mingw32-gcc", "x86_64-w64-mingw32-ar"
        subprocess.run([gcc, "-O2", "-c", str(source), "-o", str(stubs)], check=True)
        subprocess.run([ar, "rcs", str(work / "libkiln_msvc_gs.a"), str(stubs)], check=True)
        extra.append("kiln_msvc_gs")

    original = cpp_builder._get_torch_related_args

    def torch_args(include_pytorch: bool, aot_mode: bool) -> tuple[list[str], list[str], list[str]]:
        includes, library_dirs, libraries = original(include_pytorch, aot_mode)
        return includes, [*library_dirs, str(work)], [*libraries, *extra]

    cpp_builder._get_torch_related_args = torch_args


def main(win_lib: Path, work: Path) -> int:  # noqa: PLR0915  (one script, step by step)
    sys.path.insert(0, str(ROOT / "models"))
    import mlp  # the example model
    from safetensors.torch import load_file

    work.mkdir(parents=True, exist_ok=True)
    model = mlp.build().eval()
    model.load_state_dict(load_file(ROOT / "models/mlp.safetensors"))
    # REPRO_TAIL=tanh|exp|gelu ends the model in a vectorised transcendental (Sleef).
    tail = os.environ.get("REPRO_TAIL")
    if tail:
        model.net.append({"tanh": torch.nn.Tanh(), "gelu": torch.nn.GELU(), "exp": _Exp()}[tail])
    x = torch.randn(8, 10, generator=torch.Generator().manual_seed(0))

    t = step("export")
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
    done(t)

    t = step("aoti compile, cross_target_platform=windows")
    configs = {
        "aot_inductor.cross_target_platform": "windows",
        "aot_inductor.precompile_headers": False,
        "aot_inductor.package_constants_on_disk_format": "binary_blob",
        "aot_inductor.package_constants_in_so": False,
        "aot_inductor.aoti_shim_library_path": str(win_lib),
    }
    configs.update(dict(a.split("=", 1) for a in os.environ.get("REPRO_CONFIGS", "").split() if a))
    if os.environ.get("REPRO_MATH_DEFINES", "1") == "1":
        _define_math_constants()
    if os.environ.get("REPRO_LINK_SLEEF", "0") == "1":
        _link_sleef(work)
    package = work / "mlp_windows.pt2"
    # REPRO_ISA=x86-64-v3 pins inductor's vector ISA as kiln does (left alone, inductor
    # probes by compiling and running a program, which a cross compiler's cannot: no
    # vector code at all).
    isa = os.environ.get("REPRO_ISA")
    from kiln.actions.isa_compile import isa_configs, pinned_vec_isa

    configs.update(isa_configs(isa))
    with pinned_vec_isa(isa):
        torch._inductor.aoti_compile_and_package(
            program, package_path=str(package), inductor_configs=configs
        )
    done(t, str(package))

    t = step("package records")
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        for name in names:
            print("  ", name, archive.getinfo(name).file_size)
        dll = next(n for n in names if n.endswith((".dll", ".so")) and "/aotinductor/" in n)
        blob = next(n for n in names if n.endswith("_weights.blob") or n.endswith(".blob"))
        (work / "model.dll").write_bytes(archive.read(dll))
        (work / "weights.blob").write_bytes(archive.read(blob))
    dll_type = subprocess.run(["file", str(work / "model.dll")], check=False, capture_output=True)
    print(dll_type.stdout.decode())
    imports = subprocess.run(
        ["x86_64-w64-mingw32-objdump", "-p", str(work / "model.dll")],
        check=False,
        capture_output=True,
        text=True,
    ).stdout
    print("   DLL imports:", [ln.split()[-1] for ln in imports.splitlines() if "DLL Name" in ln])
    done(t)

    t = step("build the runner with MinGW")
    runner = work / "aoti_runner.exe"
    subprocess.run(
        ["x86_64-w64-mingw32-gcc", "-O2", str(RUNNER), "-o", runner],
        check=True,
    )
    done(t)

    t = step("run under wine64")
    for dll_file in win_lib.glob("*.dll"):
        target = work / dll_file.name
        if not target.exists():
            os.symlink(dll_file, target)
    x.numpy().tofile(work / "input.bin")
    wine = shutil.which("wine64") or "/usr/lib/wine/wine64"
    # KMP_AFFINITY=disabled: torch_cpu.dll's Intel OpenMP (libiomp5md.dll) calls
    # GetNumaNodeProcessorMaskEx while it reads the topology, which Wine 8.0 lacks
    # ("OMP: Error #179 ... System error #120: Call not implemented", exit 3).
    env = {
        **os.environ,
        "WINEDEBUG": "-all",
        "WINEPREFIX": str(work / "wineprefix"),
        "KMP_AFFINITY": os.environ.get("KMP_AFFINITY", "disabled"),
    }
    run = subprocess.run(
        [wine, str(runner), "model.dll", "weights.blob", "input.bin", "output.bin", "8", "10"],
        check=False,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    print("   rc", run.returncode, run.stdout.strip(), run.stderr.strip()[-2000:])
    if run.returncode != 0:
        return 1
    done(t)

    t = step("compare with eager")
    got = torch.from_file(str(work / "output.bin"), size=8 * 4, dtype=torch.float32).view(8, 4)
    want = model(x).detach()
    diff = (got - want).abs().max().item()
    print(f"   max |windows - eager| = {diff:.3g}")
    done(t)
    return 0 if diff < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()))
