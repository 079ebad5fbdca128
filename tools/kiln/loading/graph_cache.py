"""The graph cache: evaluated packages kept between runs, keyed by file stamps.

One pickle file per workspace, in its output base. A cached package is used
only while every stamp it recorded (BUILD file, loaded .bzl files, directories
glob() listed) still matches the disk, and only by the same kiln code: the
file holds the CodeStamp of the loading code and the rule catalogue (every
kiln module they import, kiln.code_digest), checked by stat. The workspace
walk for `//...` is cached the same way, stamped by every directory it listed.

Reading it needs neither starlark nor pydantic, which is what makes a
cached `kiln query //...` fast.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import sys
from pathlib import Path
from typing import TypeGuard

from kiln.code_digest import CodeStamp
from kiln.file_io import naming
from kiln.loading.package import FileStamp, Package, Target

FORMAT = 2
WHAT = "the graph cache"
# The code that shapes a Package: BUILD evaluation and the rule catalogue's schemas,
# and the packages of `@pip` made from a lock.
LOADING_CODE = (
    "kiln.loading.build_file",
    "kiln.loading.pip_repository",
    "kiln.rules.*",
    "kiln.rules.testing.*",
)


class GraphCache:
    def __init__(self, path: Path | None, root: str):
        self.path = path
        self.root = root
        self.packages: dict[str, Package] = {}
        self.walk: tuple[list[str], tuple[FileStamp, ...]] | None = None
        self.dirty = False
        # Each path's stamp now, taken once a run: the walk's directories are also
        # the ones glob() listed, and one .bzl file is stamped by many packages.
        self._now: dict[str, FileStamp] = {}
        if path is not None:
            self._read(path)

    def _read(self, path: Path) -> None:
        # Unpickling makes some 100,000 objects (for 1,000 packages) that live as
        # long as the command: looking for garbage among them, while loading and
        # after, is wasted time (a tenth of a cached `kiln query //...`). Frozen
        # (gc.freeze), they are skipped by every later collection.
        enabled = gc.isenabled()
        gc.disable()
        try:
            with path.open("rb") as f:
                data = pickle.load(f)
        except IsADirectoryError:
            _warn(f"{path} is a directory, not {WHAT}: ignored, and not kept until it is removed")
            return
        except Exception:  # missing, truncated, or written by other code: start afresh
            return
        finally:
            gc.freeze()
            if enabled:
                gc.enable()
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return
        code = data.get("code")
        if not isinstance(code, CodeStamp) or not code.is_current():
            return
        packages, walk = data.get("packages"), data.get("walk")
        if not _valid_packages(packages) or not _valid_walk(walk):
            _discard(path)
            return
        self.packages = packages
        self.walk = walk

    def package(self, name: str) -> Package | None:
        cached = self.packages.get(name)
        if cached is None:
            return None
        if all(self._is_current(stamp) for stamp in cached.stamps):
            return cached
        del self.packages[name]
        self.dirty = True
        return None

    def put(self, package: Package) -> None:
        self.packages[package.name] = package
        self.dirty = True

    def packages_walked(self) -> list[str] | None:
        if self.walk is None:
            return None
        packages, stamps = self.walk
        if all(self._is_current(stamp) for stamp in stamps):
            return packages
        return None

    def _is_current(self, stamp: FileStamp) -> bool:
        now = self._now.get(stamp.path)
        if now is None:
            now = self._now[stamp.path] = FileStamp.of(self.root, stamp.path)
        return now == stamp

    def put_walk(self, packages: list[str], stamps: tuple[FileStamp, ...]) -> None:
        self.walk = (packages, stamps)
        self.dirty = True

    def save(self) -> None:
        if self.path is None or not self.dirty or self.path.is_dir():  # a directory: see _read
            return
        import tempfile  # only here: a run served from the cache never saves it

        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "format": FORMAT,
            "code": CodeStamp.of(LOADING_CODE),
            "packages": self.packages,
            "walk": self.walk,
        }
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".graph-")
        try:
            with naming(self.path), os.fdopen(fd, "wb") as f:
                pickle.dump(data, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.dirty = False


def _valid_packages(packages: object) -> TypeGuard[dict[str, Package]]:
    """A name -> Package dict, each package's stamps and targets of the right types: what
    a run touches before it could notice (some 12,000 checks for 1,000 packages, 1 ms)."""
    return isinstance(packages, dict) and all(
        isinstance(name, str)
        and isinstance(package, Package)
        and isinstance(package.stamps, tuple)
        and all(isinstance(stamp, FileStamp) for stamp in package.stamps)
        and isinstance(package.targets, dict)
        and all(isinstance(target, Target) for target in package.targets.values())
        for name, package in packages.items()
    )


def _valid_walk(walk: object) -> TypeGuard[tuple[list[str], tuple[FileStamp, ...]] | None]:
    return walk is None or (
        isinstance(walk, tuple)
        and len(walk) == 2
        and isinstance(walk[0], list)
        and all(isinstance(stamp, FileStamp) for stamp in walk[1])
    )


# As kiln.state_file warns and discards, for the one state file below it in the layers.
def _discard(path: Path) -> None:
    _warn(f"{path} does not hold {WHAT} in the shape this kiln writes: discarded")
    with contextlib.suppress(OSError):
        os.unlink(path)


def _warn(message: str) -> None:
    sys.stderr.write(f"WARNING: {message}\n")
