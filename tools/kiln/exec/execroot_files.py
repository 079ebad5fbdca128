"""Reading an action's results out of its execroot: outputs, their modes, what it printed."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from kiln.action_graph import GENERATED_ROOT, Action


def missing_outputs(root: Path, action: Action) -> list[str]:
    """The declared outputs the action did not create (a directory output must be one)."""
    return [
        f.path
        for f in action.outputs
        if not ((root / f.path).is_dir() if f.directory else (root / f.path).is_file())
    ]


def output_files(root: Path, action: Action) -> list[str]:
    """Every file the action declared: its output files, and all files in its directories."""
    paths: list[str] = []
    for file in action.outputs:
        if not file.directory:
            paths.append(file.path)
            continue
        for dirpath, _, names in os.walk(root / file.path):
            rel = os.path.relpath(dirpath, root)
            paths.extend(f"{rel}/{name}" for name in sorted(names))
    return paths


def seal_output(path: Path, executable: bool) -> None:
    """Give a finished action's file its blob mode, so put_file links it into the CAS.

    A link costs no copy, and removing the execroot then frees no data. Only a
    regular file with a single link is changed: never a symlink's target, nor
    an inode the action linked from elsewhere (a blob among its inputs).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return  # a symlink: put_file copies what it points to
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            os.fchmod(fd, 0o555 if executable else 0o444)
    finally:
        os.close(fd)


def clear_stale(directory: Path, keep: set[str]) -> None:
    """Remove files a previous build left in an output directory."""
    for dirpath, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.relpath(path, directory) not in keep:
                os.unlink(path)


def input_stats(root: Path, inputs: Iterable[str]) -> dict[str, tuple[int, int]]:
    """mtime and size of every input, by path: a source through its symlink, a generated
    input (a hardlink of a CAS blob) itself.

    Inputs are read-only, but not to root, and without the sandbox an action can
    write through one: into a source file of the workspace, or into a blob of
    the cache. So a change is caught afterwards, the action fails naming the
    file, and a generated input's blob is dropped. Not ctime: other execroots
    linking the same blob meanwhile change it.
    """
    stats = {}
    for path in inputs:
        try:
            st = os.stat(root / path)
            stats[path] = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stats[path] = (-1, -1)
    return stats


def modified_inputs(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> list[str]:
    """The inputs whose stat changed between two input_stats(), sorted."""
    return sorted(path for path, stamp in before.items() if after.get(path) != stamp)


def is_generated(path: str) -> bool:
    return path.startswith(GENERATED_ROOT + "/")


_NEARLY_FULL = 64 << 20  # free bytes below which a failed action's disk is reported full
_disk_usage = shutil.disk_usage  # a seam for tests


def full_disk_note(root: Path) -> str:
    """For a failed action: '' or a note that the disk holding its execroot is (nearly)
    full, which an action rarely says clearly (its tool exits 1, perhaps printing nothing)."""
    try:
        free = _disk_usage(root).free
    except OSError:
        return ""
    if free >= _NEARLY_FULL:
        return ""
    return f" (the disk holding its execroot {root} is full: {free // 1024} KiB free)"


def read_text(path: Path, limit: int = 64 * 1024) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        return ""
    text = data[:limit].decode(errors="replace")
    return text + ("\n[... output truncated ...]\n" if len(data) > limit else "")


def in_the_way(workspace_root: Path, path: str) -> str | None:
    """What keeps `path` (under kiln-out/) from being placed: a file where one of its
    directories goes, or a directory where it goes; None if nothing visible."""
    parts = path.split("/")
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i])
        target = workspace_root / prefix
        if os.path.lexists(target) and not target.is_dir():
            return f"{prefix} is a file where a directory goes"
    if (workspace_root / path).is_dir() and not (workspace_root / path).is_symlink():
        return f"{path} is a directory where the output goes"
    return None
