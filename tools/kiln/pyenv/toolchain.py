"""The toolchain's distributions: what every environment holds besides its locked packages.

The roots are torch (and Torch-TensorRT where installed) and the libraries
kiln's actions import (kiln.action_specs needs pydantic, the loader templates
jinja2, weights safetensors, and numpy, which torch uses when present); the
toolchain is their closure by `Requires-Dist`, markers evaluated, extras left
out. TensorRT's runtime comes split into distributions (`tensorrt_rtx_cu13_libs`,
`..._bindings`) that only its meta package requires, and a Torch-TensorRT
bundle may hold that meta package's folder without its metadata (the
TensorRT-RTX one on the H200: `tensorrt_rtx/`, no .dist-info, so
`import tensorrt_rtx` failed in every environment). So every installed
`tensorrt*` distribution is a root too, and a requirement no distribution
provides is linked as the package folder of that name where one lies in a
site directory ("unlisted" for its version). Read with importlib.metadata from
the interpreter kiln runs in, which is
the interpreter Python actions run with: only when an environment is made or
a lock is resolved, never on a no-op build.
"""

from __future__ import annotations

import functools
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from kiln.pip_lock import TOOLCHAIN_FAMILIES, TOOLCHAIN_ROOTS, normalized

# The roots, and the families of names that are roots too (see above): pip_lock holds
# them, so that loading can tell `@pip//torch` is the toolchain's without this layer.
ROOTS, ROOT_FAMILIES = TOOLCHAIN_ROOTS, TOOLCHAIN_FAMILIES
UNLISTED = "unlisted"  # the version of a package folder without metadata


@dataclass(frozen=True)
class Distribution:
    """One installed distribution of the toolchain, as an environment links it."""

    name: str  # normalized
    version: str
    # Its top-level entries (package folders, modules, .pth files, its .dist-info),
    # absolute: an environment symlinks each.
    entries: tuple[Path, ...]


def site_directories() -> tuple[Path, ...]:
    """Where the toolchain's distributions are installed: purelib, platlib, and every
    other folder on sys.path holding distributions. A .pth file (or PYTHONPATH) may put
    the toolchain's torch there: the GPU image's torch lives in another venv, a
    Torch-TensorRT bundle is unpacked beside it; missing those, an environment would
    lack torch although the interpreter kiln runs with imports it."""
    paths = sysconfig.get_paths()
    found = [Path(paths[key]) for key in ("purelib", "platlib")]
    for entry in sys.path:
        folder = Path(entry)
        if entry and folder.is_dir() and next(folder.glob("*.dist-info"), None) is not None:
            found.append(folder)
    return tuple(dict.fromkeys(found))


@functools.cache
def distributions() -> tuple[Distribution, ...]:
    """The closure of ROOTS among the toolchain's installed distributions, sorted by name."""
    from packaging.requirements import InvalidRequirement, Requirement

    installed = _installed()
    seen: dict[str, metadata.Distribution] = {}
    unlisted: dict[str, Path] = {}
    stack = [n for n in installed if n in ROOTS or n.startswith(ROOT_FAMILIES)]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        dist = seen[name] = installed[name]
        for text in dist.requires or ():
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            dep = normalized(requirement.name)
            if dep in installed:
                if dep not in seen:
                    stack.append(dep)
            elif (folder := _package_folder(dep)) is not None:
                unlisted[dep] = folder
    found = [Distribution(name, dist.version, _entries(dist)) for name, dist in seen.items()]
    found += [Distribution(name, UNLISTED, (folder,)) for name, folder in unlisted.items()]
    return tuple(sorted(found, key=lambda d: d.name))


def _package_folder(name: str) -> Path | None:
    """The importable package `name` (normalized) in a site directory, if one lies there."""
    module = name.replace("-", "_")
    for site in site_directories():
        if (site / module / "__init__.py").is_file():
            return site / module
    return None


def by_name() -> dict[str, Distribution]:
    return {d.name: d for d in distributions()}


def _installed() -> dict[str, metadata.Distribution]:
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=[str(p) for p in site_directories()]):
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalized(name), dist)
    return found


def _entries(dist: metadata.Distribution) -> tuple[Path, ...]:
    """The top-level names a distribution installed into its site directory."""
    base = Path(str(dist.locate_file("")))
    names: list[str] = []
    info = getattr(dist, "_path", None)  # the .dist-info folder (PathDistribution)
    if info is not None:
        names.append(Path(info).name)
    for file in dist.files or _top_level(dist):
        first = Path(file).parts[0] if Path(file).parts else ""
        if first and first not in ("..", "__pycache__"):
            names.append(first)
    entries = []
    for name in dict.fromkeys(names):
        # top_level.txt names modules: `six` may be six.py
        found = next((base / n for n in (name, f"{name}.py") if (base / n).exists()), None)
        if found is not None:
            entries.append(found)
    return tuple(entries)


def _top_level(dist: metadata.Distribution) -> Iterable[str]:
    """Without a RECORD: its top_level.txt, as a last resort."""
    text = dist.read_text("top_level.txt") or ""
    return [line.strip() for line in text.splitlines() if line.strip()]
