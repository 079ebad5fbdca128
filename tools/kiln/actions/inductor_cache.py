"""The private inductor cache of one packaging, and the CPU target's environment:
what AotiCompile, AotiJoin and AotiPackage share (a module of its own, so that an
action's code digest, which follows imports, holds no other action's code).

Inductor embeds its cache path in generated sources, and a
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
from collections.abc import Iterator
from pathlib import Path

from kiln.action_specs import CompileSpec, PackageSpec
from kiln.actions import temp_state


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
    paths: dict[str, str | None]
    if isinstance(spec, CompileSpec):
        source, paths = spec.structure, {"structure": "", "output": "", "layout": ""}
    else:
        # TrtRefit's paths too: they name the output root as well
        source, paths = spec.program, {"program": "", "output": "", "refit": None}
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
