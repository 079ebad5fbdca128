"""The driver's RaySpawner: the wheels of an action's environment travel by digest.

Ray is stood in for by InProcessCluster (named so: it runs each task it is given
with node_runner.run_task, in this process, as a Ray worker would); the remote
cache is a real nginx. tests/e2e/test_remote_execution.py runs the real cluster.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import cast

import pytest
from kiln.action_graph import PYTHON_ACTION_ENV, Action, File
from kiln.cache.cas import ContentStore
from kiln.cache.digest import digest_file
from kiln.cache.remote import RemoteCache
from kiln.exec.remote_spawn import RemoteSpawn, RemoteWheel
from kiln.layout import DiskCache
from kiln.remote.options import RemoteOptions
from kiln.remote_exec import node_runner
from kiln.remote_exec.cluster import Cluster
from kiln.remote_exec.protocol import RemoteTask, TaskResult, TaskWheel
from kiln.remote_exec.routing import ClusterNode, Route
from kiln.remote_exec.spawner import RaySpawner

from tests.nginx_cache import NginxCache
from tests.wheels import make_wheel

WRITE_X = "import sys, teamlib; open(sys.argv[1], 'w').write(str(teamlib.X))"
FUNCTION = "blake3"  # not the lock's sha256: blobs are named by the cache's function


class InProcessCluster:
    """A stand-in for Ray's cluster: one node, which is this process."""

    def __init__(self) -> None:
        self.submitted: list[RemoteTask] = []

    def nodes(self, *, refresh: bool = False) -> list[ClusterNode]:
        return [ClusterNode("f" * 56, "127.0.0.1", True, {"CPU": 1.0}, {})]

    def submit(self, task: RemoteTask, route: Route, retries: int) -> TaskResult:
        self.submitted.append(task)
        return node_runner.run_task(task)

    def result(self, ref: TaskResult, timeout: float) -> TaskResult:
        return ref

    def cancel(self, ref: TaskResult) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_wheels_are_uploaded_by_the_caches_digest_and_named_in_the_task(
    nginx: NginxCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(node_runner.ROOT_ENV, str(tmp_path / "node"))
    wheel, teamlib = make_wheel(tmp_path / "w", "teamlib", "1.0", {"teamlib/__init__.py": "X = 7"})
    digest = digest_file(wheel, FUNCTION)
    cache = DiskCache.at(tmp_path / "driver", FUNCTION)
    cache.create()
    cluster = InProcessCluster()
    notes: list[str] = []
    config = RemoteOptions(nginx.url, remote_instance_name=tmp_path.name)
    spawner = RaySpawner(
        cast(Cluster, cluster),
        RemoteCache(nginx.url, instance_name=tmp_path.name),
        ContentStore(cache.root, FUNCTION),
        config,
        digest_function=FUNCTION,
        retries=0,
        warn=notes.append,
        report=notes.append,
    )
    action = Action(
        owner="//p:t",
        mnemonic="ModelWeights",
        argv=("python", "-c", WRITE_X, "kiln-out/p/x.txt"),
        inputs=(),
        outputs=(File("kiln-out/p/x.txt"),),
        env=tuple(PYTHON_ACTION_ENV.items()),
        python_env=(teamlib,),
    )
    key = hashlib.sha256(b"key").hexdigest()
    ran = spawner.spawn_remote(
        RemoteSpawn(action, key, {}, None, wheels=(RemoteWheel(wheel.name, digest, wheel),))
    )
    assert ran.result is not None, ran
    (task,) = cluster.submitted
    assert task.wheels == (TaskWheel("teamlib-1.0-py3-none-any.whl", digest.hash, digest.size),)
    assert (nginx.root / tmp_path.name / "cas" / digest.hash).read_bytes() == wheel.read_bytes()
    # What the node said making the environment reaches the driver's INFO lines.
    assert notes[0].startswith(f"{node_runner.node_name()}: making the Python environment ")
    (output,) = ran.result.output_files
    assert ContentStore(cache.root, FUNCTION).path(output.digest).read_text() == "7"
