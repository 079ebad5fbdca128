"""A package through its generated C++ loader: compile model_runner.cpp against the loader
library and the toolchain's libtorch, then run batches (model_test, runtime = "cc") or time
calls (model_benchmark) in a child process, so an abort in C++ fails only the check."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch

from kiln.actions.errors import ActionError
from kiln.model_test_specs import ArtifactSpec

__data_files__ = ("actions/model_runner.cpp",)

RUNNER = Path(__file__).with_name("model_runner.cpp")
_DTYPES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int8: "int8",
    torch.bool: "bool",
    torch.uint8: "uint8",
}


def _torch_dir() -> Path:
    return Path(torch.__file__).parent


def compile_runner(artifact: ArtifactSpec, work: Path) -> Path:
    """The model_runner binary for `artifact`, built in `work`."""
    if artifact.cc_header is None or artifact.cc_source is None:
        raise ActionError(f"{artifact.label} has no C++ loader library", label=artifact.label)
    binary = work / "model_runner"
    header = Path(artifact.cc_header)
    torch_dir = _torch_dir()
    command = [
        "g++",
        "-std=c++20",
        "-O2",
        "-D_GLIBCXX_USE_CXX11_ABI=1",
        f'-DMODEL_HEADER="{header.name}"',
        f"-DMODEL_CLASS={artifact.cc_class}",
        "-I",
        str(header.parent),
        "-isystem",
        str(torch_dir / "include"),
        "-isystem",
        str(torch_dir / "include/torch/csrc/api/include"),
        str(RUNNER),
        artifact.cc_source,
        "-o",
        str(binary),
        f"-L{torch_dir / 'lib'}",
        "-ltorch",
        "-ltorch_cpu",
        "-lc10",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ActionError(
            f"cannot compile the C++ loader of {artifact.label}: "
            + (done.stderr.strip().splitlines() or ["g++ failed"])[-1],
            label=artifact.label,
        )
    return binary


def _env() -> dict[str, str]:
    lib = str(_torch_dir() / "lib")
    return {
        **os.environ,
        "LD_LIBRARY_PATH": lib + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""),
    }


def run_cc(
    artifact: ArtifactSpec, binary: Path, batches: list[list[torch.Tensor]], work: Path
) -> list[torch.Tensor]:
    """Each batch's first output, through the C++ loader."""
    lines = []
    for b, batch in enumerate(batches):
        for i, tensor in enumerate(batch):
            path = work / f"in_{b}_{i}.bin"
            path.write_bytes(tensor.contiguous().numpy().tobytes())
            shape = " ".join(str(n) for n in tensor.shape)
            lines.append(f"{b} {i} {_DTYPES[tensor.dtype]} {tensor.dim()} {shape} {path}")
    manifest = work / "manifest.txt"
    manifest.write_text("\n".join(lines) + "\n")
    out = work / "out"
    out.mkdir(exist_ok=True)
    weights = artifact.weights or "-"
    command = [str(binary), "run", artifact.package, weights, str(manifest), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=_env())
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or [f"exited with {done.returncode}"])[-1]
        raise ActionError(f"{artifact.label} (C++ loader) refused the dataset: {message}")
    outputs = []
    for line in (out / "shapes.txt").read_text().splitlines():
        b, rank, *dims = (int(w) for w in line.split())
        assert len(dims) == rank
        data = (out / f"{b}.bin").read_bytes()
        outputs.append(torch.frombuffer(bytearray(data), dtype=torch.float64).reshape(dims))
    return outputs


def bench_cc(
    artifact: ArtifactSpec,
    binary: Path,
    inputs: list[tuple[str, tuple[int, ...]]],
    work: Path,
    *,
    warmup: int,
    repeats: int,
    iterations: int,
) -> list[list[float]]:
    """Per-call latencies (ms) of each repeat, warm-up discarded."""
    shapes = work / "shapes.txt"
    shapes.write_text(
        "".join(f"{dtype} {len(shape)} {' '.join(map(str, shape))}\n" for dtype, shape in inputs)
    )
    weights = artifact.weights or "-"
    command = [
        str(binary),
        "bench",
        artifact.package,
        weights,
        str(shapes),
        str(warmup),
        str(repeats),
        str(iterations),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=_env())
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or [f"exited with {done.returncode}"])[-1]
        raise ActionError(f"{artifact.label} (C++ loader) failed: {message}")
    times: list[list[float]] = [[] for _ in range(repeats)]
    for line in done.stdout.splitlines():
        repeat, ms = line.split()
        times[int(repeat)].append(float(ms))
    return times
