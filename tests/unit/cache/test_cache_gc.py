"""kiln.cache.gc: size-bounded LRU collection of blobs and action-cache entries."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kiln.cache.action_cache import ActionCache, ActionResult, OutputFile
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest
from kiln.cache.gc import IN_USE_LOCK, GcReport, collect, expunge
from kiln.layout import PYTHON_ENV_IN_USE, DiskCache
from kiln.pyenv.environment import hold_in_use


def age(path: Path, seconds: float, now_ns: int | None = None) -> None:
    """Make path look last used `seconds` ago (from now, not from collection: a full
    suite reaches these tests minutes after collecting them). Paths that must be of
    the same age take the same `now_ns`: two clock reads can straddle a second, and
    collection orders by the second first."""
    ns = (now_ns or time.time_ns()) - int(seconds * 1e9)
    os.utime(path, ns=(ns, ns))


@pytest.fixture
def cas(tmp_path: Path) -> ContentStore:
    return ContentStore(tmp_path)


@pytest.fixture
def ac(tmp_path: Path) -> ActionCache:
    return ActionCache(tmp_path)


def blob(cas: ContentStore, fill: bytes, seconds_ago: float, size: int = 100) -> Digest:
    d = cas.put_bytes(fill * size)
    age(cas.path(d), seconds_ago)
    return d


def key(n: int) -> str:
    return f"{n:02x}" * 32


def test_under_the_limit_nothing_is_removed(tmp_path: Path, cas: ContentStore) -> None:
    d = blob(cas, b"a", 10_000)
    report = collect(tmp_path, max_bytes=1000)
    assert report == GcReport(100, 100, 0, 0)
    assert cas.has(d)


def test_least_recently_used_blobs_go_first(tmp_path: Path, cas: ContentStore) -> None:
    old, older, oldest = blob(cas, b"a", 1000), blob(cas, b"b", 2000), blob(cas, b"c", 3000)
    report = collect(tmp_path, max_bytes=250)
    assert report == GcReport(300, 200, 1, 0)
    assert not cas.has(oldest)
    assert cas.has(older)
    assert cas.has(old)
    assert collect(tmp_path, max_bytes=100).blobs_removed == 1
    assert not cas.has(older)
    assert cas.has(old)


def test_blobs_used_within_the_grace_period_are_kept_even_over_the_limit(
    tmp_path: Path, cas: ContentStore
) -> None:
    recent = [blob(cas, fill, 60) for fill in (b"a", b"b", b"c")]
    old = blob(cas, b"d", 1000)
    report = collect(tmp_path, max_bytes=0, grace_seconds=300)
    assert report == GcReport(400, 300, 1, 0)
    assert all(cas.has(d) for d in recent)
    assert not cas.has(old)


def test_a_hit_makes_old_blobs_recently_used(
    tmp_path: Path, cas: ContentStore, ac: ActionCache
) -> None:
    hit = blob(cas, b"h", 5000)
    unused = blob(cas, b"u", 1000)
    ac.put(key(1), ActionResult((OutputFile("out", hit),)))
    age(ac.path(key(1)), 5000)
    assert ac.lookup(key(1), cas) is not None
    collect(tmp_path, max_bytes=200, grace_seconds=300)
    assert cas.has(hit)
    assert ac.get(key(1)) is not None
    assert not cas.has(unused)


def test_entries_go_before_blobs_of_the_same_age(
    tmp_path: Path, cas: ContentStore, ac: ActionCache
) -> None:
    d = cas.put_bytes(b"x" * 100)
    ac.put(key(2), ActionResult((OutputFile("out", d),)))
    now = time.time_ns()
    age(cas.path(d), 1000, now)
    age(ac.path(key(2)), 1000, now)
    entry_size = ac.path(key(2)).stat().st_size
    report = collect(tmp_path, max_bytes=100)
    assert report == GcReport(100 + entry_size, 100, 0, 1)
    assert ac.get(key(2)) is None
    assert cas.has(d)


def test_an_old_entry_whose_blob_was_collected_is_only_a_miss(
    tmp_path: Path, cas: ContentStore, ac: ActionCache
) -> None:
    old_blob = blob(cas, b"o", 9000)
    ac.put(key(3), ActionResult((OutputFile("out", old_blob),)))
    age(ac.path(key(3)), 10)  # the entry is recent, its blob is not
    collect(tmp_path, max_bytes=10, grace_seconds=0)
    assert not cas.has(old_blob)
    assert ac.lookup(key(3), cas) is None


def test_collection_leaves_the_store_consistent(
    tmp_path: Path, cas: ContentStore, ac: ActionCache
) -> None:
    digests = [blob(cas, bytes([65 + i]), 100 * i + 400, size=50 + i) for i in range(20)]
    for i in range(10):
        ac.put(
            key(i), ActionResult((OutputFile("a", digests[i]), OutputFile("b", digests[i + 10])))
        )
        age(ac.path(key(i)), 100 * i + 450)
    report = collect(tmp_path, max_bytes=800, grace_seconds=300)
    assert report.bytes_after <= 800
    assert report.blobs_removed + report.entries_removed > 0
    remaining = list((tmp_path / "cas").glob("??/*"))
    assert len(remaining) == 20 - report.blobs_removed
    for path in remaining:
        assert cas.verify(Digest(path.name, path.stat().st_size))
    for i in range(10):
        result = ac.lookup(key(i), cas)  # a hit or a clean miss, never an error
        if result is not None:
            assert all(cas.has(f.digest) for f in result.output_files)
    assert list(tmp_path.rglob(".tmp.*")) == []


def test_stale_temps_are_removed_and_fresh_ones_kept(tmp_path: Path, cas: ContentStore) -> None:
    cas.put_bytes(b"x")
    shard = next((tmp_path / "cas").glob("??"))
    stale = [tmp_path / "cas" / ".tmp.crashed", shard / ".tmp.crashed", tmp_path / "ac" / "ab"]
    stale[2].mkdir(parents=True)
    stale[2] = stale[2] / ".tmp.crashed"
    fresh = shard / ".tmp.writing"
    for p in [*stale, fresh]:
        p.write_bytes(b"partial")
    for p in stale:
        age(p, 1000)
    report = collect(tmp_path, max_bytes=10**9)
    assert report.temps_removed == 3
    assert report.bytes_before == 1  # temps are not blobs
    assert not any(p.exists() for p in stale)
    assert fresh.exists()


def test_missing_cache_directories_are_an_empty_cache(tmp_path: Path) -> None:
    assert collect(tmp_path / "new", max_bytes=0) == GcReport(0, 0, 0, 0)


def test_two_collections_never_run_at_once(tmp_path: Path, cas: ContentStore) -> None:
    blob(cas, b"a", 1000)
    reports: list[GcReport] = []
    fd = os.open(tmp_path / "gc.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another collection is running
        worker = threading.Thread(target=lambda: reports.append(collect(tmp_path, 0)))
        worker.start()
        worker.join(0.3)
        assert worker.is_alive()
        assert reports == []
    finally:
        os.close(fd)
    worker.join(10)
    assert reports == [GcReport(100, 0, 1, 0)]


def test_expunge_removes_the_store_and_keeps_the_lock(
    cas: ContentStore, ac: ActionCache, tmp_path: Path
) -> None:
    d = cas.put_bytes(b"x")
    ac.put("ab" * 32, ActionResult(output_files=(OutputFile("o", d),)))
    expunge(DiskCache(tmp_path), ["sha256", "blake3"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gc.lock"]


def test_writers_never_fail_while_the_store_is_expunged_under_them(
    cas: ContentStore, ac: ActionCache, tmp_path: Path
) -> None:
    """Issue 11 B2: an expunge of a shared cache during a build crashed it; every write
    must land whole in a fresh store instead."""
    errors: list[BaseException] = []
    stop = threading.Event()
    written = 0

    def write() -> None:
        nonlocal written
        try:
            while not stop.is_set():  # until the expunges are done: however fast it runs
                i = written
                src = tmp_path / f"src{i}"
                src.write_bytes(b"%d" % i * 1000)
                d = cas.put_file(src)
                ac.put(f"{i:064x}", ActionResult(output_files=(OutputFile("o", d),)))
                cas.put_bytes(b"bytes %d" % i)
                written += 1
        except BaseException as e:
            errors.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    # An expunge every 20 ms (far more than real life), at least ten, and on until the
    # writer has stored something: on a loaded machine its thread may not have run yet.
    deadline = time.monotonic() + 60
    expunges = 0
    while expunges < 10 or (written < 3 and not errors and time.monotonic() < deadline):
        expunge(DiskCache(tmp_path), ["sha256"])
        expunges += 1
        time.sleep(0.02)
    stop.set()
    writer.join()
    assert errors == []
    assert written > 0


def test_the_actions_temp_state_counts_and_is_collected_but_a_held_lock(
    cas: ContentStore, tmp_path: Path
) -> None:
    """Issue 11 A6: packaging's 1.2 GB of precompiled headers were never collected."""
    headers = tmp_path / "tmp/torch/precompiled_headers"
    headers.mkdir(parents=True)
    (headers / "old.gch").write_bytes(b"h" * 5000)
    age(headers / "old.gch", 3600)
    held = tmp_path / "tmp/kiln-inductor-ab.lock"
    held.write_bytes(b"")
    age(held, 3600)
    recent = blob(cas, b"r", 0)
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        report = collect(tmp_path, max_bytes=200)
    finally:
        os.close(fd)
    assert report.bytes_before >= 5100
    assert report.temp_state_removed == 1
    assert not (headers / "old.gch").exists()
    assert held.exists()  # another process holds it
    assert cas.has(recent)


