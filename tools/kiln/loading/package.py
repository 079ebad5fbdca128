"""What evaluating one BUILD file yields: a Package of Targets.

These are plain data so a whole package can be pickled into the graph cache
and read back without importing pydantic, starlark or the rules.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

SOURCE_FILE = "source file"
GENERATED_FILE = "generated file"


@dataclass(slots=True)
class Target:
    """A node of the target graph.

    `attrs` holds the attributes as written in the BUILD file, validated, with
    every label made canonical ("//pkg:name"). `deps` lists the labels this
    target depends on, in attribute order. `index` is the target's position in
    its package's evaluation order, which lets loading find its file and line
    again when an error needs them (see locate.py).
    """

    label: str
    kind: str
    attrs: dict[str, Any]
    deps: tuple[str, ...]
    index: int = -1

    def __reduce__(self) -> tuple[type[Target], tuple[Any, ...]]:
        # Pickled as a constructor call: loading the graph cache is twice as fast
        # as with the per-field __setstate__ a slotted dataclass gets.
        return Target, (self.label, self.kind, self.attrs, self.deps, self.index)

    @property
    def is_rule(self) -> bool:
        return self.kind not in (SOURCE_FILE, GENERATED_FILE)

    @property
    def package(self) -> str:
        # "//pkg:name" -> "pkg"; a repository's "@pip//timm:timm" -> "@pip//timm"
        return self.label[: self.label.index(":")].removeprefix("//")

    @property
    def name(self) -> str:
        return self.label[self.label.index(":") + 1 :]


# A change this close to a stamp may leave the stamp as it was: file-system
# clocks tick coarsely (a few ms here; a second on ext3 and HFS+, two on FAT).
# The digest log (kiln.cache.digest_cache) trusts no younger record either.
RACY_NS = 2_000_000_000


@dataclass(frozen=True, slots=True)
class FileStamp:
    """What a file or directory looked like when a package was evaluated.

    Taken before the file is read (or the directory listed), so an edit
    racing with evaluation leaves a stale stamp and the next run evaluates
    again. ctime is what makes it trustworthy: every change of content or
    metadata sets it to the kernel's clock, and no tool sets it back (`cp -p`,
    `tar` and `touch -d` restore mtime, size and inode can stay the same).

    Racily clean: a file whose ctime is within RACY_NS of the moment of the
    stamp can change again within the same clock tick, leaving every field
    as it was. Such a stamp records that moment in `racy_ns`, which no later
    stamp repeats: it vouches for nothing, so the package is evaluated again
    next time, when the file has aged.
    """

    path: str  # relative to the workspace root
    mtime_ns: int
    ctime_ns: int
    size: int
    inode: int
    racy_ns: int = 0  # when it was taken, if the file had just changed; else 0

    @staticmethod
    def of(root: str, path: str) -> FileStamp:
        now = time.time_ns()  # before the stat: a change after it counts as racy
        try:
            st = os.stat(os.path.join(root, path) if path else root)
        except OSError:
            return FileStamp(path, -1, -1, -1, -1)
        return FileStamp.from_stat(path, st, now)

    @staticmethod
    def from_stat(path: str, st: os.stat_result, taken_ns: int) -> FileStamp:
        """The stamp of a stat taken at (or after) `taken_ns`."""
        racy = taken_ns if st.st_ctime_ns > taken_ns - RACY_NS else 0
        return FileStamp(path, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, racy)

    @property
    def is_racy(self) -> bool:
        return self.racy_ns != 0

    def is_current(self, root: str) -> bool:
        return FileStamp.of(root, self.path) == self

    def __reduce__(self) -> tuple[type[FileStamp], tuple[Any, ...]]:
        return FileStamp, (
            self.path,
            self.mtime_ns,
            self.ctime_ns,
            self.size,
            self.inode,
            self.racy_ns,
        )


@dataclass(slots=True)
class Package:
    """The evaluated contents of one BUILD file."""

    name: str  # '' for the root package
    build_file: str  # relative to the workspace root
    targets: dict[str, Target]  # by target name: rules and the files they generate
    default_visibility: list[str] | None = None
    # Files and directories whose change invalidates this package: the BUILD
    # file, every .bzl it loads (transitively), directories glob() listed and
    # the directories where source files were checked for existence.
    stamps: tuple[FileStamp, ...] = ()
    # Same-package source files that targets of this package refer to.
    source_files: tuple[str, ...] = field(default=())
    # Names of the source files this package's targets refer to that were on
    # disk, outside any subpackage, when it was evaluated (their directories
    # are among the stamps): the graph takes them without looking again.
    files: frozenset[str] = frozenset()
    # Files exports_files() names, with the visibility it gives them (see visibility.py).
    exported: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __reduce__(self) -> tuple[type[Package], tuple[Any, ...]]:
        return Package, (
            self.name,
            self.build_file,
            self.targets,
            self.default_visibility,
            self.stamps,
            self.source_files,
            self.files,
            self.exported,
        )
