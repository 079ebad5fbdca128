"""Size-bounded, least-recently-used garbage collection of the local cache.

Reads the layout that cas.py and action_cache.py write under the cache root
(`cas/<xx>/<hash>[.x]`, `ac/<xx>/<key>`, temps `.tmp.*` in `cas/`, `cas/<xx>/`
and `ac/<xx>/`) and takes `gc.lock` there: an exclusive flock held for the
whole collection, so two collections never run at once, while builds go on
reading and writing the cache.

Size is the sum of the file sizes of every blob and every entry. Above
max_bytes, files go least recently used first (by access time, which kiln
sets when it writes a file or a cache hit uses it: atomic.mark_used), and
within the same second action-cache entries go before blobs, so an entry
rarely outlives the blobs it names. It may: an entry whose blob is gone
is only a miss (ActionCache.lookup checks every blob), never a wrong result.

The actions' temp state that outlives them (`tmp/`: torch's precompiled
headers, the private caches of packaging actions killed midway) counts too,
file by file, and goes after the blobs of the same second: it is made again
when needed. A lock file another process holds is never removed (two
holders of one name would be two locks), and directories left empty go.

Python environments (`python-envs/<digest>/`, kiln.pyenv: 90 to 250 MB each)
count whole: one item of their files' size, last used when a process last took
its `<digest>.in-use` lock (the lock file's mtime). Each process using one holds
that lock shared for its life, and one is removed only under it held
exclusively, taken without waiting: never one in use, nor one being made (its
`<digest>.lock` held). They go after the rest of the same second.

Nothing used after (start - grace_seconds) is removed, and each
file is stat'ed again just before it is unlinked, so the blobs a build is
writing or has just hit are safe until its action-cache entry names them.
Temps older than the grace period were left by a crash and are removed.

expunge() removes the whole cache (`kiln clean --expunge_disk_cache`), under
the same lock, while other kilns may be building with it: each part is first
renamed away (one atomic step), so a build never sees a half-deleted store;
it finds none and makes a new one (atomic.despite_vanishing_directories), or
puts back what it needs from kiln-out/ (exec/execroot.py, exec/executor.py).
The actions' temp state and the Python environments are the exception: what
running actions hold (torch's shared directory, a private cache under its lock,
an environment in use) is left to them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kiln.cache.atomic import is_temp
from kiln.layout import PYTHON_ENV_IN_USE, DiskCache

_NS = 1_000_000_000
_ENTRY, _BLOB, _TEMP, _ENV = 0, 1, 2, 3


@dataclass(frozen=True)
class GcReport:
    bytes_before: int
    bytes_after: int
    blobs_removed: int
    entries_removed: int
    temps_removed: int = 0
    temp_state_removed: int = 0  # files of tmp/
    environments_removed: int = 0  # Python environments, whole


@dataclass(frozen=True, slots=True)
class _Item:
    used_ns: int  # access time: last use
    kind: int
    size: int
    path: str

    def order(self) -> tuple[int, int, int]:
        return (self.used_ns // _NS, self.kind, self.used_ns)


def collect(root: Path, max_bytes: int, *, grace_seconds: float = 300.0) -> GcReport:
    """Remove least recently used blobs and entries until the cache fits max_bytes."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with _gc_lock(DiskCache(root)):
        return _collect(root, max_bytes, time.time_ns() - int(grace_seconds * _NS))


def expunge(cache: DiskCache, digest_functions: Iterable[str]) -> None:
    """Remove the whole cache, safely while others build with it (see above)."""
    if not cache.root.is_dir():
        return
    with _gc_lock(cache):
        for part in cache.expunged(digest_functions):
            if part == cache.gc_lock:
                continue  # held: another collection must wait on this very file
            if part == cache.tmp:
                _expunge_temp_state(part)
            elif part == cache.python_envs:
                _expunge_environments(part)
            else:
                _remove(part)


# Held shared in a directory of the actions' temp state by each process using it
# (actions/temp_state.py: the same name, pinned by a test).
IN_USE_LOCK = ".in-use.lock"


def _expunge_temp_state(tmp: Path) -> None:
    """The actions' temp state but what running actions use: torch's shared directory
    while a process holds its IN_USE_LOCK, and a private cache while its `<name>.lock`
    is held. Deleting them failed another workspace's running compile (issue 20); they
    go at the next expunge or collection."""
    try:
        entries = sorted(os.scandir(tmp), key=lambda e: e.name)
    except FileNotFoundError:
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.name.endswith(".lock"):
            if not _held(entry.path):
                path.unlink(missing_ok=True)
            continue
        in_use = path / IN_USE_LOCK if entry.is_dir(follow_symlinks=False) else None
        if _held(f"{entry.path}.lock") or (in_use is not None and _held(str(in_use))):
            continue
        _remove(path)
    with contextlib.suppress(OSError):  # not empty: something in use stays
        tmp.rmdir()


def _expunge_environments(envs: Path) -> None:
    """Every Python environment but those in use or being made; their lock files too
    where nobody holds them."""
    for path in _environments(envs):
        _remove_environment(str(path), cutoff_ns=None)
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(envs):
            if entry.name.endswith((".lock", PYTHON_ENV_IN_USE)) and not _held(entry.path):
                Path(entry.path).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: something in use stays
        envs.rmdir()


