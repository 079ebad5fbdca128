"""kiln.cache.digest_cache: the file digest log, its recovery and its races."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kiln.cache import digest_cache as digest_cache_module
from kiln.cache.digest import Digest, digest_bytes, digest_file
from kiln.cache.digest_cache import FileDigestCache, encode_record, header

HASH = "0" * 64


def aged(path: Path, seconds: float = 60.0) -> Path:
    """Give path an mtime far enough in the past to be recorded."""
    ns = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(ns, ns))
    return path


def make(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return aged(path)


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths digest_file was called for."""
    calls: list[str] = []
    real = digest_file

    def counting(path: str, function: str = "sha256") -> Digest:
        calls.append(str(path))
        return real(path, function)

    monkeypatch.setattr("kiln.cache.digest_cache.digest_file", counting)
    return calls


def log_lines(log: Path) -> list[bytes]:
    return log.read_bytes().splitlines(keepends=True)


def test_unchanged_file_costs_a_stat(tmp_path: Path, hashed: list[str]) -> None:
    f = make(tmp_path, "weights.bin", b"w" * 1000)
    cache = FileDigestCache(tmp_path / "digests.log", "sha256")
    assert cache.digest(str(f)) == digest_bytes(b"w" * 1000)
    assert cache.digest(str(f)) == digest_bytes(b"w" * 1000)
    assert hashed == [str(f)]


def test_records_survive_reopen(tmp_path: Path, hashed: list[str]) -> None:
    files = [make(tmp_path, f"f{i}", bytes([i]) * i) for i in range(5)]
    log = tmp_path / "digests.log"
    with FileDigestCache(log, "sha256") as cache:
        for f in files:
            cache.digest(str(f))
    assert log_lines(log)[0] == b"# kiln digest log v1 sha256\n"
    assert len(log_lines(log)) == 6
    hashed.clear()
    reopened = FileDigestCache(log, "sha256")
    assert len(reopened) == 5
    for i, f in enumerate(files):
        assert reopened.digest(str(f)) == digest_bytes(bytes([i]) * i)
    assert hashed == []


def test_blake3_log_records_blake3_digests(tmp_path: Path, hashed: list[str]) -> None:
    f = make(tmp_path, "f", b"abc")
    log = tmp_path / "b3.log"
    with FileDigestCache(log, "blake3") as cache:
        assert cache.digest(str(f)) == digest_bytes(b"abc", "blake3")
    assert FileDigestCache(log, "blake3").digest(str(f)) == digest_bytes(b"abc", "blake3")
    assert len(hashed) == 1


