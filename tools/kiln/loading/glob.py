"""glob() for BUILD files: Bazel's semantics, over one package's directory tree.

`*` matches within one path segment, `**` any number of whole segments, `?`
one character. Directories are not matched, and the search never enters a
subdirectory that is a package of its own (it has a BUILD file).

glob() never leaves the package: a symlink is followed (to a file or a
directory) only when its target lies inside the package directory, and not
when it leads back to a directory above it (the walk would never end). A
link to /usr/include or to / therefore adds nothing. Only regular files
(and dangling links, which then fail as missing inputs) are matched: a FIFO,
socket or device is no source. However symlinks multiply the paths to one
directory, a glob examines at most MAX_ENTRIES directory entries, so it
cannot hang; past that it is an error.

Each directory is stat()ed before it is listed: the stat becomes the
directory's stamp in the graph cache (see package.FileStamp), so an entry
added while the package evaluates is never missed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from kiln.loading.workspace import BUILD_FILES


@lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str]:
    parts: list[str] = []
    segments = pattern.split("/")
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            parts.append("(?:.*/)?" if not last else ".*")
            continue
        regex = ""
        for char in segment:
            if char == "*":
                regex += "[^/]*"
            elif char == "?":
                regex += "[^/]"
            else:
                regex += re.escape(char)
        parts.append(regex + ("" if last else "/"))
    return re.compile("".join(parts) + r"\Z")


def check_pattern(pattern: str) -> str | None:
    """Why `pattern` is not a valid glob pattern, or None."""
    if not pattern:
        return "empty glob pattern"
    if pattern.startswith("/") or pattern.endswith("/"):
        return f"glob pattern '{pattern}' may not start or end with '/'"
    if any(seg in (".", "..") for seg in pattern.split("/")):
        return f"glob pattern '{pattern}' may not contain '.' or '..' segments"
    if any("**" in seg and seg != "**" for seg in pattern.split("/")):
        return f"glob pattern '{pattern}': '**' must be a whole path segment"
    return None


# Far beyond any real package; reached only by a runaway walk (symlinks that
# fan out into the same directories again and again).
MAX_ENTRIES = 1_000_000


class GlobTooLarge(Exception):
    """The walk examined more than MAX_ENTRIES directory entries."""


def glob(
    package_dir: Path,
    include: list[str],
    exclude: list[str],
    ignored: Callable[[str], bool] = lambda directory: False,
) -> tuple[list[str], dict[str, os.stat_result]]:
    """Files under `package_dir` matching `include` and not `exclude`, sorted.

    Directories for which `ignored` (given their path relative to package_dir)
    is true are not entered: kiln-out/ and what .kilnignore lists hold no sources.
    Returns the matches and each directory listed with its stat taken just
    before the listing, paths relative to package_dir. Raises GlobTooLarge.
    """
    files, listed = _list_files(package_dir, ignored)
    inc = [_compile(p) for p in include]
    exc = [_compile(p) for p in exclude]
    matches = [
        path
        for path in files
        if any(r.match(path) for r in inc) and not any(r.match(path) for r in exc)
    ]
    return sorted(matches), listed


def _list_files(
    package_dir: Path, ignored: Callable[[str], bool]
) -> tuple[list[str], dict[str, os.stat_result]]:
    files: list[str] = []
    listed: dict[str, os.stat_result] = {}
    base = str(package_dir)  # plain strings: pathlib would double the cost of a glob
    inside = _Containment(base)
    examined = 0
    # Each directory to list, with the (device, inode) of it and its ancestors.
    stack: list[tuple[str, frozenset[tuple[int, int]]]] = [("", frozenset())]
    while stack:
        rel, above = stack.pop()
        directory = f"{base}/{rel}" if rel else base
        try:
            st = os.stat(directory)
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        identity = (st.st_dev, st.st_ino)
        if identity in above:
            continue  # a symlink back to a directory above: a cycle
        listed[rel] = st  # also for subpackages: a BUILD file vanishing changes our matches
        if rel and any(entry.name in BUILD_FILES for entry in entries):
            continue  # a subpackage: its files are not ours
        examined += len(entries)
        if examined > MAX_ENTRIES:
            raise GlobTooLarge()
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink() and not inside(entry.path):
                continue  # leads out of the package
            if entry.is_dir():
                if not ignored(path):
                    stack.append((path, above | {identity}))
            elif entry.is_file() or _is_dangling(entry):
                files.append(path)
    return files, listed


def _is_dangling(entry: os.DirEntry[str]) -> bool:
    """A symlink to nothing: matched, to fail later as a missing input, as in Bazel."""
    return entry.is_symlink() and not os.path.exists(entry.path)


class _Containment:
    """Whether a symlink's target lies inside the package directory."""

    def __init__(self, package_dir: str):
        self.root = os.path.realpath(package_dir)

    def __call__(self, path: str) -> bool:
        target = os.path.realpath(path)
        return target == self.root or target.startswith(self.root + "/")
