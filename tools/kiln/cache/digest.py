"""Digests: a content hash and the content's size, as REAPI names a blob.

Text form `<hex hash>/<size>` (`str(digest)`, `Digest.parse`). Two functions:
SHA-256, the Bazel and REAPI default, and BLAKE3, which hashes several times
faster on multi-core machines. Both give 32 bytes, so a hash is always 64
lowercase hex digits; the constructor insists, because the hash also names
files in the caches and must never be able to name anything else.

digest_file streams: one reusable 1 MiB buffer filled with readinto() and
handed to the hasher as a memoryview, so a multi-GB weights file costs no
more memory than a small one and nothing is copied twice. 1 MiB was the
fastest of 256 KiB..4 MiB on the 2-core build machine (SHA-256 about
1.5 GB/s with SHA-NI; see bench/bench_digest.py). BLAKE3 hashes non-empty
regular files through update_mmap with max_threads=AUTO, which lets the Rust
side spread the work over every core (up to 5.8 GB/s there).

The size in a file's digest is the number of bytes hashed, and the file is
stat'ed before and after: a file that changed meanwhile is an error, not a
digest of no version of it.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from io import FileIO
from typing import Protocol

import blake3

from kiln.errors import KilnError

DIGEST_FUNCTIONS = ("sha256", "blake3")

_BUFFER_SIZE = 1 << 20
_HASH = re.compile(r"[0-9a-f]{64}")


class Hasher(Protocol):
    """What hashlib.sha256() and blake3.blake3() have in common."""

    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


@dataclass(frozen=True, slots=True, order=True)
class Digest:
    """A blob's name: its hash (64 lowercase hex digits) and its size in bytes."""

    hash: str
    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.hash, str) or not _HASH.fullmatch(self.hash):
            raise ValueError(f"not a digest hash (64 lowercase hex digits): {self.hash!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"not a digest size (an integer >= 0): {self.size!r}")

    def __str__(self) -> str:
        return f"{self.hash}/{self.size}"

    @staticmethod
    def parse(text: str) -> Digest:
        """`<hash>/<size>` -> Digest; ValueError if it is anything else."""
        hash_, sep, size = text.partition("/")
        if not sep or not size.isascii() or not size.isdigit():
            raise ValueError(f"not a digest (<hash>/<size>): {text!r}")
        return Digest(hash_, int(size))


def new_hasher(function: str) -> Hasher:
    """A fresh hasher for one of DIGEST_FUNCTIONS."""
    if function == "sha256":
        return hashlib.sha256()
    if function == "blake3":
        return blake3.blake3(max_threads=blake3.blake3.AUTO)
    raise KilnError(
        f"unknown digest function {function!r}",
        hint=f"use one of: {', '.join(DIGEST_FUNCTIONS)}",
    )


def digest_bytes(data: bytes, function: str = "sha256") -> Digest:
    hasher = new_hasher(function)
    hasher.update(data)
    return Digest(hasher.hexdigest(), len(data))


def digest_file(path: str | os.PathLike[str], function: str = "sha256") -> Digest:
    """Hash a file without holding it in memory; KilnError if it changed meanwhile."""
    hasher = new_hasher(function)
    with open(path, "rb", buffering=0) as f:
        before = os.fstat(f.fileno())
        # Size 0 also covers procfs-like files, which map as nothing: stream those.
        if function == "blake3" and stat.S_ISREG(before.st_mode) and before.st_size > 0:
            # Maps the file by name: the stat comparison below catches a swap.
            blake3_hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
            blake3_hasher.update_mmap(path)
            hasher, size = blake3_hasher, before.st_size
        else:
            size = _stream(f, hasher)
        after = os.stat(path)
    if stat.S_ISREG(before.st_mode) and _changed(before, after):
        raise KilnError(f"{os.fsdecode(path)}: file changed while it was being hashed")
    return Digest(hasher.hexdigest(), size)


def _stream(f: FileIO, hasher: Hasher) -> int:
    readinto = f.readinto
    buffer = bytearray(_BUFFER_SIZE)
    view = memoryview(buffer)
    size = 0
    while n := readinto(buffer):
        hasher.update(view[:n] if n < _BUFFER_SIZE else buffer)
        size += n
    return size


def _changed(before: os.stat_result, after: os.stat_result) -> bool:
    return (before.st_ino, before.st_dev, before.st_size, before.st_mtime_ns) != (
        after.st_ino,
        after.st_dev,
        after.st_size,
        after.st_mtime_ns,
    )
