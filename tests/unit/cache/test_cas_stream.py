"""ContentStore.put_stream: a download becomes a blob only if it matches its digest."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from kiln.cache.cas import BlobMismatch, ContentStore
from kiln.cache.digest import Digest, digest_bytes

DATA = os.urandom(3 * (1 << 20) + 7)  # more than one 1 MiB buffer, not a multiple of it


@pytest.fixture
def cas(tmp_path: Path) -> ContentStore:
    return ContentStore(tmp_path / "cache")


def _leftovers(cas: ContentStore) -> list[str]:
    return [p.name for p in (cas.root / "cas").rglob("*") if p.is_file()]


def test_matching_content_is_stored(cas: ContentStore) -> None:
    digest = digest_bytes(DATA)
    cas.put_stream(digest, io.BytesIO(DATA).readinto)
    assert cas.has(digest)
    assert cas.verify(digest)
    assert oct(os.stat(cas.path(digest)).st_mode & 0o777) == "0o444"


def test_executable_variant(cas: ContentStore) -> None:
    digest = digest_bytes(b"#!/bin/sh\n")
    cas.put_stream(digest, io.BytesIO(b"#!/bin/sh\n").readinto, executable=True)
    assert cas.has(digest, executable=True)
    assert not cas.has(digest)


def test_empty_blob(cas: ContentStore) -> None:
    digest = digest_bytes(b"")
    cas.put_stream(digest, lambda _buffer: 0)
    assert cas.has(digest)


@pytest.mark.parametrize(
    ("why", "content"),
    [
        ("truncated", DATA[:-1]),
        ("longer", DATA + b"x"),
        ("tampered", DATA[:100] + bytes([DATA[100] ^ 1]) + DATA[101:]),
        ("nothing", b""),
    ],
)
def test_content_that_does_not_match_is_refused_and_not_stored(
    cas: ContentStore, why: str, content: bytes
) -> None:
    digest = digest_bytes(DATA)
    with pytest.raises(BlobMismatch):
        cas.put_stream(digest, io.BytesIO(content).readinto)
    assert not cas.has(digest)
    assert _leftovers(cas) == []


def test_an_endless_source_is_cut_off_after_size_plus_one(cas: ContentStore) -> None:
    read = 0

    def endless(buffer: memoryview) -> int:
        nonlocal read
        buffer[:] = b"\0" * len(buffer)
        read += len(buffer)
        return len(buffer)

    with pytest.raises(BlobMismatch, match="more bytes"):
        cas.put_stream(Digest("0" * 64, 10), endless)
    assert read == 11


def test_an_error_while_reading_leaves_nothing(cas: ContentStore) -> None:
    def failing(buffer: memoryview) -> int:
        raise ConnectionResetError("gone")

    with pytest.raises(ConnectionResetError):
        cas.put_stream(digest_bytes(DATA), failing)
    assert _leftovers(cas) == []