def test_relative_and_absolute_paths_share_a_record(
    tmp_path: Path, hashed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = make(tmp_path, "src/a.py", b"x = 1\n")
    cache = FileDigestCache(tmp_path / "digests.log", "sha256")
    cache.digest(str(f))
    monkeypatch.chdir(tmp_path)
    cache.digest("src/a.py")
    assert hashed == [str(f)]


def test_changed_mtime_rehashes(tmp_path: Path, hashed: list[str]) -> None:
    f = make(tmp_path, "f", b"aaaa")
    cache = FileDigestCache(tmp_path / "digests.log", "sha256")
    cache.digest(str(f))
    f.write_bytes(b"bbbb")  # same size
    aged(f, 30)
    assert cache.digest(str(f)) == digest_bytes(b"bbbb")
    assert len(hashed) == 2


def test_changed_size_rehashes_even_with_the_old_mtime(tmp_path: Path, hashed: list[str]) -> None:
    f = make(tmp_path, "f", b"aaaa")
    mtime = f.stat().st_mtime_ns
    cache = FileDigestCache(tmp_path / "digests.log", "sha256")
    cache.digest(str(f))
    f.write_bytes(b"aaaaa")
    os.utime(f, ns=(mtime, mtime))  # as a tool that restores timestamps would
    assert cache.digest(str(f)) == digest_bytes(b"aaaaa")
    assert len(hashed) == 2


def test_replaced_file_with_the_same_stamp_but_another_inode_rehashes(
    tmp_path: Path, hashed: list[str]
) -> None:
    f = make(tmp_path, "f", b"aaaa")
    mtime = f.stat().st_mtime_ns
    cache = FileDigestCache(tmp_path / "digests.log", "sha256")
    cache.digest(str(f))
    new = tmp_path / "new"
    new.write_bytes(b"bbbb")
    os.utime(new, ns=(mtime, mtime))
    os.replace(new, f)
    assert cache.digest(str(f)) == digest_bytes(b"bbbb")


def test_racily_clean_file_is_hashed_every_time_and_not_recorded(
    tmp_path: Path, hashed: list[str]
) -> None:
    f = tmp_path / "just-written"
    f.write_bytes(b"fresh")  # mtime: now
    log = tmp_path / "digests.log"
    cache = FileDigestCache(log, "sha256")
    assert cache.digest(str(f)) == digest_bytes(b"fresh")
    assert cache.digest(str(f)) == digest_bytes(b"fresh")
    cache.close()
    assert len(hashed) == 2
    assert len(cache) == 0
    assert not log.exists() or len(log_lines(log)) <= 1


def test_file_with_a_future_mtime_is_not_recorded(tmp_path: Path, hashed: list[str]) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x")
    aged(f, -3600)  # an hour ahead: a skewed clock, or a file from another machine
    cache = FileDigestCache(tmp_path / "digests.log", "sha256")
    cache.digest(str(f))
    cache.digest(str(f))
    assert len(hashed) == 2


def test_racily_clean_file_is_recorded_once_it_has_aged(tmp_path: Path, hashed: list[str]) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x")
    cache = FileDigestCache(tmp_path / "digests.log", "sha256")
    cache.digest(str(f))
    aged(f, 2.5)
    cache.digest(str(f))
    cache.digest(str(f))
    assert len(hashed) == 2


def test_paths_with_tabs_round_trip_and_newlines_are_never_recorded(
    tmp_path: Path, hashed: list[str]
) -> None:
    tab = make(tmp_path, "a\tb", b"tab")
    newline = make(tmp_path, "a\nb", b"newline")
    log = tmp_path / "digests.log"
    with FileDigestCache(log, "sha256") as cache:
        cache.digest(str(tab))
        cache.digest(str(newline))
    hashed.clear()
    reopened = FileDigestCache(log, "sha256")
    assert reopened.digest(str(tab)) == digest_bytes(b"tab")
    assert reopened.digest(str(newline)) == digest_bytes(b"newline")
    assert hashed == [str(newline)]


def test_non_utf8_path_round_trips(tmp_path: Path, hashed: list[str]) -> None:
    f = make(tmp_path, os.fsdecode(b"caf\xe9"), b"latin-1 name")
    log = tmp_path / "digests.log"
    with FileDigestCache(log, "sha256") as cache:
        cache.digest(str(f))
    hashed.clear()
    FileDigestCache(log, "sha256").digest(str(f))
    assert hashed == []


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        FileDigestCache(tmp_path / "digests.log", "sha256").digest(str(tmp_path / "absent"))


def write_log(tmp_path: Path, count: int) -> tuple[Path, list[Path]]:
    files = [make(tmp_path, f"files/f{i}", str(i).encode() * 3) for i in range(count)]
    log = tmp_path / "digests.log"
    with FileDigestCache(log, "sha256") as cache:
        for f in files:
            cache.digest(str(f))
    return log, files


def test_every_truncated_prefix_of_a_log_loads(tmp_path: Path) -> None:
    # ninja's build_log_test Truncate: a write cut short anywhere must not break loading.
    log, files = write_log(tmp_path, 4)
    whole = log.read_bytes()
    head = len(header("sha256"))
    for n in range(len(whole) + 1):
        log.write_bytes(whole[:n])
        cache = FileDigestCache(log, "sha256")
        complete = whole[:n].count(b"\n") - 1 if n >= head else 0
        assert len(cache) == complete, n
        for f in files:  # a remembered digest is always the right one
            assert cache.digest(str(f)).size == f.stat().st_size


def test_record_without_its_newline_is_skipped(tmp_path: Path, hashed: list[str]) -> None:
    log, files = write_log(tmp_path, 2)
    log.write_bytes(log.read_bytes()[:-1])
    cache = FileDigestCache(log, "sha256")
    assert len(cache) == 1
    hashed.clear()
    cache.digest(str(files[1]))
    assert hashed == [str(files[1])]


def test_malformed_lines_are_skipped_and_the_rest_loads(tmp_path: Path) -> None:
    log, _ = write_log(tmp_path, 2)
    lines = log_lines(log)
    junk = [
        b"garbage\n",
        b"1\t2\t3\t4\t" + HASH.encode() + b"\n",  # no path
        b"x\t2\t3\t4\t" + HASH.encode() + b"\t/p\n",
        b"1\t2\t3\t4\t" + b"AB" * 32 + b"\t/p\n",
        b"-1\t2\t3\t4\t" + HASH.encode() + b"\t/p\n",
        b"\n",
        b"\xff\xfe\x00\n",
    ]
    log.write_bytes(lines[0] + lines[1] + b"".join(junk) + lines[2])
    assert len(FileDigestCache(log, "sha256")) == 2


def test_last_record_for_a_path_wins(tmp_path: Path) -> None:
    f = make(tmp_path, "f", b"now")
    st = f.stat()
    stamp = digest_cache_module._Stamp.of(st)
    old = digest_cache_module._Stamp(stamp.inode, stamp.size, 1, 1)
    log = tmp_path / "digests.log"
    log.write_bytes(
        header("sha256") + encode_record(str(f), stamp, HASH) + encode_record(str(f), old, "1" * 64)
    )
    cache = FileDigestCache(log, "sha256")
    assert len(cache) == 1
    assert cache.digest(str(f)) == digest_bytes(b"now")  # the last record is stale: re-hashed


@pytest.mark.parametrize(
    "first_line", [b"# kiln digest log v2 sha256\n", b"# kiln digest log v1 blake3\n", b"junk\n"]
)
def test_log_with_another_header_is_discarded(tmp_path: Path, first_line: bytes) -> None:
    log, files = write_log(tmp_path, 3)
    log.write_bytes(first_line + log.read_bytes().split(b"\n", 1)[1])
    cache = FileDigestCache(log, "sha256")
    assert len(cache) == 0
    assert not log.exists()
    cache.digest(str(files[0]))
    cache.close()
    assert log_lines(log)[0] == b"# kiln digest log v1 sha256\n"


def test_compaction_keeps_only_the_live_records(tmp_path: Path, hashed: list[str]) -> None:
    files = [make(tmp_path, f"f{i}", b"%d" % i) for i in range(10)]
    stamps = [digest_cache_module._Stamp.of(f.stat()) for f in files]
    hashes = [digest_bytes(b"%d" % i).hash for i in range(10)]
    log = tmp_path / "digests.log"
    dead = [encode_record(str(files[i % 10]), stamps[i % 10], HASH) for i in range(1200)]
    live = [encode_record(str(f), s, h) for f, s, h in zip(files, stamps, hashes, strict=True)]
    log.write_bytes(header("sha256") + b"".join(dead + live))
    cache = FileDigestCache(log, "sha256")
    assert len(log_lines(log)) == 11
    assert not (tmp_path / "digests.log.compact").exists()
    for i, f in enumerate(files):
        assert cache.digest(str(f)) == digest_bytes(b"%d" % i)
    assert hashed == []
    assert len(FileDigestCache(log, "sha256")) == 10


def test_compaction_replaces_a_temp_left_by_a_crash(tmp_path: Path) -> None:
    log, files = write_log(tmp_path, 3)
    stamp = digest_cache_module._Stamp.of(files[0].stat())
    log.write_bytes(log.read_bytes() + encode_record(str(files[0]), stamp, HASH) * 1100)
    leftover = tmp_path / "digests.log.compact"
    leftover.write_bytes(b"half a compaction")
    assert len(FileDigestCache(log, "sha256")) == 3
    assert len(log_lines(log)) == 4
    assert not leftover.exists()


def test_a_writer_ends_a_line_cut_short_before_appending(tmp_path: Path, hashed: list[str]) -> None:
    log, files = write_log(tmp_path, 1)
    whole = log.read_bytes()
    log.write_bytes(whole + whole.splitlines(keepends=True)[1][:7])  # a crash mid-record
    new = make(tmp_path, "new", b"new")
    with FileDigestCache(log, "sha256") as cache:
        cache.digest(str(new))
    hashed.clear()
    reopened = FileDigestCache(log, "sha256")
    assert len(reopened) == 2
    reopened.digest(str(files[0]))
    reopened.digest(str(new))
    assert hashed == []


def test_small_or_mostly_live_logs_are_not_compacted(tmp_path: Path) -> None:
    log, files = write_log(tmp_path, 5)
    stamp = digest_cache_module._Stamp.of(files[0].stat())
    extra = encode_record(str(files[0]), stamp, HASH) * 900  # 905 lines: under 1000
    log.write_bytes(log.read_bytes() + extra)
    size = log.stat().st_size
    FileDigestCache(log, "sha256")
    assert log.stat().st_size == size


def test_records_are_flushed_in_batches_when_many_wait(tmp_path: Path) -> None:
    files = [make(tmp_path, f"f{i}", b"%d" % i) for i in range(600)]
    log = tmp_path / "digests.log"
    cache = FileDigestCache(log, "sha256")
    for f in files:
        cache.digest(str(f))
    assert len(log_lines(log)) == 1 + 512  # flushed once, before close
    cache.close()
    assert len(log_lines(log)) == 601


APPENDER = """
import sys
from kiln.cache.digest_cache import FileDigestCache

cache = FileDigestCache(sys.argv[1], "sha256")
print("ready", flush=True)
sys.stdin.readline()
for path in sys.argv[2:]:
    cache.digest(path)
    cache.flush()
"""


@pytest.mark.slow
def test_two_processes_appending_never_tear_each_others_lines(tmp_path: Path) -> None:
    # Long paths make each record several hundred bytes, so torn writes would show.
    long_dir = "d" * 200
    groups = [
        [make(tmp_path, f"{long_dir}/{name}{i}", b"%s%d" % (name.encode(), i)) for i in range(300)]
        for name in ("a", "b")
    ]
    log = tmp_path / "digests.log"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(log), *map(str, group)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for group in groups
    ]
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline() == b"ready\n"
    for p in procs:  # start both at once
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()
    for p in procs:
        assert p.wait(timeout=60) == 0
    lines = log_lines(log)
    assert lines[0] == header("sha256")
    assert all(digest_cache_module._RECORD.fullmatch(line[:-1]) for line in lines[1:])
    assert len(lines) == 601
    cache = FileDigestCache(log, "sha256")
    assert len(cache) == 600
    for f in groups[0] + groups[1]:
        assert cache.digest(str(f)) == digest_bytes(f.read_bytes())
