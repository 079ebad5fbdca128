"""Crash-safe file replacement, shared by every on-disk format of the cache.

A file is written under a temp name in its final directory (`.tmp.<random>`),
fsynced, given its final mode, renamed over its final name with os.replace,
and the directory is fsynced so the rename itself survives a power cut. A
reader therefore sees the old file, the new file, or no file; never a
partial one. On any exception, KeyboardInterrupt included, the temp is
unlinked; a temp left by a killed process is removed by GC once it is older
than GC's grace period (see gc.py), which is why every temp shares one
prefix.

sync=False keeps the rename but skips both fsyncs, for a file whose loss or
emptiness after a power cut is harmless because its reader checks it (an
action-cache entry: see action_cache.py). A SIGKILL cannot tell the
difference: the kernel still has the data.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

from kiln.file_io import naming

TEMP_PREFIX = ".tmp."
# A write into the cache is tried this often while its directories vanish under it.
_ATTEMPTS = 5

T = TypeVar("T")


def despite_vanishing_directories(write: Callable[[], T], source: Path | None = None) -> T:
    """write(), again if it failed because a directory it writes into vanished meanwhile.

    `kiln clean --expunge_disk_cache` renames the store away while other kilns may be
    writing into it: a temp file's directory, or the temp itself, is then gone and
    the rename into place fails with FileNotFoundError. Each attempt makes its
    directories anew. Not retried: a FileNotFoundError because `source` (what is
    being stored) is itself gone.
    """
    for attempt in range(_ATTEMPTS):
        try:
            return write()
        except FileNotFoundError:
            if attempt == _ATTEMPTS - 1 or (source is not None and not os.path.lexists(source)):
                raise
    raise AssertionError("unreachable")


def temp_path(directory: Path) -> Path:
    """A fresh, unused-with-overwhelming-probability temp name in directory."""
    return directory / f"{TEMP_PREFIX}{secrets.token_hex(8)}"


def is_temp(name: str) -> bool:
    return name.startswith(TEMP_PREFIX)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path) -> None:
    """mkdir -p, fsyncing the parent of each directory it creates."""
    if directory.is_dir():
        return
    make_dirs(directory.parent)
    try:
        directory.mkdir()
    except FileExistsError:
        return  # another process made it; it fsyncs the parent
    with contextlib.suppress(FileNotFoundError):  # removed again at once (an expunge)
        fsync_dir(directory.parent)


def publish(temp: Path, dest: Path, *, sync: bool = True) -> None:
    """Rename a finished, fsynced temp over dest and make the rename durable."""
    os.replace(temp, dest)
    if sync:
        fsync_dir(dest.parent)


def unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@contextlib.contextmanager
def atomic_writer(dest: Path, mode: int = 0o444, *, sync: bool = True) -> Iterator[BinaryIO]:
    """Yield a file to write dest's new content into; dest changes only on success."""
    make_dirs(dest.parent)
    fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=dest.parent)
    temp = Path(name)
    try:
        with naming(dest), os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fchmod(f.fileno(), mode)
            if sync:
                os.fsync(f.fileno())
        publish(temp, dest, sync=sync)
    except BaseException:
        unlink_quietly(temp)
        raise


def write_atomic(dest: Path, data: bytes, mode: int = 0o444, *, sync: bool = True) -> None:
    def write() -> None:
        with atomic_writer(dest, mode, sync=sync) as f:
            f.write(data)

    despite_vanishing_directories(write)


def mark_used(path: Path | str) -> None:
    """Set the file's access time to now, its "last use" for GC, and nothing else.

    Not the mtime: blobs are hardlinked into execroots as read-only inputs, and
    the executor tells an action that wrote through one by its changed mtime.
    A missing file is not an error.
    """
    try:
        st = os.stat(path)
        os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
    except (FileNotFoundError, PermissionError):
        pass
