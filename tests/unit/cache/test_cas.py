"""kiln.cache.cas: storing, finding, delivering and verifying blobs."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from kiln.cache import cas as cas_module
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest, digest_bytes
from kiln.errors import KilnError


@pytest.fixture
def cas(tmp_path: Path) -> ContentStore:
    return ContentStore(tmp_path / "cache")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob(".tmp.*"))


def test_blob_is_stored_under_its_hash_read_only(cas: ContentStore) -> None:
    d = cas.put_bytes(b"hello")
    assert d == digest_bytes(b"hello")
    path = cas.path(d)
    assert path == cas.root / "cas" / d.hash[:2] / d.hash
    assert path.read_bytes() == b"hello"
    assert mode(path) == 0o444
    assert cas.has(d)
    assert not cas.has(d, executable=True)
    assert cas.read_bytes(d) == b"hello"
    assert cas.verify(d)


def test_blake3_store_names_blobs_by_blake3(tmp_path: Path) -> None:
    store = ContentStore(tmp_path, "blake3")
    assert store.put_bytes(b"abc") == digest_bytes(b"abc", "blake3")


def test_unknown_function_is_refused_at_construction(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match="unknown digest function"):
        ContentStore(tmp_path, "md5")


def test_absent_blob(cas: ContentStore) -> None:
    d = digest_bytes(b"never stored")
    assert not cas.has(d)
    assert not cas.verify(d)
    cas.touch(d)  # not an error
    with pytest.raises(KilnError, match=f"blob {d} is not in the local cache"):
        cas.read_bytes(d)
    with pytest.raises(KilnError, match=f"blob {d} is not in the local cache"):
        cas.materialize(d, cas.root / "out")


def test_put_file_of_a_writable_file_copies_it(cas: ContentStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"payload")
    d = cas.put_file(src)
    assert d == digest_bytes(b"payload")
    assert os.stat(cas.path(d)).st_ino != os.stat(src).st_ino
    assert mode(src) == 0o644 & ~_umask()
    assert mode(cas.path(d)) == 0o444
    assert leftovers(cas.root) == []


def test_put_file_of_a_finished_read_only_output_links_it(
    cas: ContentStore, tmp_path: Path
) -> None:
    src = tmp_path / "model.pt2"
    src.write_bytes(b"weights")
    src.chmod(0o444)
    d = cas.put_file(src)
    assert os.stat(cas.path(d)).st_ino == os.stat(src).st_ino
    assert cas.verify(d)


def test_put_file_with_a_trusted_digest_links_without_reading(
    cas: ContentStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "tool"
    src.write_bytes(b"#!/bin/sh\n")
    src.chmod(0o555)
    d = digest_bytes(b"#!/bin/sh\n")
    monkeypatch.setattr(cas_module, "digest_file", _must_not_hash)
    assert cas.put_file(src, d, executable=True) == d
    assert os.stat(cas.path(d, executable=True)).st_ino == os.stat(src).st_ino


def test_executable_variant_is_a_separate_0555_file(cas: ContentStore, tmp_path: Path) -> None:
    d = cas.put_bytes(b"#!/bin/sh\necho hi\n")
    # The executor stores the executable variant from the plain blob itself.
    assert cas.put_file(cas.path(d), d, executable=True) == d
    plain, exe = cas.path(d), cas.path(d, executable=True)
    assert exe.name == d.hash + ".x"
    assert mode(plain) == 0o444
    assert mode(exe) == 0o555
    assert os.stat(plain).st_ino != os.stat(exe).st_ino
    assert cas.has(d, executable=True)
    assert cas.verify(d, executable=True)


def test_put_of_an_existing_blob_leaves_it_and_marks_it_used(
    cas: ContentStore, tmp_path: Path
) -> None:
    d = cas.put_bytes(b"same")
    inode = os.stat(cas.path(d)).st_ino
    os.utime(cas.path(d), ns=(10**9, 10**9))
    src = tmp_path / "src"
    src.write_bytes(b"same")
    assert cas.put_file(src) == d
    assert cas.put_bytes(b"same") == d
    st = os.stat(cas.path(d))
    assert st.st_ino == inode
    assert st.st_atime_ns > 10**9


def test_put_file_with_a_wrong_size_digest_stores_nothing(
    cas: ContentStore, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"four")
    wrong = Digest(digest_bytes(b"four").hash, 5)
    with pytest.raises(KilnError, match="size 4 does not match its digest"):
        cas.put_file(src, wrong)
    assert not cas.has(wrong)
    assert leftovers(cas.root) == []
    src.chmod(0o444)  # the hard-link path checks too
    with pytest.raises(KilnError, match="size 4 does not match its digest"):
        cas.put_file(src, wrong)
    assert leftovers(cas.root) == []


def test_wrong_size_blob_is_not_had_and_a_put_repairs_it(cas: ContentStore) -> None:
    d = cas.put_bytes(b"0123456789")
    path = cas.path(d)
    path.chmod(0o644)
    path.write_bytes(b"01234")
    assert not cas.has(d)
    with pytest.raises(KilnError, match="was damaged: removed it"):
        cas.materialize(d, cas.root / "out")
    assert cas.put_bytes(b"0123456789") == d
    assert cas.has(d)
    assert cas.verify(d)
    assert mode(path) == 0o444


def test_corrupt_blob_of_the_right_size_fails_verify_and_read(cas: ContentStore) -> None:
    d = cas.put_bytes(b"good data")
    path = cas.path(d)
    path.chmod(0o644)
    path.write_bytes(b"evil data")
    assert cas.has(d)  # has() is a stat, not a hash
    assert not cas.verify(d)
    with pytest.raises(KilnError, match="corrupt blob in the local cache"):
        cas.read_bytes(d)


def test_materialize_hard_links_the_blob(cas: ContentStore, tmp_path: Path) -> None:
    d = cas.put_bytes(b"model")
    dest = tmp_path / "kiln-out" / "models" / "m.pt2"
    cas.materialize(d, dest)
    assert os.stat(dest).st_ino == os.stat(cas.path(d)).st_ino
    assert dest.read_bytes() == b"model"
    assert mode(dest) == 0o444
    assert leftovers(tmp_path) == []


def test_materialize_executable_links_the_executable_variant(
    cas: ContentStore, tmp_path: Path
) -> None:
    d = cas.put_bytes(b"#!/bin/sh\n")
    cas.put_file(cas.path(d), d, executable=True)
    dest = tmp_path / "bin" / "tool"
    cas.materialize(d, dest, executable=True)
    assert os.stat(dest).st_ino == os.stat(cas.path(d, executable=True)).st_ino
    assert mode(dest) == 0o555


def test_materialize_replaces_an_existing_file(cas: ContentStore, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.write_bytes(b"stale output from an older build")
    d = cas.put_bytes(b"new")
    cas.materialize(d, dest)
    assert dest.read_bytes() == b"new"
    assert leftovers(tmp_path) == []


def test_materialize_twice_leaves_no_temp_behind(cas: ContentStore, tmp_path: Path) -> None:
    d = cas.put_bytes(b"twice")
    dest = tmp_path / "out"
    cas.materialize(d, dest)
    cas.materialize(d, dest)
    other = tmp_path / "other"
    os.link(cas.path(d), other)
    # rename() between two links of one inode is a no-op; the temp must still go.
    os.link(cas.path(d), tmp_path / "third")
    cas.materialize(d, tmp_path / "third")
    assert dest.read_bytes() == b"twice"
    assert leftovers(tmp_path) == []


def test_materialize_copies_across_filesystems(
    cas: ContentStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = cas.put_bytes(b"far away")

    def exdev(src: object, dst: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", exdev)
    dest = tmp_path / "elsewhere" / "out"
    cas.materialize(d, dest, executable=False)
    assert dest.read_bytes() == b"far away"
    assert os.stat(dest).st_ino != os.stat(cas.path(d)).st_ino
    assert mode(dest) == 0o444
    assert leftovers(tmp_path) == []


def test_failed_materialize_keeps_the_old_dest_and_no_temp(
    cas: ContentStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = cas.put_bytes(b"the whole new content")
    dest = tmp_path / "out"
    dest.write_bytes(b"old")

    def exdev(src: object, dst: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    def half_copy(src: str, dst: str) -> None:
        Path(dst).write_bytes(b"the whole")
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "link", exdev)
    monkeypatch.setattr(shutil, "copyfile", half_copy)
    with pytest.raises(KeyboardInterrupt):
        cas.materialize(d, dest)
    assert dest.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("exception", [OSError(errno.ENOSPC, "No space left"), KeyboardInterrupt()])
def test_write_that_fails_midway_leaves_no_blob_and_no_temp(
    cas: ContentStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exception: BaseException
) -> None:
    src = tmp_path / "src"
    src.write_bytes(os.urandom(3 << 20))
    real_copy_file_range = os.copy_file_range
    calls = 0

    def copy_then_fail(src_fd: int, dst_fd: int, count: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise exception
        return real_copy_file_range(src_fd, dst_fd, 1 << 20)

    monkeypatch.setattr(os, "copy_file_range", copy_then_fail)
    with pytest.raises(type(exception)):
        cas.put_file(src)
    monkeypatch.setattr(os, "copy_file_range", _unsupported)
    monkeypatch.setattr(os, "write", _write_failing_at(2, exception))
    with pytest.raises(type(exception)):
        cas.put_file(src)
    monkeypatch.setattr(os, "write", _write_failing_at(1, exception))
    with pytest.raises(type(exception)):
        cas.put_bytes(b"small")
    assert [p for p in (cas.root / "cas").rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("size", [0, 1, (1 << 20) + 1])
def test_copy_falls_back_to_read_write_where_the_kernel_cannot_copy(
    cas: ContentStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    data = os.urandom(size)
    src = tmp_path / "src"
    src.write_bytes(data)
    monkeypatch.setattr(os, "copy_file_range", _unsupported)
    d = cas.put_file(src)
    assert d == digest_bytes(data)
    assert cas.verify(d)
    monkeypatch.setattr(os, "copy_file_range", _unsupported)
    d2 = digest_bytes(data + b"!")
    src.write_bytes(data + b"!")
    assert cas.put_file(src, d2, executable=True) == d2
    assert cas.verify(d2, executable=True)


def test_procfs_like_file_reporting_size_zero_is_copied_whole(cas: ContentStore) -> None:
    data = Path("/proc/self/status").read_bytes()
    d = cas.put_file(Path("/proc/self/status"))
    assert d.size > 0
    assert cas.read_bytes(d).startswith(data[:5])


def _unsupported(src_fd: int, dst_fd: int, count: int) -> int:
    raise OSError(errno.EXDEV, "Invalid cross-device link")


def _write_failing_at(
    call: int, exception: BaseException
) -> Callable[[int, bytes | memoryview], int]:
    real_write = os.write
    calls = 0

    def write(fd: int, data: bytes | memoryview) -> int:
        nonlocal calls
        calls += 1
        if calls == call:
            raise exception
        return real_write(fd, data)

    return write


def test_fsync_failure_leaves_no_blob(cas: ContentStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(OSError, match="Input/output error"):
        cas.put_bytes(b"never durable")
    assert not cas.has(digest_bytes(b"never durable"))
    assert leftovers(cas.root) == []


def test_touch_marks_a_blob_used(cas: ContentStore) -> None:
    d = cas.put_bytes(b"x")
    os.utime(cas.path(d), ns=(10**9, 10**9))
    cas.touch(d)
    assert os.stat(cas.path(d)).st_atime_ns > 10**9
    # Only the access time: hardlinked inputs are checked for writes by their mtime.
    assert os.stat(cas.path(d)).st_mtime_ns == 10**9


def _must_not_hash(*args: object) -> Digest:
    raise AssertionError("hashed a file whose digest was given")


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
