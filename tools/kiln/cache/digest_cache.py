"""The file digest cache: an unchanged file costs a stat, not a hash.

A file's digest is remembered with the stat fields that change whenever its
content can have changed: inode, size, mtime_ns and ctime_ns. While all four
match, the remembered digest is returned without reading the file.

On disk it is an append-only log, like ninja's build log:

    # kiln digest log v1 <function>\\n
    <inode>\\t<size>\\t<mtime_ns>\\t<ctime_ns>\\t<hash>\\t<path>\\n
    ...

The path is last, so it may hold tabs (not newlines: such files are never
recorded); paths are absolute, as os.fsencode writes them. The last record
for a path wins. It is only a cache, so loading never fails: a line without
its newline (a write cut short) or otherwise malformed is skipped, a log with
another header (another version, another digest function) is deleted, and a
log holding more than 3x as many records as live paths (and over 1000) is
rewritten with only the live ones, atomically, through `<log>.compact`
(a leftover from a crash is deleted first, as ninja's Recompact does).

Racily clean files: a file modified within the same timestamp tick as the
stat that recorded it would keep its stat fields while its content changes
(git's "racy git" problem). So a file whose mtime is within 2 seconds of now
(or in the future) is hashed every time and never recorded; a later run,
when it has aged, records it.

The same log records which CAS blobs are intact (cas.py), with ctime left
out (`ctime=False`, written as 0): every hard link made or removed and every
access-time update of a blob changes its ctime, not its content; mtime
changes with every write through any of its links. remember() records a
digest the caller knows (a blob it just wrote), verify() answers whether a
file holds a given digest, hashing only when its stamp is unknown. That log
is read when first needed (`lazy`), so a build that never asks costs nothing.

Several kiln processes may append to one log: each batch of records is one
write to a file opened with O_APPEND, under an exclusive flock, so lines from
two writers never interleave. A writer that finds the log ending in a line
cut short (a crash) ends that line first, so its own first record is never
glued onto it. Compaction can drop records another process appended
meanwhile; they are hashed again later.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from kiln.cache.atomic import publish, unlink_quietly
from kiln.cache.digest import Digest, digest_file, new_hasher
from kiln.errors import KilnError
from kiln.file_io import naming

RACY_NS = 2_000_000_000
COMPACT_MIN_LINES = 1000
COMPACT_RATIO = 3
# Buffered records are written once this many are waiting, and on flush().
_FLUSH_EVERY = 512

_RECORD = re.compile(rb"(\d+)\t(\d+)\t(\d+)\t(\d+)\t([0-9a-f]{64})\t(.+)")


@dataclass(frozen=True, slots=True)
class _Stamp:
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @staticmethod
    def of(st: os.stat_result, ctime: bool = True) -> _Stamp:
        return _Stamp(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns if ctime else 0)


def header(function: str) -> bytes:
    return f"# kiln digest log v1 {function}\n".encode()


def encode_record(path: str, stamp: _Stamp, hash_: str) -> bytes:
    fields = f"{stamp.inode}\t{stamp.size}\t{stamp.mtime_ns}\t{stamp.ctime_ns}\t{hash_}\t"
    return fields.encode() + os.fsencode(path) + b"\n"


class FileDigestCache:
    """Digests of files by path, remembered across runs in the log at `path` (None: only
    for the life of this object). `ctime=False` leaves ctime out of the stamps; `lazy`
    reads the log when first needed rather than now."""

    def __init__(
        self, path: Path | None, function: str, *, ctime: bool = True, lazy: bool = False
    ) -> None:
        new_hasher(function)  # an unknown function fails here
        self.path = None if path is None else Path(path)
        self.function = function
        self._ctime = ctime
        self._header = header(function)
        self._records: dict[str, tuple[_Stamp, str]] = {}
        self._pending: list[bytes] = []
        self._lock = threading.Lock()
        self._loaded = False
        if not lazy:
            self._ensure_loaded()

    def digest(self, path: str) -> Digest:
        """The file's digest: remembered while its stat is unchanged, else hashed."""
        path = os.path.abspath(path)
        now = time.time_ns()  # before the stat: see "racily clean" above
        st = os.stat(path)
        known = self._known(path, st)
        if known is not None:
            return known
        return self._hash(path, st, now)

    def digest_and_mode(self, path: str) -> tuple[Digest, bool]:
        """digest(), and whether the file's owner may execute it (a mode change moves the
        ctime, so a remembered digest is never paired with a stale mode)."""
        path = os.path.abspath(path)
        now = time.time_ns()
        st = os.stat(path)
        known = self._known(path, st)
        return (known or self._hash(path, st, now)), bool(st.st_mode & stat.S_IXUSR)

    def verify(self, path: str, digest: Digest) -> bool:
        """Whether the file holds exactly `digest`'s content: by its remembered stamp, else
        hashed (and then remembered). FileNotFoundError if it is absent."""
        path = os.path.abspath(path)
        now = time.time_ns()
        st = os.stat(path)
        if st.st_size != digest.size:
            return False
        known = self._known(path, st)
        if known is not None:
            return known == digest
        try:
            return self._hash(path, st, now) == digest
        except KilnError:  # written to while being hashed
            return False

    def remember(self, path: str, st: os.stat_result, digest: Digest) -> None:
        """Record that the file with this stat holds `digest` (the caller just wrote it);
        not if that stat is racily clean."""
        path = os.path.abspath(path)
        if st.st_size == digest.size:
            self._record(path, st, digest.hash, time.time_ns())

    def _known(self, path: str, st: os.stat_result) -> Digest | None:
        self._ensure_loaded()
        with self._lock:
            known = self._records.get(path)
        if known is not None and known[0] == _Stamp.of(st, self._ctime):
            return Digest(known[1], st.st_size)
        return None

    def _hash(self, path: str, st: os.stat_result, now: int) -> Digest:
        digest = digest_file(path, self.function)
        after = os.stat(path)
        if digest.size == st.st_size and _Stamp.of(after, self._ctime) == _Stamp.of(
            st, self._ctime
        ):
            self._record(path, st, digest.hash, now)  # what was hashed is what was stamped
        return digest

    def _record(self, path: str, st: os.stat_result, hash_: str, now: int) -> None:
        if not (stat.S_ISREG(st.st_mode) and st.st_mtime_ns < now - RACY_NS):
            return  # racily clean: see above
        if "\n" in path:
            return
        stamp = _Stamp.of(st, self._ctime)
        line = encode_record(path, stamp, hash_)
        with self._lock:
            self._records[path] = (stamp, hash_)
            self._pending.append(line)
            if len(self._pending) >= _FLUSH_EVERY:
                self._write_pending()

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if not self._loaded:
                self._load()
                self._loaded = True

    def __len__(self) -> int:
        """How many files have a remembered digest."""
        self._ensure_loaded()
        with self._lock:
            return len(self._records)

    def flush(self) -> None:
        """Append the records not yet written to the log."""
        with self._lock:
            self._write_pending()

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> FileDigestCache:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _write_pending(self) -> None:
        if not self._pending or self.path is None:
            self._pending.clear()
            return
        data = b"".join(self._pending)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            with naming(self.path):
                fcntl.flock(fd, fcntl.LOCK_EX)
                size = os.fstat(fd).st_size
                if size == 0:
                    data = self._header + data
                elif os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
        finally:
            os.close(fd)  # releases the lock
        self._pending.clear()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            data = self.path.read_bytes()
        except OSError:
            return  # absent or unreadable: an empty cache
        if not data.startswith(self._header):
            if not self._header.startswith(data):  # not just a log being created right now
                unlink_quietly(self.path)
            return
        lines = data[len(self._header) :].split(b"\n")
        lines.pop()  # after the last newline: nothing, or a record cut short
        for line in lines:
            match = _RECORD.fullmatch(line)
            if match is None:
                continue
            inode, size, mtime_ns, ctime_ns, hash_, path = match.groups()
            stamp = _Stamp(int(inode), int(size), int(mtime_ns), int(ctime_ns))
            self._records[os.fsdecode(path)] = (stamp, hash_.decode())
        if len(lines) > COMPACT_MIN_LINES and len(lines) > COMPACT_RATIO * len(self._records):
            with contextlib.suppress(OSError):  # still a valid log, only a longer one
                self._compact()

    def _compact(self) -> None:
        assert self.path is not None
        records = [encode_record(p, stamp, h) for p, (stamp, h) in self._records.items()]
        temp = self.path.with_name(self.path.name + ".compact")
        unlink_quietly(temp)  # left by a crash
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return  # another process is compacting it right now
        try:
            try:
                view = memoryview(self._header + b"".join(records))
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            publish(temp, self.path)
        except BaseException:
            unlink_quietly(temp)
            raise
