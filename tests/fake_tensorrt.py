"""A TensorRT wheel's layout with empty libraries: a site folder holding
tensorrt_rtx_libs/libtensorrt_rtx.so.1 (whose package raises if imported) and a
libtorchtrt_runtime.so that needs it, as torch_tensorrt's does. A stand-in: the real
libraries need a GPU and are not installable here (docs/gpu.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def fake_tensorrt(root: Path) -> tuple[Path, Path]:
    """A site folder with tensorrt_rtx_libs/libtensorrt_rtx.so.1, as the TensorRT-RTX wheel
    lays it out, and a libtorchtrt_runtime.so that needs it, as torch_tensorrt's does."""
    site = root / "site"
    libs = site / "tensorrt_rtx_libs"
    libs.mkdir(parents=True)
    (libs / "__init__.py").write_text("raise ImportError('found, never imported')\n")
    source = root / "empty.c"
    source.write_text("int kiln_fake_tensorrt(void) { return 0; }\n")
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libtensorrt_rtx.so.1",
            "-o",
            str(libs / "libtensorrt_rtx.so.1"),
            str(source),
        ],
        check=True,
    )
    # torch_tensorrt's package folder, as installed: importing it would fail, loading its
    # runtime library must not need to.
    runtime = site / "torch_tensorrt/lib/libtorchtrt_runtime.so"
    runtime.parent.mkdir(parents=True)
    (site / "torch_tensorrt/__init__.py").write_text("raise ImportError('found, never imported')\n")
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-o",
            str(runtime),
            str(source),
            f"-L{libs}",
            "-Wl,--no-as-needed",
            "-l:libtensorrt_rtx.so.1",
        ],
        check=True,
    )
    return site, runtime


def run_python(code: str, *args: str, site: Path | None, runtime: Path | None = None) -> str:
    """stdout of `python -c code args` in a fresh process that sees `site` on its path (no
    library path of its own) and $KILN_TORCHTRT_RUNTIME = runtime where given."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "KILN_TORCHTRT_RUNTIME")
    }
    paths = [str(site)] if site is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    if runtime is not None:
        env["KILN_TORCHTRT_RUNTIME"] = str(runtime)
    run = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()
