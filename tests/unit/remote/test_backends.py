"""open_executor: --remote_executor's scheme picks the executor; nothing connects yet."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from kiln.cache.cas import ContentStore
from kiln.errors import KilnError
from kiln.host_facts import HostFacts
from kiln.remote.backends import open_executor
from kiln.remote.options import RemoteOptions
from kiln.remote.stores import open_store


def test_without_remote_executor_there_is_no_executor() -> None:
    assert open_executor(RemoteOptions(remote_cache="http://h/"), None) is None


def test_ray_opens_the_ray_executor_on_the_builds_store(tmp_path: Path) -> None:
    from kiln.remote_exec.ray_executor import RayExecutor
    from kiln.remote_exec.spawner import RaySpawner
    from kiln.remote_exec.toolchains import ClusterGpuPlatform

    options = RemoteOptions(
        remote_cache="http://h/", remote_executor="ray://head:10001", remote_timeout=3.0
    )
    store = open_store(options)
    executor = open_executor(options, store)
    assert isinstance(executor, RayExecutor)
    assert executor.address == "ray://head:10001"
    assert executor.cluster.timeout == 3.0
    cas = ContentStore(tmp_path, "sha256")
    spawner = executor.spawner(cas, digest_function="sha256", warn=print, report=print)
    assert isinstance(spawner, RaySpawner)
    assert spawner.remote is store  # one store client: the spawner's is the build's
    assert spawner.options is options  # what travels to the nodes
    platform = executor.gpu_platform(HostFacts.of_this_machine())
    assert isinstance(platform, ClusterGpuPlatform) and platform.cluster is executor.cluster


def test_an_unknown_scheme_names_the_flag_the_value_and_what_kiln_opens() -> None:
    with pytest.raises(KilnError) as raised:
        open_executor(RemoteOptions(remote_executor="k8s://remote:443"), None)
    assert raised.value.message == (
        "invalid --remote_executor 'k8s://remote:443': unknown scheme 'k8s://' "
        "(kiln opens ray://, grpc://, grpcs://)"
    )


def test_grpc_opens_the_reapi_executor_on_the_same_flags_as_the_store() -> None:
    from kiln.reapi.executor import ReapiExecutor

    options = RemoteOptions(
        remote_executor="grpc://farm:8980",
        remote_instance_name="ci",
        remote_header=("Authorization=Bearer t",),
    )
    executor = open_executor(options, None)
    assert isinstance(executor, ReapiExecutor)
    assert (executor.address, executor.server.instance_name) == ("grpc://farm:8980", "ci")
    assert executor.server.spec.metadata == (("authorization", "Bearer t"),)


def test_a_bad_ray_address_is_a_flag_error() -> None:
    with pytest.raises(KilnError, match=r"^invalid --remote_executor: not a Ray Client address"):
        open_executor(RemoteOptions(remote_executor="ray://head"), None)


def test_the_options_record_pickles_as_a_task_carries_it() -> None:
    options = RemoteOptions(remote_cache="http://h/", remote_header=("A=b",), remote_min_rate=9)
    assert hash(options) == hash(RemoteOptions("http://h/", None, ("A=b",), 60.0, 9))
    assert pickle.loads(pickle.dumps(options)) == options
