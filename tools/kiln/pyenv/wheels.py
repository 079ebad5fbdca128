"""WheelStore: the wheel files of locked packages, downloaded once, checked against the lock.

    store = WheelStore(output_base / "wheels", sys.executable, find_links=(...))
    wheels = store.wheels(packages)       # [Wheel(package, path)], in the packages' order

A remote node makes an action's environment offline, from wheels the driver sends
it by digest through the remote cache (kiln.remote_exec). `pip install --target`
keeps no wheel, so the driver fetches them with `pip download` and the options
an install uses (`--no-deps --require-hashes --only-binary=:all:`, the same index
or `--pip_find_links` wheelhouses: the wheel this machine would install) into

    <output base>/wheels/
        <sha256>/<wheel file name>      read-only; named by the lock's hash
        .lock                           held while pip downloads (flock)

in the output base, so `kiln clean --expunge` removes them (the environments
made from them are the disk cache's, collected with it). A wheel is placed only once its sha256 is
one the lock pins, and checked again the first time a build uses it: one that
no longer matches (edited in place, half-written by a crash) is removed and
downloaded again. A lock pins a wheel per platform at most; the node's
platform is the driver's (os, arch and Python are in the action's key), so the
wheel pip picks here is the one the node can install.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kiln.action_graph import PythonPackage
from kiln.pyenv import pip
from kiln.pyenv.environment import PythonEnvError, flock

_SHA256 = "sha256:"


@dataclass(frozen=True)
class Wheel:
    package: PythonPackage
    path: Path  # <root>/<sha256>/<file name>: pip needs the wheel's own file name


@dataclass
class WheelStore:
    root: Path
    python: str  # the interpreter whose pip downloads (kiln's own, as for environments)
    find_links: tuple[str, ...] = ()  # --pip_find_links: download offline from these
    report: Callable[[str], None] = lambda text: None
    _checked: set[Path] = field(default_factory=set)  # verified in this build
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wheels(self, packages: Sequence[PythonPackage]) -> list[Wheel]:
        """The wheel of each package, downloaded first where it is not here yet."""
        found = {p: w for p in packages if (w := self._kept(p)) is not None}
        missing = [p for p in packages if p not in found]
        if missing:
            with self._lock:
                self.root.mkdir(parents=True, exist_ok=True)
                with flock(self.root / ".lock"):
                    # Another build (or thread) may have fetched them while this one waited.
                    found.update({p: w for p in missing if (w := self._kept(p)) is not None})
                    missing = [p for p in missing if p not in found]
                    if missing:
                        self._download(missing)
                        found.update({p: self._fetched(p) for p in missing})
        return [found[p] for p in packages]

    def _kept(self, package: PythonPackage) -> Wheel | None:
        """The package's wheel if it is here and (once per build) still matches its hash."""
        for expected in _sha256s(package):
            folder = self.root / expected
            files = list(folder.glob("*.whl")) if folder.is_dir() else []
            if len(files) != 1:
                continue
            path = files[0]
            if path not in self._checked:
                if _sha256(path) != expected:
                    shutil.rmtree(folder, ignore_errors=True)  # damaged: fetched again
                    continue
                self._checked.add(path)
            return Wheel(package, path)
        return None

    def _fetched(self, package: PythonPackage) -> Wheel:
        wheel = self._kept(package)
        if wheel is None:  # pip succeeded, so it saved a wheel of one of the lock's hashes
            raise PythonEnvError(
                f"pip downloaded no wheel of {package.name}=={package.version} "
                "with one of the lock's hashes"
            )
        return wheel

    def _download(self, packages: Sequence[PythonPackage]) -> None:
        shown = ", ".join(f"{p.name} {p.version}" for p in packages)
        where = f" from {', '.join(self.find_links)}" if self.find_links else ""
        count = f"{len(packages)} wheel{'s' if len(packages) != 1 else ''}"
        self.report(f"downloading {count} for the remote executor's nodes{where}: {shown}")
        staging = Path(tempfile.mkdtemp(prefix=".download-", dir=self.root))
        try:
            try:
                pip.download(
                    self.python,
                    packages,
                    staging,
                    find_links=self.find_links,
                    progress=lambda line: self.report(f"  {line}"),
                )
            except pip.PipError as error:
                raise PythonEnvError(
                    "cannot fetch the wheels a remote node installs: " + error.message,
                    hint=error.hint,
                ) from None
            pinned = {h for p in packages for h in _sha256s(p)}
            for path in staging.glob("*.whl"):
                digest = _sha256(path)
                if digest not in pinned:  # pip checks hashes; this holds it if pip did not
                    raise PythonEnvError(
                        f"pip downloaded {path.name}, whose sha256 {digest} the lock "
                        "does not pin: refused"
                    )
                self._place(path, digest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _place(self, path: Path, digest: str) -> None:
        """The checked wheel into <root>/<sha256>/, whole or not at all (a rename)."""
        folder = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=self.root))
        try:
            dest = folder / path.name
            os.replace(path, dest)
            dest.chmod(0o444)
            shutil.rmtree(self.root / digest, ignore_errors=True)  # a damaged one, if any
            os.replace(folder, self.root / digest)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self._checked.add(self.root / digest / path.name)


def _sha256s(package: PythonPackage) -> list[str]:
    return [h[len(_SHA256) :] for h in package.hashes if h.startswith(_SHA256)]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
