"""Facts about this machine that analysis keys on, found without importing torch.

Installed distributions come from the *.dist-info folders on sys.path (a
millisecond; importlib.metadata takes about thirty, and this runs on every
build); GPUs from nvidia-smi. kiln.rule_api.host turns them into the
HostFacts a build's rules read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache


def normalized(name: str) -> str:
    """A distribution name as kiln compares them: lower case, '-' and '.' as '_'."""
    return name.lower().replace("-", "_").replace(".", "_")


@cache
def distributions() -> tuple[tuple[str, str], ...]:
    """(normalized name, version) of every distribution installed on sys.path, sorted."""
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and "-" in name:
                dist, _, version = name[: -len(".dist-info")].partition("-")
                found.setdefault(normalized(dist), version)
    return tuple(sorted(found.items()))


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str  # "9.0"
    memory_mb: int = 0


@cache
def nvidia_gpus() -> tuple[Gpu, ...]:
    """The GPUs nvidia-smi lists, respecting CUDA_VISIBLE_DEVICES (ids); () without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,name,compute_cap,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    gpus: dict[str, Gpu] = {}
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        memory = parts[3].split()[0] if len(parts) > 3 and parts[3] else "0"
        gpus[parts[0]] = Gpu(parts[1], parts[2], int(memory) if memory.isdigit() else 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return tuple(gpus.values())
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if not ids or ids[0] == "-1":
        return ()
    by_index = [gpus[i] for i in ids if i in gpus]
    # UUIDs (GPU-...) instead of indices: as many GPUs as were named, in order.
    return tuple(by_index or list(gpus.values())[: len(ids)])
