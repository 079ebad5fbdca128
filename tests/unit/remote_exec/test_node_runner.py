"""What a worker node does with one action, run here without Ray (node_runner.run_task).

The remote cache is a real nginx (tests/nginx_cache.py); the node's CAS and
execroots live under KILN_WORKER_ROOT in the test's folder.
"""

from __future__ import annotations

from pathlib import Path

from kiln.action_graph import Action, File
from kiln.cache.digest import Digest, digest_bytes
from kiln.cache.remote import RemoteCache
from kiln.remote.options import RemoteOptions
from kiln.remote_exec import node_runner
from kiln.remote_exec.protocol import RemoteTask, TaskInput

from tests.nginx_cache import NginxCache

KEY = "ab" * 32


def _task(
    nginx: NginxCache, tmp_path: Path, cmd: str, data: bytes = b"hello\n", **platform: str
) -> tuple[RemoteTask, Digest]:
    source = tmp_path / "in.txt"
    source.write_bytes(data)
    digest = digest_bytes(data, "sha256")
    config = RemoteOptions(nginx.url, remote_instance_name=tmp_path.name)
    with RemoteCache(nginx.url, instance_name=tmp_path.name) as remote:
        remote.upload_file(digest, source)
    action = Action(
        owner="//p:t",
        mnemonic="Genrule",
        argv=("/bin/bash", "-c", cmd),
        inputs=(File("p/in.txt"),),
        outputs=(File("kiln-out/p/out.txt"),),
        env=(("PATH", "/usr/bin:/bin"),),
        platform=tuple(platform.items()),
    )
    inputs = (TaskInput("p/in.txt", digest.hash, digest.size, False),)
    return RemoteTask(action, KEY, inputs, "sha256", config, None), digest


def _entry(nginx: NginxCache, task: RemoteTask) -> Path:
    return nginx.root / task.remote.remote_instance_name / "ac" / KEY


def test_it_runs_the_action_and_stores_blobs_before_the_entry(
    nginx: NginxCache, tmp_path: Path, node: Path
) -> None:
    task, _ = _task(nginx, tmp_path, "tr a-z A-Z < p/in.txt > kiln-out/p/out.txt; ls")
    ended = node_runner.run_task(task)
    assert ended.exit_code == 0 and ended.result is not None, ended
    assert ended.printed == "kiln-out\np\n"  # only the declared input is there
    (output,) = ended.result.output_files
    assert output.path == "kiln-out/p/out.txt"
    blob = nginx.root / task.remote.remote_instance_name / "cas" / output.digest.hash
    assert blob.read_bytes() == b"HELLO\n"
    assert _entry(nginx, task).exists()
    assert not list((node / "execroot").iterdir())  # its execroot is gone


def test_an_input_the_node_has_is_not_fetched_again(
    nginx: NginxCache, tmp_path: Path, node: Path
) -> None:
    task, digest = _task(nginx, tmp_path, "cp p/in.txt kiln-out/p/out.txt")
    assert node_runner.run_task(task).result is not None
    (nginx.root / task.remote.remote_instance_name / "cas" / digest.hash).unlink()
    again = node_runner.run_task(task)  # the remote lost it; the node's CAS still has it
    assert again.result is not None, again


def test_a_damaged_input_is_refused_and_nothing_is_stored(
    nginx: NginxCache, tmp_path: Path, node: Path
) -> None:
    task, digest = _task(nginx, tmp_path, "cp p/in.txt kiln-out/p/out.txt", b"exact\n")
    blob = nginx.root / task.remote.remote_instance_name / "cas" / digest.hash
    blob.write_bytes(b"EVIL!\n")
    ended = node_runner.run_task(task)
    assert ended.result is None and "damaged" in ended.message
    assert not _entry(nginx, task).exists()


def test_a_failing_command_stores_nothing(nginx: NginxCache, tmp_path: Path, node: Path) -> None:
    task, _ = _task(nginx, tmp_path, "echo partial > kiln-out/p/out.txt; echo why >&2; exit 4")
    ended = node_runner.run_task(task)
    assert (ended.exit_code, ended.message) == (4, "exited with code 4")
    assert ended.output == "why\n" and ended.result is None
    assert not _entry(nginx, task).exists()


def test_an_action_whose_fingerprint_is_not_this_nodes_is_refused_naming_both(
    nginx: NginxCache, tmp_path: Path, node: Path
) -> None:
    task, _ = _task(nginx, tmp_path, "touch kiln-out/p/out.txt", python="2.7.18", os="linux")
    ended = node_runner.run_task(task)
    assert ended.refused and ended.result is None
    assert "its toolchain does not match the action's key" in ended.message
    assert "python '2.7.18' (this machine: '3." in ended.message
    assert not _entry(nginx, task).exists()


def test_a_nodes_store_is_opened_from_the_drivers_options_once_per_record() -> None:
    options = RemoteOptions(
        "http://cache:8080/",
        remote_header=("X-Team=ml",),
        remote_timeout=5.0,
        remote_min_rate=12345,
        remote_instance_name="node-test",
    )
    store = node_runner.store_for(options)
    assert isinstance(store, RemoteCache)
    # --remote_min_rate reaches the node (CacheConfig dropped it), with the rest
    assert (store.min_rate, store.timeout) == (12345, 5.0)
    assert ("X-Team", "ml") in store._headers
    assert node_runner.store_for(options) is store  # kept alive for every task
    assert node_runner.store_for(RemoteOptions("http://cache:8080/")) is not store
