"""The Ray head lost in the middle of a build: the rest runs here, or one clear error.

Each test has a cluster of its own (tests/ray_cluster.py: a head without CPUs and
one `cpu` node), since it kills the head, by the PIDs the head's processes were
started with, while the node runs the build's first action.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_remote_execution import Built, Driver, _driver
from tests.nginx_cache import NginxCache
from tests.ray_cluster import NodeSpec, RayCluster

# A command line no other process has: the test finds it in /proc to know the first
# action runs on the node. The digits are this test process's PID: a constant was another
# suite's too, on a machine running two (its head was then killed before this one's kiln
# had connected).
FIRST = f"sleep 4.{os.getpid():07d}"
BUILD = f"""
genrule(name = "first", outs = ["first.txt"], cmd = "{FIRST}; echo first > $@")
genrule(name = "second", srcs = [":first"], outs = ["second.txt"], cmd = "cat $< > $@")
"""


@pytest.fixture
def cluster() -> Iterator[RayCluster]:
    # A short path: Ray's socket names must stay under 108 bytes.
    tmp = Path(f"/tmp/kiln-ray-head-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    started = RayCluster.start(tmp, [NodeSpec("cpu")])
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxCache]:
    server = NginxCache.start(tmp_path_factory.mktemp("nginx"))
    try:
        yield server
    finally:
        server.stop()


def _running(command: str) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if cmdline.decode(errors="replace").strip() == command:
                return True
    return False


def _build_losing_the_head(driver: Driver, cluster: RayCluster, *flags: str) -> Built:
    """Build //:second remotely, killing the head once the node runs //:first."""
    driver.write("BUILD", BUILD)
    process = driver.start("//:second", "--spawn_strategy=remote", *flags)
    try:
        deadline = time.monotonic() + 300
        while not _running(FIRST):
            assert process.poll() is None, driver.finish(process).err
            assert time.monotonic() < deadline, "the first action never started on the node"
            time.sleep(0.05)
        cluster.kill_head()
        return driver.finish(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_with_local_fallback_the_rest_of_the_build_runs_here(
    tmp_path: Path, cluster: RayCluster, cache: NginxCache
) -> None:
    driver = _driver(tmp_path / "ws", cluster, cache)
    built = _build_losing_the_head(driver, cluster, "--remote_local_fallback")
    assert built.code == 0, built.err
    assert "INTERNAL ERROR" not in built.err and "Traceback" not in built.err
    actions = built.actions()
    assert actions["Genrule //:first"]["strategy"] == "local"
    assert actions["Genrule //:second"]["strategy"] == "local"
    assert driver.out("second.txt") == b"first\n"
    # Said once, not once per action; nothing of Ray's own chatter.
    assert (
        built.err.startswith(f"INFO: lost the Ray cluster at {cluster.address}: ")
        and built.err.count("lost the Ray cluster") == 1
    ), built.err
    assert "; running actions here instead (--remote_local_fallback)\n" in built.err
    assert "dataclient.py" not in built.err and "logsclient.py" not in built.err


def test_without_local_fallback_the_build_fails_with_one_line(
    tmp_path: Path, cluster: RayCluster, cache: NginxCache
) -> None:
    driver = _driver(tmp_path / "ws", cluster, cache)
    built = _build_losing_the_head(driver, cluster)
    assert built.code == 1
    assert "INTERNAL ERROR" not in built.err and "Traceback" not in built.err
    assert (
        f"ERROR: BUILD:2:1: Executing genrule //:first failed: lost the Ray cluster at "
        f"{cluster.address}: "
    ) in built.err
    assert built.err.count("lost the Ray cluster") == 1, built.err
    assert "dataclient.py" not in built.err and "logsclient.py" not in built.err
    assert not (driver.root / "kiln-out/second.txt").exists()


def test_killing_the_head_leaves_no_process_of_it(cluster: RayCluster) -> None:
    """kill_head() kills the head's processes and its raylet's agents by PID; stop() ends
    the rest (never `ray stop`, which would kill every Ray process of the machine)."""
    cluster.kill_head()
    cluster.stop()
    assert cluster.process.returncode is not None
    assert _processes_of(cluster.tmp) == []


def _processes_of(tmp: Path) -> list[int]:
    """The live processes of the cluster in `tmp`: those holding a file under it (Ray's
    processes log to its session folder; their environ is overwritten by their title)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fds = os.listdir(f"/proc/{entry}/fd")
                if any(os.readlink(f"/proc/{entry}/fd/{fd}").startswith(str(tmp)) for fd in fds):
                    found.append(int(entry))
            except OSError:
                continue  # gone meanwhile
    return found