def test_expunge_leaves_the_temp_state_running_actions_hold(
    cas: ContentStore, tmp_path: Path
) -> None:
    """Issue 20: `kiln clean --expunge_disk_cache` from one workspace failed another
    workspace's running compile: its torch directory (precompiled headers, TMPDIR) went."""
    torch_dir = tmp_path / "tmp/torch"
    (torch_dir / "precompiled_headers").mkdir(parents=True)
    (torch_dir / "precompiled_headers/h.gch").write_bytes(b"header")
    private = tmp_path / "tmp/kiln-inductor-ab"
    private.mkdir()
    (private / "kernel.cpp").write_text("//")
    idle = tmp_path / "tmp/kiln-inductor-cd"
    idle.mkdir()
    (tmp_path / "tmp/kiln-inductor-cd.lock").write_bytes(b"")
    cas.put_bytes(b"x")
    holds = []
    for lock in (torch_dir / IN_USE_LOCK, tmp_path / "tmp/kiln-inductor-ab.lock"):
        fd = os.open(lock, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_SH)  # a running action's compile
        holds.append(fd)
    try:
        expunge(DiskCache(tmp_path), ["sha256"])
        assert (torch_dir / "precompiled_headers/h.gch").read_bytes() == b"header"
        assert (private / "kernel.cpp").exists()
        assert not idle.exists()
        assert not (tmp_path / "tmp/kiln-inductor-cd.lock").exists()
        assert not (tmp_path / "cas").exists()
    finally:
        for fd in holds:
            os.close(fd)
    expunge(DiskCache(tmp_path), ["sha256"])  # nobody holds them now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gc.lock"]


