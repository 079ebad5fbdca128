"""The Windows torch libraries a cross compile links against and Wine runs with.

PyPI's torch win_amd64 wheel, named by the spec's WindowsTorch (exact version and
sha256, which is what the action key holds), is fetched with pip once and unpacked
into kiln's cache (the disk cache's tmp/torch, the shared directory packaging
actions use: kiln.actions.temp_state):

    <shared>/windows-torch/<sha256>/torch/lib        torch_cpu.dll, .lib, c10, sleef, ...

Unpacked into a temp folder and renamed into place, so a half-unpacked folder is
never used, and two actions unpacking at once both end with the same one. Offline,
the wheel is taken from $KILN_WINDOWS_WHEELHOUSE (tools/windows_toolchain.sh wheel
fills one) before pip is asked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from kiln.actions.errors import ActionError
from kiln.actions.temp_state import shared_dir
from kiln.windows_specs import WindowsTorch

WHEELHOUSE_ENV = "KILN_WINDOWS_WHEELHOUSE"
# Bound shared and writable into every sandboxed action (exec/sandboxing.py: the same name).
WINDOWS_TORCH = "windows-torch"


def lib_dir(torch: WindowsTorch) -> Path:
    """torch/lib of the wheel `torch` names, fetched and unpacked once."""
    root = shared_dir() / WINDOWS_TORCH / torch.sha256
    lib = root / "torch" / "lib"
    if (root / ".complete").exists():
        return lib
    wheel = _wheel(torch, root.parent)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root.parent))
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [n for n in archive.namelist() if n.startswith("torch/lib/")]
            archive.extractall(staging, members)
        (staging / ".complete").write_text(torch.version, encoding="utf-8")
        with contextlib.suppress(OSError):  # another action put it there first
            staging.rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return lib


def _wheel(torch: WindowsTorch, cache: Path) -> Path:
    """The wheel, checked against its sha256: from the wheelhouse, the cache, or pip."""
    cache.mkdir(parents=True, exist_ok=True)
    places = [Path(p) / torch.wheel for p in os.environ.get(WHEELHOUSE_ENV, "").split(":") if p]
    for candidate in [*places, cache / torch.wheel]:
        if candidate.is_file() and _sha256(candidate) == torch.sha256:
            return candidate
    lock = cache / f"{torch.sha256}.requirements.txt"
    lock.write_text(torch.requirement(), encoding="utf-8")
    fetched = subprocess.run(
        [_pip_python(), "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--only-binary=:all:", "--platform", "win_amd64", "--python-version",
         "3.11", "--implementation", "cp", "--abi", "cp311", "--require-hashes", "-r",
         str(lock), "-d", str(cache)],
        check=False, capture_output=True, text=True,
    )  # fmt: skip
    wheel = cache / torch.wheel
    if fetched.returncode != 0 or not wheel.is_file():
        reason = (fetched.stderr.strip().splitlines() or ["pip found no such wheel"])[-1]
        raise ActionError(
            f"cannot fetch the Windows torch libraries, torch=={torch.version} win_amd64 "
            f"(sha256 {torch.sha256[:12]}...): {reason}",
            hint="online, run tools/windows_toolchain.sh wheel DIR once; offline, set "
            f"{WHEELHOUSE_ENV}=DIR (--action_env) to a folder holding {torch.wheel}",
        )
    return wheel


def _pip_python() -> str:
    """An interpreter with pip: the action's environment has none (kiln makes it with
    pip from outside), so its base interpreter's."""
    for python in (sys.executable, str(Path(sys.base_prefix) / "bin" / "python3")):
        probe = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return python
    return sys.executable


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
