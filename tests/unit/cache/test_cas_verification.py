"""A damaged blob is never used (issue 11 A1), and an intact one costs a stat to trust.

kiln-out/ files and execroot inputs are hard links of blobs (one inode), so an
edit of a kiln-out/ file in place, an action writing through an input (root
ignores the read-only mode) or a flipped byte on disk changed the blob itself,
which was then served as a hit: the CAS checked only sizes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kiln.cache import cas as cas_module
from kiln.cache import digest_cache
from kiln.cache.cas import BlobState, ContentStore, DamagedBlob, MissingBlob
from kiln.cache.digest import Digest
from kiln.cache.digest_cache import FileDigestCache


def _store(tmp_path: Path) -> tuple[ContentStore, list[Digest]]:
    stamps = FileDigestCache(tmp_path / "blobs.log", "sha256", ctime=False, lazy=True)
    store = ContentStore(tmp_path / "cache", stamps=stamps)
    damaged: list[Digest] = []
    store.on_damaged = lambda digest, _path: damaged.append(digest)
    return store, damaged


def _write_in_place(path: Path, data: bytes) -> None:
    """What root can do to a 0444 file: write it through whatever link it has."""
    with open(path, "r+b") as f:
        f.write(data)


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files digest_file hashed from now on."""
    seen: list[str] = []
    real = digest_cache.digest_file

    def counting(path: str | os.PathLike[str], function: str = "sha256") -> Digest:
        seen.append(os.fspath(path))
        return real(path, function)

    monkeypatch.setattr(digest_cache, "digest_file", counting)
    return seen


def test_a_byte_flipped_in_a_blob_is_caught_before_it_is_materialized(tmp_path: Path) -> None:
    store, damaged = _store(tmp_path)
    digest = store.put_bytes(b"the right bytes")
    _write_in_place(store.path(digest), b"T")  # same size: has() cannot tell
    assert store.has(digest)
    with pytest.raises(DamagedBlob):
        store.materialize(digest, tmp_path / "out")
    assert damaged == [digest]
    assert not store.path(digest).exists()  # dropped: whoever needs it builds it again
    assert not (tmp_path / "out").exists()


def test_an_edit_of_a_kiln_out_file_in_place_damages_its_blob_and_is_caught(
    tmp_path: Path,
) -> None:
    store, damaged = _store(tmp_path)
    digest = store.put_bytes(b"hello\n")
    output = tmp_path / "kiln-out" / "a.txt"
    store.materialize(digest, output)
    _write_in_place(output, b"j")  # the same inode as the blob
    assert store.check(digest) is BlobState.DAMAGED
    assert damaged == [digest]
    with pytest.raises(MissingBlob):
        store.materialize(digest, tmp_path / "elsewhere")


def test_a_blob_stored_here_is_trusted_by_its_stamp_without_hashing(
    tmp_path: Path, hashes: list[str]
) -> None:
    store, _ = _store(tmp_path)
    digest = store.put_bytes(b"x" * 1000)
    store.materialize(digest, tmp_path / "out")
    assert store.check(digest) is BlobState.INTACT
    assert hashes == []


def test_stamps_outlive_the_store_through_their_log(tmp_path: Path, hashes: list[str]) -> None:
    store, _ = _store(tmp_path)
    digest = store.put_bytes(b"kept")
    store._stamps.flush()
    again, _ = _store(tmp_path)
    assert again.check(digest) is BlobState.INTACT
    assert hashes == []


def test_a_blob_of_unknown_stamp_is_hashed_once_then_trusted(
    tmp_path: Path, hashes: list[str]
) -> None:
    writer = ContentStore(tmp_path / "cache")  # another workspace's kiln: its own stamps
    digest = writer.put_bytes(b"shared")
    store, _ = _store(tmp_path)
    assert store.check(digest) is BlobState.INTACT
    assert store.check(digest) is BlobState.INTACT
    assert hashes == [str(store.path(digest))]


def test_a_sealed_blob_has_an_mtime_no_later_write_can_have(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    before = time.time_ns()
    digest = store.put_bytes(b"sealed")
    mtime = os.stat(store.path(digest)).st_mtime_ns
    assert mtime <= before - digest_cache.RACY_NS  # so its stamp is never racily clean
    _write_in_place(store.path(digest), b"S")
    assert os.stat(store.path(digest)).st_mtime_ns > mtime


def test_put_replaces_a_damaged_blob_instead_of_keeping_it(tmp_path: Path) -> None:
    store, damaged = _store(tmp_path)
    digest = store.put_bytes(b"good")
    _write_in_place(store.path(digest), b"b")
    assert store.put_bytes(b"good") == digest
    assert store.path(digest).read_bytes() == b"good"
    assert damaged == [digest]


def test_an_output_written_after_it_was_hashed_is_stored_as_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process the action left running writes into its output between the hash and the
    link: the store copies what it hashed rather than link the changed file in."""
    store, _ = _store(tmp_path)
    output = tmp_path / "out.txt"
    output.write_bytes(b"as hashed")
    output.chmod(0o444)  # sealed by the executor: linkable
    real = cas_module.digest_file

    def hash_then_write(path: str | os.PathLike[str], function: str = "sha256") -> Digest:
        found = real(path, function)
        if os.fspath(path) == str(output):
            time.sleep(0.01)
            _write_in_place(output, b"AS")
        return found

    monkeypatch.setattr(cas_module, "digest_file", hash_then_write)
    digest = store.put_file(output)
    assert store.intact(digest)
    assert os.stat(store.path(digest)).st_ino != os.stat(output).st_ino


def test_a_missing_blob_is_restored_from_a_file_that_still_holds_it(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    digest = store.put_bytes(b"output")
    kept = tmp_path / "kiln-out" / "o"
    store.materialize(digest, kept)
    store.path(digest).unlink()  # collected, or an expunged shared cache
    assert store.restore(digest, kept)
    assert store.intact(digest)
    kept.chmod(0o644)
    kept.write_bytes(b"edited")
    store.path(digest).unlink()
    assert not store.restore(digest, kept)