def test_the_in_use_lock_is_named_as_the_actions_name_it() -> None:
    from kiln.actions import temp_state

    assert temp_state.IN_USE_LOCK == IN_USE_LOCK


# -- Python environments (kiln.pyenv) -----------------------------------------------------


def environment(tmp_path: Path, digest: str, seconds_ago: float, size: int = 1000) -> Path:
    """An environment of the disk cache, last used `seconds_ago` (its in-use lock's mtime)."""
    env = DiskCache(tmp_path).python_envs / digest
    (env / "lib").mkdir(parents=True)
    (env / "lib/big.so").write_bytes(b"e" * size)
    (env / "kiln-env.json").write_text("{}")
    in_use = env.with_name(f"{digest}{PYTHON_ENV_IN_USE}")
    in_use.write_bytes(b"")
    age(in_use, seconds_ago)
    return env


def test_unused_environments_are_collected_whole_least_recently_used_first(
    tmp_path: Path, cas: ContentStore
) -> None:
    """Issue 20: environments (90-250 MB each) were never collected but by `clean --expunge`."""
    oldest = environment(tmp_path, "a" * 20, 7200)
    older = environment(tmp_path, "b" * 20, 3600)
    recent = blob(cas, b"r", 0)
    report = collect(tmp_path, max_bytes=1500)
    assert report.environments_removed == 1
    assert not oldest.exists() and older.is_dir()
    assert report.bytes_before >= 2100 and report.bytes_after <= 1500
    assert cas.has(recent)


def test_an_environment_in_use_or_being_made_is_never_collected(tmp_path: Path) -> None:
    used = environment(tmp_path, "a" * 20, 7200)
    making = environment(tmp_path, "b" * 20, 7200)
    hold_in_use(used.parent, used.name)  # this process uses it: held for its life
    fd = os.open(making.with_name(f"{making.name}.lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another kiln is making it
        report = collect(tmp_path, max_bytes=0)
        expunge(DiskCache(tmp_path), ["sha256"])
    finally:
        os.close(fd)
    assert report.environments_removed == 0
    assert (used / "lib/big.so").exists() and (making / "lib/big.so").exists()
    expunge(DiskCache(tmp_path), ["sha256"])  # nobody makes it now; `used` is still held
    assert not making.exists() and used.is_dir()


def test_expunge_removes_the_environments_nobody_uses(tmp_path: Path) -> None:
    environment(tmp_path, "a" * 20, 0)
    expunge(DiskCache(tmp_path), ["sha256"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gc.lock"]


def test_a_process_using_an_environment_keeps_it_until_it_ends(tmp_path: Path) -> None:
    """The real pattern across processes: a child that took the environment (as a build
    does through EnvironmentStore.python_for) keeps it from the collection while it lives."""
    env = environment(tmp_path, "c" * 20, 7200)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from kiln.pyenv.environment import "
            "hold_in_use; hold_in_use(Path(sys.argv[1]), sys.argv[2]); print('held', "
            "flush=True); sys.stdin.read()",
            str(env.parent),
            env.name,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        in_use = env.with_name(f"{env.name}{PYTHON_ENV_IN_USE}")
        age(in_use, 7200)  # taking it marked it used now: old again, as if long ago
        assert collect(tmp_path, max_bytes=0).environments_removed == 0
    finally:
        child.communicate("")
    assert collect(tmp_path, max_bytes=0).environments_removed == 1
    assert not env.exists()


def test_the_environments_in_use_lock_is_named_as_pyenv_takes_it(tmp_path: Path) -> None:
    hold_in_use(tmp_path, "d" * 20)
    assert (tmp_path / f"{'d' * 20}{PYTHON_ENV_IN_USE}").is_file()
