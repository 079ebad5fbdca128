"""The workspace: its root, its packages, and which directories kiln ignores.

The root is the nearest directory at or above the working directory holding a
WORKSPACE file. A package is a directory holding a BUILD file. Hidden
directories, kiln's own output folders and the paths listed in `.kilnignore`
(one workspace-relative path a line, like `.bazelignore`) are never searched.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from kiln.action_graph import GENERATED_ROOT
from kiln.errors import KilnError
from kiln.file_io import read_text
from kiln.loading.package import FileStamp

WORKSPACE_FILES = ("WORKSPACE", "WORKSPACE.bazel")
BUILD_FILES = ("BUILD", "BUILD.bazel")
OUTPUT_DIR = GENERATED_ROOT  # kiln-out: never searched for packages
IGNORE_FILE = ".kilnignore"


@dataclass(frozen=True)
class Workspace:
    root: Path
    ignored: frozenset[str]  # workspace-relative directory paths from .kilnignore

    @staticmethod
    def find(start: Path) -> Workspace:
        start = start.resolve()
        for directory in (start, *start.parents):
            if any((directory / name).is_file() for name in WORKSPACE_FILES):
                return Workspace(directory, _read_ignore_file(directory))
        raise KilnError(
            f"not inside a kiln workspace: no WORKSPACE file in {start} or any parent",
            hint="run kiln from inside a workspace, or create an empty WORKSPACE file at its root",
        )

    def package_of(self, directory: Path) -> str:
        """The working-directory offset as Bazel uses it: cwd relative to the root."""
        rel = directory.resolve().relative_to(self.root)
        return "" if str(rel) == "." else rel.as_posix()

    def path(self, relative: str) -> Path:
        return self.root / relative if relative else self.root

    def build_file(self, package: str) -> str | None:
        """The BUILD file of `package`, relative to the root, or None if it is no package."""
        if self.is_ignored(package):
            return None
        for name in BUILD_FILES:
            rel = f"{package}/{name}" if package else name
            if os.path.isfile(self.path(rel)):
                return rel
        return None

    def is_ignored(self, relative: str) -> bool:
        if not relative:
            return False
        first = relative.split("/", 1)[0]
        if first == OUTPUT_DIR or first.startswith("."):
            return True
        return any(
            relative == ignored or relative.startswith(ignored + "/") for ignored in self.ignored
        )

    def walk_packages(self, prefix: str = "") -> tuple[list[str], list[FileStamp]]:
        """Every package at or below `prefix`, and the stamp of every directory listed.

        The stamps let the graph cache notice a BUILD file appearing or
        disappearing anywhere (a directory's mtime changes when entries do);
        each is taken before its directory is listed.
        """
        packages: list[str] = []
        listed: list[FileStamp] = []
        root = str(self.root)
        stack = [prefix]
        while stack:
            rel = stack.pop()
            if self.is_ignored(rel):
                continue
            directory = f"{root}/{rel}" if rel else root
            now = time.time_ns()
            try:
                st = os.stat(directory)
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                continue
            listed.append(FileStamp.from_stat(rel, st, now))
            names = {entry.name for entry in entries}
            if any(name in names for name in BUILD_FILES):
                packages.append(rel)
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                    stack.append(f"{rel}/{entry.name}" if rel else entry.name)
        packages.sort()
        return packages, listed


def _read_ignore_file(root: Path) -> frozenset[str]:
    try:
        text = read_text(root / IGNORE_FILE)
    except FileNotFoundError:
        return frozenset()
    except OSError as error:
        raise KilnError(f"cannot read {root / IGNORE_FILE}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise KilnError(f"cannot read {root / IGNORE_FILE}: {error}") from None
    lines = (line.strip().strip("/") for line in text.splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))
