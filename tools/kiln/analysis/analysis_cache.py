"""The analysis cache: the action graph of the last build, reused while nothing it
depends on changed.

Analysis imports pydantic and the rules and calls every rule; on a no-op
build of a large workspace that is most of the time spent. What analysis
reads: the target graph (the packages' files, by their stamps, and every
label in the closure), kiln's own rule and action code (by stat), the
Python interpreter, the installed versions of the toolchain packages, and
for GPU actions the GPU. All of it goes into one fingerprint; any change
means a fresh analysis.

Only what execution needs is kept: the actions, and the files of each
requested target. Unpickling it needs neither pydantic nor the rules.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kiln import state_file
from kiln.action_graph import Action, File
from kiln.exec.toolchain import gpu_properties, package_version
from kiln.loading.graph import TargetGraph
from kiln.loading.loader import PackageLoader

FORMAT = 1
TOOLCHAIN_PACKAGES = (
    "torch",
    "torch_tensorrt",
    "torch_tensorrt_rtx",
    "tensorrt",
    "tensorrt_rtx",
    "tensorrt_rtx_cu13_libs",
    "safetensors",
)


@dataclass(frozen=True)
class CachedAnalysis:
    requested: dict[str, tuple[File, ...]]  # label -> the files `kiln build` delivers
    actions: list[Action]

    @property
    def producer(self) -> dict[str, Action]:
        return {f.path: a for a in self.actions for f in a.outputs}

    @property
    def uses_gpu(self) -> bool:
        return any(a.resources.gpu for a in self.actions)


def fingerprint(loader: PackageLoader, graph: TargetGraph, labels: list[str], gpu: bool) -> str:
    digest = hashlib.sha256(f"{FORMAT}\0{sys.executable}\0{sys.version}\0".encode())
    digest.update("\0".join(labels).encode() + b"\1")
    for name in sorted(loader.packages):
        digest.update(f"{name}\0".encode())
        for stamp in loader.packages[name].stamps:
            digest.update(f"{stamp.path}:{stamp.mtime_ns}:{stamp.size}:{stamp.inode}\0".encode())
    digest.update("\0".join(sorted(graph.targets)).encode() + b"\1")
    digest.update(_code_stamp().encode())
    for name in TOOLCHAIN_PACKAGES:
        digest.update(f"{name}={package_version(name)}\0".encode())
    # The TensorRT probe can be pointed at a file (tests, CI without a GPU).
    digest.update(os.environ.get("KILN_TRT_PROBE_JSON", "").encode())
    if gpu:
        digest.update(repr(sorted(gpu_properties().items())).encode())
    return digest.hexdigest()


def _code_stamp() -> str:
    """stat data of the code analysis runs: the rules, analysis and the action code."""
    kiln = Path(__file__).resolve().parent.parent
    parts = []
    for folder in ("rules", "rules/templates", "rule_api", "analysis", "actions", "exec"):
        try:
            entries = sorted(os.scandir(kiln / folder), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.is_file():
                st = entry.stat()
                parts.append(f"{folder}/{entry.name}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


class AnalysisCache:
    def __init__(self, path: Path):
        self.path = path

    def load(
        self, loader: PackageLoader, graph: TargetGraph, labels: list[str]
    ) -> CachedAnalysis | None:
        data = state_file.read(self.path, FORMAT)
        if data is None:
            return None
        cached: CachedAnalysis = data["analysis"]
        if data["fingerprint"] != fingerprint(loader, graph, labels, cached.uses_gpu):
            return None
        return cached

    def store(
        self, loader: PackageLoader, graph: TargetGraph, labels: list[str], analysis: CachedAnalysis
    ) -> None:
        state_file.write(
            self.path,
            FORMAT,
            fingerprint=fingerprint(loader, graph, labels, analysis.uses_gpu),
            analysis=analysis,
        )
