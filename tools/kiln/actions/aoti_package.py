"""AotiPackage: compile an exported program into an AOTInductor .pt2 package.

Backend "tensorrt": torch_tensorrt.dynamo.compile with Input(min, opt, max) ranges,
then torch_tensorrt.save(..., output_format="aot_inductor", retrace=True),
as the Torch-TensorRT AOTInductor guide shows. (Backend "inductor" compiles the
program's structure once and joins the weights after: kiln.actions.aoti_compile and
kiln.actions.aoti_join. Both share the temp-dir and cache pinning below.)

Reproducibility: inductor embeds its cache path in generated sources, and a
warm cache adds comments; the package's top folder is the file's stem. So
each action compiles with a private, emptied cache at a path derived from
what it compiles (held under an flock while in use), and writes a fixed file
name. Identical inputs then give byte-identical packages where torch allows,
whichever tool runs the action and wherever its outputs go (kiln-out/ or
Bazel's bazel-out/<cfg>/bin/): see inductor_cache_dir. Where those
directories are (per user, under kiln's cache): temp_state.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from kiln.action_specs import CompileSpec, PackageSpec
from kiln.actions import spec as action_spec
from kiln.actions import temp_state
from kiln.actions.spec import ActionFailure
from kiln.actions.temp_state import pin_temp_dirs


def inductor_cache_dir(spec: PackageSpec | CompileSpec) -> Path:
    """The private inductor cache of this packaging (or AotiCompile's compile); the
    package's bytes embed its path.

    A fixed path (not the per-run execroot, not $TMPDIR), named after what is
    compiled: the spec without its paths, and the program's bytes. Not after the
    paths: they name the output root (kiln-out/ or bazel-out/<cfg>/bin/), which
    must never reach an artifact (tests/e2e/test_path_independence.py).
    """
    return temp_state.private_cache_dir(_cache_name(spec))


def _cache_name(spec: PackageSpec | CompileSpec) -> str:
    if isinstance(spec, CompileSpec):
        source, paths = spec.structure, {"structure": "", "output": "", "layout": ""}
    else:
        source, paths = spec.program, {"program": "", "output": ""}
    settings = spec.model_copy(update=paths).to_json()
    digest = hashlib.sha256(settings.encode())
    with open(source, "rb") as program:
        digest.update(hashlib.file_digest(program, "sha256").digest())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def private_inductor_cache(spec: PackageSpec | CompileSpec) -> Iterator[Path]:
    with temp_state.private_cache(_cache_name(spec)) as base:
        yield base


def cpu_target_env(cpu_target: str) -> dict[str, str]:
    """Environment selecting the CPU instruction set inductor compiles for."""
    if cpu_target == "native":
        return {}
    capability = {
        "x86-64-v3": "avx2",
        "x86-64-v4": "avx512",
        "x86-64-v2": "default",
        "x86-64": "default",
    }.get(cpu_target, "default")
    return {"TORCHINDUCTOR_CPP_MARCH": cpu_target, "ATEN_CPU_CAPABILITY": capability}


def main(spec: PackageSpec) -> None:
    output = Path(spec.output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    with private_inductor_cache(spec) as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
        os.environ.update(cpu_target_env(spec.cpu_target))
        pin_temp_dirs()
        import torch

        if spec.tensorrt is None:
            raise ActionFailure(
                "AotiPackage builds Torch-TensorRT packages; an AOTInductor package is "
                "AotiCompile (the structure) and AotiJoin (the weights)"
            )
        from kiln.actions import tensorrt_backend

        program = torch.export.load(spec.program)
        tensorrt_backend.package(program, spec, spec.tensorrt, output, cache)


if __name__ == "__main__":
    action_spec.run(main, PackageSpec, sys.argv[1:], quiet=True)
