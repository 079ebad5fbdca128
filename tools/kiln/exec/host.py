"""Facts about this machine the scheduler needs, found without importing torch.

GPUs are named by the ids the scheduler hands out (gpu_pool.py): a GPU's UUID
where nvidia-smi says it, since a UUID means the same GPU to every process
whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER say there; its index as
nvidia-smi numbers it otherwise. Entries of this process's CUDA_VISIBLE_DEVICES
are taken as CUDA takes them (indices, UUIDs or their prefixes, MIG ids; "-1"
or nothing: no GPU) and turned into those ids, so a child never gets an index
that its parent's own CUDA_VISIBLE_DEVICES had renumbered.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

# `nvidia-smi -L`: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0e...)"; MIG lines are indented.
_LISTED = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)\s]+)\))?\s*$")


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class HostGpu:
    """One GPU as `nvidia-smi -L` lists it."""

    index: str  # nvidia-smi's numbering (PCI bus order), which ignores CUDA_VISIBLE_DEVICES
    name: str
    uuid: str = ""  # "GPU-5f0e...": "" where nvidia-smi did not say

    @property
    def id(self) -> str:
        """What an action's CUDA_VISIBLE_DEVICES names it by."""
        return self.uuid or self.index


def host_gpus() -> tuple[HostGpu, ...]:
    """Every GPU nvidia-smi lists (whatever CUDA_VISIBLE_DEVICES says); () without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    found = (_LISTED.match(line) for line in out.stdout.splitlines())
    return tuple(HostGpu(m[1], m[2], m[3] or "") for m in found if m is not None)


def usable_gpu_ids(listed: tuple[HostGpu, ...], visible: str | None) -> tuple[str, ...]:
    """The ids of the GPUs a process whose CUDA_VISIBLE_DEVICES is `visible` (None: unset)
    may use, in that order: each entry as the UUID nvidia-smi gives that GPU, or as
    written where nvidia-smi does not list it (no nvidia-smi; a MIG instance)."""
    if visible is None:
        return tuple(gpu.id for gpu in listed)
    ids: list[str] = []
    for entry in (v.strip() for v in visible.split(",")):
        if not entry or entry == "-1":
            break  # CUDA ignores every entry after one it cannot use
        gpu = _listed_as(listed, entry)
        found = gpu.id if gpu is not None else entry
        if found not in ids:
            ids.append(found)
    return tuple(ids)


def _listed_as(listed: tuple[HostGpu, ...], entry: str) -> HostGpu | None:
    if entry.isdigit():
        return next((g for g in listed if g.index == str(int(entry))), None)
    prefix = entry if entry.startswith(("GPU-", "MIG-")) else f"GPU-{entry}"
    matches = [g for g in listed if g.uuid and g.uuid.startswith(prefix)]
    return matches[0] if len(matches) == 1 else None


def gpu_pool_ids(usable: tuple[str, ...], slots: int) -> tuple[str, ...]:
    """The ids a build with `slots` GPU slots (--gpus) hands out: the first usable ones;
    slots beyond what was detected (--gpus=N where detection is wrong) by CUDA index."""
    return usable[:slots] + tuple(str(i) for i in range(len(usable), slots))


def usable_gpus() -> tuple[str, ...]:
    """The ids of the GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else every
    GPU nvidia-smi lists."""
    return usable_gpu_ids(host_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def gpu_count() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    return len(usable_gpus())


def memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20)
    except (ValueError, OSError, AttributeError):
        return 0