def _environments(envs: Path) -> list[Path]:
    """The environment directories under `envs` (not the locks, nor one being removed)."""
    try:
        entries = list(os.scandir(envs))
    except FileNotFoundError:
        return []
    return [
        Path(e.path)
        for e in entries
        if e.is_dir(follow_symlinks=False) and not e.name.startswith(".") and "." not in e.name
    ]


def _remove_environment(path: str, cutoff_ns: int | None) -> bool:
    """Remove one environment unless a process uses it (its in-use lock is held), it is
    being made (its lock is held) or, with a cutoff, it was used since."""
    in_use = f"{path}{PYTHON_ENV_IN_USE}"
    try:
        fd = os.open(in_use, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # in use
        if _held(f"{path}.lock"):
            return False  # being made
        if cutoff_ns is not None and os.fstat(fd).st_mtime_ns >= cutoff_ns:
            return False  # used since it was scanned
        _remove(Path(path))
        return True
    finally:
        os.close(fd)


def _remove(part: Path) -> None:
    """Rename `part` away (one atomic step: nobody sees it half-deleted), then delete it."""
    doomed = part.with_name(f"{part.name}.expunged-{secrets.token_hex(4)}")
    try:
        os.rename(part, doomed)
    except FileNotFoundError:
        return
    if doomed.is_dir() and not doomed.is_symlink():
        shutil.rmtree(doomed, ignore_errors=True)
    else:
        doomed.unlink(missing_ok=True)


@contextlib.contextmanager
def _gc_lock(cache: DiskCache) -> Iterator[None]:
    fd = os.open(cache.gc_lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _collect(root: Path, max_bytes: int, cutoff_ns: int) -> GcReport:
    items: list[_Item] = []
    layout = DiskCache(root)
    temps_removed = _scan(layout.cas, _BLOB, cutoff_ns, items, shards=True)
    temps_removed += _scan(layout.ac, _ENTRY, cutoff_ns, items, shards=True)
    _scan_temp_state(layout.tmp, items)
    _scan_environments(layout.python_envs, items)
    total = before = sum(item.size for item in items)
    removed = {_ENTRY: 0, _BLOB: 0, _TEMP: 0, _ENV: 0}
    if total > max_bytes:
        items.sort(key=_Item.order)
        for item in items:
            if total <= max_bytes:
                break
            if item.used_ns >= cutoff_ns:
                continue
            if item.kind == _ENV:
                if not _remove_environment(item.path, cutoff_ns):
                    continue
            elif not _unlink_if_unused(item.path, cutoff_ns):
                continue
            total -= item.size
            removed[item.kind] += 1
    _remove_empty_directories(layout.tmp, cutoff_ns)
    return GcReport(
        before,
        total,
        removed[_BLOB],
        removed[_ENTRY],
        temps_removed,
        removed[_TEMP],
        removed[_ENV],
    )


def _scan_environments(envs: Path, items: list[_Item]) -> None:
    """Each Python environment as one item, but those in use: the size of its files (not
    of the toolchain its links point to), last used when its in-use lock was last taken."""
    for path in _environments(envs):
        in_use = f"{path}{PYTHON_ENV_IN_USE}"
        if _held(in_use):
            continue
        try:
            used = os.stat(in_use).st_mtime_ns
        except FileNotFoundError:  # made by no process since: as old as the environment
            try:
                used = os.stat(path).st_mtime_ns
            except FileNotFoundError:
                continue
        items.append(_Item(used, _ENV, _tree_size(path), str(path)))


def _tree_size(path: Path) -> int:
    size = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                size += os.lstat(os.path.join(dirpath, name)).st_size
    return size


def _scan_temp_state(directory: Path, items: list[_Item]) -> None:
    """Every file under the actions' temp state, but lock files that are held."""
    for dirpath, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if name.endswith(".lock") and _held(path):
                continue
            items.append(_Item(st.st_atime_ns, _TEMP, st.st_size, path))


def _held(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases what it took
    return False


def _remove_empty_directories(directory: Path, cutoff_ns: int) -> None:
    for dirpath, _, _ in sorted(os.walk(directory), key=lambda w: -len(w[0])):
        if dirpath == str(directory):
            continue
        with contextlib.suppress(OSError):  # not empty, or gone
            if os.stat(dirpath).st_mtime_ns < cutoff_ns:
                os.rmdir(dirpath)


def _scan(directory: Path, kind: int, cutoff_ns: int, items: list[_Item], shards: bool) -> int:
    """Add directory's files to items (descending one level into shards); remove old temps."""
    temps_removed = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if shards and entry.is_dir(follow_symlinks=False):
                temps_removed += _scan(Path(entry.path), kind, cutoff_ns, items, shards=False)
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed while we looked
        if is_temp(entry.name):
            if st.st_atime_ns < cutoff_ns and _unlink_if_unused(entry.path, cutoff_ns):
                temps_removed += 1
        elif not shards:
            items.append(_Item(st.st_atime_ns, kind, st.st_size, entry.path))
    return temps_removed


def _unlink_if_unused(path: str, cutoff_ns: int) -> bool:
    """Unlink path unless it was used (touched) after cutoff since it was scanned."""
    try:
        if os.stat(path, follow_symlinks=False).st_atime_ns >= cutoff_ns:
            return False
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
