"""The generated C++ loader and runner, compiled and run on the CPU against a stand-in runtime.

Contract tests with a stand-in: standin_include/ declares the part of the TensorRT and
CUDA runtime APIs the loader uses, and standin_runtime.cpp implements it on the host (an
"engine" is a short text naming its tensors; running it doubles the first input). No
TensorRT is involved: this checks the loader's own logic (its shape checks, how it binds
named tensors, the runner's files and exit codes). The real engine runs in
tools/gpu_check.sh.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from kiln.actions.tensorrt.render_loader import render
from trt_manifests import doubler_linux, record

STANDIN = Path(__file__).resolve().parent / "standin_include"
ENGINE = "standin-engine\nin x float32\nout output0 float32\n"


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ on this machine")
    folder = tmp_path_factory.mktemp("double_trt_loader")
    for name, text in render(record(doubler_linux())).items():
        (folder / name).write_text(text)
    binary = folder / "double_trt_run"
    subprocess.run(
        [
            *(gxx, "-std=c++17", "-O0", "-Wall", "-Wextra", "-Werror"),
            *(f"-I{folder}", f"-I{STANDIN}"),
            *(str(folder / "double_trt_trt.cpp"), str(folder / "double_trt_trt_run.cpp")),
            *(str(STANDIN / "standin_runtime.cpp"), "-o", str(binary)),
        ],
        check=True,
        timeout=300,
    )
    return binary


def _run(
    runner: Path, tmp_path: Path, dims: str, *, engine: str = ENGINE, rows: int = 4
) -> tuple[subprocess.CompletedProcess[str], np.ndarray]:
    (tmp_path / "m.engine").write_text(engine)
    x = np.arange(rows * 10, dtype=np.float32).reshape(rows, 10) / 7
    x.tofile(tmp_path / "x.bin")
    run = subprocess.run(
        [
            str(runner),
            str(tmp_path / "m.engine"),
            str(tmp_path / "out_"),
            str(tmp_path / "x.bin"),
            dims,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return run, x


def test_contract_with_standin_runtime_runs_the_engine(runner: Path, tmp_path: Path) -> None:
    """Contract test with a stand-in runtime: inputs bound by name, outputs sized from the
    context's shapes, written to OUT_PREFIX<name>.bin."""
    run, x = _run(runner, tmp_path, "4x10")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "output0 4x10\n"
    out = np.fromfile(tmp_path / "out_output0.bin", dtype=np.float32).reshape(4, 10)
    assert np.array_equal(out, 2 * x)


@pytest.mark.parametrize(
    ("dims", "rows", "code", "message"),
    [
        ("65x10", 65, 2, "DoubleTrt: input 'x' dim 0 is 65, outside [1, 64]"),
        ("4x11", 4, 2, "DoubleTrt: input 'x' dim 1 is 11, outside [10, 10]"),
        ("40", 4, 2, "DoubleTrt: input 'x' has rank 1, expected 2 (shape [40])"),
        ("8x10", 4, 2, "input 'x': "),  # a file of 4 rows for a shape of 8
        ("4x", 4, 1, "bad DIMS '4x': expected sizes such as 4x10"),
    ],
    ids=["batch_past_max", "static_dim", "rank", "file_size", "bad_dims"],
)
def test_contract_with_standin_runtime_refuses_bad_inputs(
    runner: Path, tmp_path: Path, dims: str, rows: int, code: int, message: str
) -> None:
    """Contract test with a stand-in runtime: the shape checks of the manifest's ranges."""
    run, _ = _run(runner, tmp_path, dims, rows=rows)
    assert run.returncode == code, run.stderr
    assert run.stderr.startswith(message), run.stderr
    assert not (tmp_path / "out_output0.bin").exists()


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        (
            "standin-engine\nin input_0 float32\nout output0 float32\n",
            "DoubleTrt: the engine has no input tensor 'x'",
        ),
        (
            "standin-engine\nin x int64\nout output0 float32\n",
            "DoubleTrt: engine tensor 'x' is not float32 as the manifest says",
        ),
        (
            "standin-engine\nin x float32\n",
            "DoubleTrt: the engine has 1 I/O tensors, the manifest 2",
        ),
        ("a Windows engine", "DoubleTrt: TensorRT cannot deserialize"),
    ],
    ids=["names", "dtype", "count", "not_an_engine"],
)
def test_contract_with_standin_runtime_checks_the_engine_against_the_manifest(
    runner: Path, tmp_path: Path, engine: str, message: str
) -> None:
    """Contract test with a stand-in runtime: an engine that is not the manifest's is refused
    when loading, naming what differs."""
    run, _ = _run(runner, tmp_path, "4x10", engine=engine)
    assert run.returncode == 1
    assert message in run.stderr, run.stderr
