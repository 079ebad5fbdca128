"""The Windows torch libraries: PyPI's torch win_amd64 wheel, fetched and its torch/lib
unpacked, by exact version and sha256 (what the action keys hold, never a path).

    <folder>/<sha256>/torch/lib        torch_cpu.dll, .lib, c10, sleef, ...

kiln unpacks them before a sandboxed action that names them (prepare, called by the
executor: exec/sandboxing.py), into the disk cache's torch folder's windows-libs, which
the sandbox shows the action read-only at its torch folder's windows-torch; elsewhere
(--nosandbox, Bazel) the action unpacks them itself (kiln.actions.windows.torch_libs).
A leaf: the executor and the actions both use it, and neither may import the other.

Unpacked into a temp folder and renamed into place, so a half-unpacked folder is
never used, and two unpacking at once both end with the same one. Offline, the wheel
is taken from $KILN_WINDOWS_WHEELHOUSE (tools/windows_toolchain.sh wheel fills one)
before pip is asked.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

WHEELHOUSE_ENV = "KILN_WINDOWS_WHEELHOUSE"
# The libraries' folder as an action sees it, under its torch folder (exec/sandboxing.py:
# the same name), and kiln's own in the disk cache's torch folder, which the sandbox shows
# there read-only: not the folder actions wrote before issue 20, so nothing an action
# unpacked (or changed) is ever taken from it.
WINDOWS_TORCH = "windows-torch"
PREPARED = "windows-libs"
# Set by the executor where kiln prepares the libraries (a sandboxed action).
PREPARED_ENV = "KILN_WINDOWS_TORCH_PREPARED"
# Written last into an unpacked folder: the wheel's version, then every file unpacked.
COMPLETE = ".complete"


class Wheel(Protocol):
    """The wheel by exact version and content (kiln.windows_specs.WindowsTorch)."""

    @property
    def version(self) -> str: ...
    @property
    def wheel(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    def requirement(self) -> str: ...


class Unavailable(Exception):
    """The wheel cannot be had: what failed, and what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def unpack(torch: Wheel, folder: Path, wheelhouses: tuple[str, ...]) -> Path:
    """torch/lib of `torch` in `folder`, fetched (from `wheelhouses` first) and unpacked
    there if it is not yet whole; Unavailable if the wheel cannot be had."""
    root = folder / torch.sha256
    lib = root / "torch" / "lib"
    if complete(root):
        return lib
    wheel = _wheel(torch, folder, wheelhouses)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=folder))
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [n for n in archive.namelist() if n.startswith("torch/lib/")]
            archive.extractall(staging, members)
        files = [n for n in members if not n.endswith("/")]
        (staging / COMPLETE).write_text("\n".join([torch.version, *files]), encoding="utf-8")
        if root.exists():  # not whole: move it aside in one step, then remove it
            with contextlib.suppress(OSError):
                stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=folder))
                root.rename(stale / "lib")
        with contextlib.suppress(OSError):  # another one put it there first
            staging.rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        for stale_dir in folder.glob(".stale-*"):
            shutil.rmtree(stale_dir, ignore_errors=True)
    return lib


def complete(root: Path) -> bool:
    """Whether `root` holds every file its unpacking listed: the disk cache's GC removes
    files one by one, least recently used first (cache/gc.py), so a folder can lose a
    library it once had."""
    try:
        _version, *files = (root / COMPLETE).read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        return False
    return bool(files) and all((root / name).is_file() for name in files)


def prepare(
    torch: Wheel,
    torch_tmp: Path,
    action_env: Mapping[str, str],
    find_links: tuple[str, ...] = (),
) -> None:
    """kiln's side, before a sandboxed action that names `torch` runs: its libraries in
    the disk cache's torch folder `torch_tmp` (PREPARED), from the action's wheelhouse
    ($KILN_WINDOWS_WHEELHOUSE in its --action_env) or --pip_find_links first. One at a
    time per wheel (a lock beside it), so two builds fetch it once."""
    folder = torch_tmp / PREPARED
    folder.mkdir(parents=True, exist_ok=True)
    wheelhouses = wheelhouses_of(action_env)
    lock = os.open(folder / f"{torch.sha256}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        unpack(torch, folder, (*wheelhouses, *find_links))
    finally:
        os.close(lock)


def wheelhouses_of(env: Mapping[str, str]) -> tuple[str, ...]:
    """The folders $KILN_WINDOWS_WHEELHOUSE names in `env` (colon-separated)."""
    return tuple(p for p in env.get(WHEELHOUSE_ENV, "").split(":") if p)


def _wheel(torch: Wheel, cache: Path, wheelhouses: tuple[str, ...]) -> Path:
    """The wheel, checked against its sha256: from the wheelhouses, the cache, or pip."""
    cache.mkdir(parents=True, exist_ok=True)
    places = [Path(p) / torch.wheel for p in wheelhouses]
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
        raise Unavailable(
            f"cannot fetch the Windows torch libraries, torch=={torch.version} win_amd64 "
            f"(sha256 {torch.sha256[:12]}...): {reason}",
            "online, run tools/windows_toolchain.sh wheel DIR once; offline, set "
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
