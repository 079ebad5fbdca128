"""The toolchain fingerprint an action's key holds, found without importing torch.

Versions come from installed package metadata; GPU facts from nvidia-smi.
A torch upgrade, another Python, or another GPU model then changes the key
of every action that asked for them (and --explain says so).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path


@cache
def _dist_infos() -> dict[str, str]:
    """normalized distribution name -> version, from the *.dist-info folders on sys.path.

    Listing site-packages costs about a millisecond; importlib.metadata about
    thirty, and this runs on every build.
    """
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and "-" in name:
                dist, _, version = name[: -len(".dist-info")].partition("-")
                found.setdefault(dist.lower().replace("-", "_"), version)
    return found


@cache
def package_version(name: str) -> str | None:
    """The installed version of distribution `name` (as pip spells it), or None."""
    return _dist_infos().get(name.lower().replace("-", "_"))


def installed_distributions() -> dict[str, str]:
    """Every installed distribution (normalized name, as package_version spells it) -> version."""
    return dict(_dist_infos())


@cache
def actions_digest() -> str:
    """A digest of kiln's action code: changing how an action works changes its key.

    The templates that actions render (rules/templates/trt_*: the TensorRT loaders,
    rendered by kiln.actions.render_trt_loader) and kiln.cc_templates count as
    action code too.
    """
    kiln = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted((kiln / "actions").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for path in sorted((kiln / "rules" / "templates").glob("trt_*")):
        digest.update(b"templates/" + path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    # The rendering helpers those actions share with the rules.
    digest.update((kiln / "cc_templates.py").read_bytes())
    return digest.hexdigest()[:16]


def python_toolchain(*packages: str) -> dict[str, str]:
    """os, arch, Python, kiln's action code and the versions of `packages` ('-': absent)."""
    props = {
        "os": platform.system().lower(),
        "arch": platform.machine(),
        "python": platform.python_version(),
        "python_impl": sys.implementation.name,
        "kiln_actions": actions_digest(),
    }
    for name in packages:
        props[name] = package_version(name) or "-"
    return props


@cache
def gpu_properties() -> dict[str, str]:
    """Name and compute capability of the first visible GPU ({} without one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    line = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 2:
        return {}
    return {"gpu_name": parts[0], "compute_capability": parts[1]}
