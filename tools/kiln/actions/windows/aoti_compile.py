"""AotiCompile for Windows: a program's structure into a Windows AOTInductor program.

    <name>.structure.pt2 -> torch 2.13's cross path (aot_inductor.cross_target_platform
    = "windows": x86_64-w64-mingw32-g++, linked against the Windows wheel's torch/lib)
    -> <name>.program.pt2 (a PE DLL stored as <hash>.wrapper.so, its weights blob of
       placeholders) + <name>.layout.json

The same weights split as on Linux (kiln.actions.aoti_compile's SPLIT_CONFIGS, which
the cross path needs anyway: package_constants_in_so must be False there), so AotiJoin
joins the weights unchanged. What the cross path needs besides (docs/windows.md,
each found by tools/windows/cross_repro.py):

- _USE_MATH_DEFINES: ATen's PhiloxRNGEngine.h uses M_PI, which MinGW's <math.h>
  declares only with it under -std=c++20;
- precompile_headers off, as upstream's cross test sets it;
- the vector ISA pinned to cpu_target (inductor would otherwise probe it by running
  a program the cross compiler made: scalar code);
- OpenMP's query functions answered serially (omp_serial.c, linked in): without
  -fopenmp the parallel regions run on one thread, but their bodies still call
  omp_get_thread_num();
- no Sleef: torch_cpu's sleef.lib is MSVC's, whose __m256 calling convention differs
  from GCC's (linked, it gives wrong numbers). A kernel that calls Sleef fails the
  link, and this action names the op and what to do instead.

The constant table is read from the generated wrapper source (this machine cannot load
a DLL), and the disassembly check of kiln.actions.isa_compile reads PE code as well.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from kiln.action_specs import CompileSpec
from kiln.actions import spec as action_spec
from kiln.actions.aoti_compile import METADATA, SPLIT_CONFIGS, THREAD_CONFIGS, compile_key
from kiln.actions.environment import environment
from kiln.actions.errors import ActionError, summary
from kiln.actions.inductor_cache import private_inductor_cache
from kiln.actions.isa_compile import check_package, compile_env, isa_configs, pinned_vec_isa
from kiln.actions.temp_state import pin_temp_dirs
from kiln.actions.windows import constant_table, torch_libs
from kiln.windows_specs import WindowsCompileSpec

__data_files__ = ("actions/windows/omp_serial.c",)
OMP_SERIAL = Path(__file__).with_name("omp_serial.c")
WINDOWS_CONFIGS: dict[str, Any] = {
    "aot_inductor.cross_target_platform": "windows",
    "aot_inductor.precompile_headers": False,
}
_SLEEF = re.compile(r"undefined reference to `Sleef_([a-z0-9]+?)[fd]\d+_u\d+")


def main(spec: WindowsCompileSpec) -> None:
    output = Path(spec.output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    linux = _as_compile_spec(spec)
    with (
        private_inductor_cache(linux) as cache,
        environment(TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), **compile_env(spec.cpu_isa)),
    ):
        pin_temp_dirs()
        libs = torch_libs.lib_dir(spec.windows_torch)
        import torch
        import torch._inductor

        from kiln.actions import constant_layout, weights_split

        structure = weights_split.load_structure(spec.structure, "cpu")
        configs = {
            **THREAD_CONFIGS,
            **dict(spec.inductor_configs),
            **SPLIT_CONFIGS,
            **WINDOWS_CONFIGS,
            "aot_inductor.aoti_shim_library_path": str(libs),
            **isa_configs(spec.cpu_isa),
            METADATA: {
                "kiln.compile_key": compile_key(linux, torch.__version__),
                "kiln.target_platform": "windows_x86_64",
                "kiln.windows_torch": f"{spec.windows_torch.version} {spec.windows_torch.sha256}",
            },
        }
        try:
            with pinned_vec_isa(spec.cpu_isa), _math_defines(), _serial_openmp(cache / "stubs"):
                torch._inductor.aoti_compile_and_package(
                    structure, package_path=str(output), inductor_configs=configs
                )
        except Exception as error:
            raise _compile_error(error, spec) from error
        if spec.cpu_isa is not None:
            check_package(output, spec.cpu_isa)
        table = constant_table.read(output)
        with mock.patch.object(constant_layout, "read_table", lambda archive, device: table):
            layout = constant_layout.layout_of(output, structure, "cpu")
    Path(spec.layout).write_text(layout.to_json(), encoding="utf-8")


def _as_compile_spec(spec: WindowsCompileSpec) -> CompileSpec:
    """The Linux compile's record of the same settings, with the Windows toolchain among
    them: names the private inductor cache and makes the compile key."""
    return CompileSpec(
        structure=spec.structure,
        output=spec.output,
        layout=spec.layout,
        device="cpu",
        cpu_target=spec.cpu_target,
        cpu_isa=spec.cpu_isa,
        inductor_configs={
            **spec.inductor_configs,
            "kiln.windows_torch": spec.windows_torch.model_dump(mode="json"),
        },
    )


@contextlib.contextmanager
def _math_defines() -> Iterator[None]:
    """_USE_MATH_DEFINES in the cross compile's definitions (torch has no setting for
    extra compiler flags)."""
    from torch._inductor import cpp_builder

    original = cpp_builder._get_os_related_cpp_definitions

    def definitions(cpp_compiler: str) -> list[str]:
        return [*original(cpp_compiler), "_USE_MATH_DEFINES"]

    with mock.patch.object(cpp_builder, "_get_os_related_cpp_definitions", definitions):
        yield


@contextlib.contextmanager
def _serial_openmp(folder: Path) -> Iterator[None]:
    """omp_serial.c, compiled into a static library of `folder`, in the cross link."""
    from torch._inductor import cpp_builder

    gcc = shutil.which("x86_64-w64-mingw32-gcc")
    if gcc is None:
        raise ActionError(
            "the MinGW-w64 cross compiler x86_64-w64-mingw32-gcc is not installed",
            hint="tools/windows_toolchain.sh install (Debian: g++-mingw-w64-x86-64-posix)",
        )
    folder.mkdir(parents=True, exist_ok=True)
    obj = folder / "omp_serial.o"
    subprocess.run([gcc, "-O2", "-c", str(OMP_SERIAL), "-o", str(obj)], check=True)
    subprocess.run(
        [f"{gcc[:-3]}ar", "rcs", str(folder / "libkiln_omp_serial.a"), str(obj)], check=True
    )
    original = cpp_builder._get_torch_related_args

    def torch_args(include_pytorch: bool, aot_mode: bool) -> tuple[list[str], list[str], list[str]]:
        includes, library_dirs, libraries = original(include_pytorch, aot_mode)
        return includes, [*library_dirs, str(folder)], [*libraries, "kiln_omp_serial"]

    with mock.patch.object(cpp_builder, "_get_torch_related_args", torch_args):
        yield


def _compile_error(error: Exception, spec: WindowsCompileSpec) -> ActionError:
    text = str(error)
    sleef = _SLEEF.search(text)
    if sleef:
        op = sleef.group(1)
        return ActionError(
            f"the model's '{op}' needs Sleef's vectorised {op} (Sleef_{op}...), which a "
            f"Windows package built with MinGW cannot use: the Windows torch's sleef.lib is "
            f"MSVC's, whose vector calling convention differs (docs/windows.md)",
            hint=f"use cpu_target = 'x86-64' for this target (scalar kernels, MinGW's "
            f"{op}), or build it for linux_x86_64",
            cause=error,
        )
    if "x86_64-w64-mingw32-g++ is not found" in text or "Compiler: x86_64" in text:
        return ActionError(
            "the MinGW-w64 cross compiler x86_64-w64-mingw32-g++ is not installed",
            hint="tools/windows_toolchain.sh install (Debian: g++-mingw-w64-x86-64-posix)",
            cause=error,
        )
    lines = text.splitlines()
    first = next((ln.strip() for ln in lines if "undefined reference" in ln), "") or next(
        (ln.strip() for ln in lines if "error:" in ln), ""
    )
    return ActionError(
        f"AOTInductor's Windows cross compile failed: {summary(error)}"
        + (f" ({first})" if first else ""),
        hint="--verbose_failures shows torch's whole message; docs/windows.md lists what "
        "the cross path lacks",
        cause=error,
    )


if __name__ == "__main__":
    action_spec.run(main, WindowsCompileSpec, sys.argv[1:], quiet=True)
