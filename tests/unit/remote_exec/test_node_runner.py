"""What a worker node does with one action, run here without Ray (node_runner.run_task).

The remote cache is a real nginx (tests/nginx_cache.py); the node's CAS and
execroots live under KILN_WORKER_ROOT in the test's folder.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from kiln.action_graph import PYTHON_INTERPRETER, Action, File, Resources
from kiln.cache.digest import Digest, digest_bytes
from kiln.cache.remote import RemoteCache
from kiln.remote.options import RemoteOptions
from kiln.remote_exec import node_runner
from kiln.remote_exec.protocol import RemoteTask, TaskInput, TaskResult

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
    assert (
        nginx.root / task.remote.remote_instance_name / "cas" / output.digest.hash
    ).read_bytes() == (b"HELLO\n")
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


# A `python -m` action that says which process ran it, whether torch was imported
# before it started, and how long the task took from the node's side.
REPORTER = """
# the worker: each action runs in a fork of it
import os, sys
open("kiln-out/p/out.txt", "w").write(f"{os.getppid()} {'torch' in sys.modules}\\n")
"""


def _python_task(nginx: NginxCache, tmp_path: Path, name: str, body: str) -> RemoteTask:
    source = tmp_path / f"{name}.py"
    source.write_text(body)
    digest = digest_bytes(body.encode(), "sha256")
    config = RemoteOptions(nginx.url, remote_instance_name=tmp_path.name)
    with RemoteCache(nginx.url, instance_name=tmp_path.name) as remote:
        remote.upload_file(digest, source)
    action = Action(
        owner=f"//p:{name}",
        mnemonic="PyAction",
        argv=(PYTHON_INTERPRETER, "-m", f"p.{name}"),
        inputs=(File(f"p/{name}.py"),),
        outputs=(File("kiln-out/p/out.txt"),),
        env=(("PATH", "/usr/bin:/bin"),),
        supports_workers=True,
    )
    inputs = (TaskInput(f"p/{name}.py", digest.hash, digest.size, False),)
    return RemoteTask(action, name * 32, inputs, "sha256", config, None)


def _said(task: TaskResult, nginx: NginxCache, instance: str) -> str:
    assert task.result is not None, task
    (output,) = task.result.output_files
    return (nginx.root / instance / "cas" / output.digest.hash).read_text()


@pytest.mark.torch
def test_a_nodes_python_actions_share_a_persistent_worker_with_torch_imported_once(
    nginx: NginxCache, tmp_path: Path, node: Path
) -> None:
    seconds = []
    said = []
    for name in ("ab", "cd"):
        task = _python_task(nginx, tmp_path, name, REPORTER)
        start = time.monotonic()
        ended = node_runner.run_task(task)
        seconds.append(time.monotonic() - start)
        said.append(_said(ended, nginx, tmp_path.name))
    (first_pid, first_torch), (second_pid, second_torch) = (s.split() for s in said)
    # One worker, which imported torch before either action started: the second
    # action paid for neither a process nor torch.
    assert (first_torch, second_torch) == ("True", "True")
    assert first_pid == second_pid
    print(f"node task with a new worker: {seconds[0]:.2f} s; with a warm one: {seconds[1]:.2f} s")


def test_a_write_through_an_input_fails_on_the_node_and_stores_nothing(
    nginx: NginxCache, tmp_path: Path, node: Path
) -> None:
    task, _ = _task(nginx, tmp_path, "echo more >> p/in.txt && touch kiln-out/p/out.txt")
    ended = node_runner.run_task(task)
    assert ended.result is None and not _entry(nginx, task).exists()
    # The sandbox shows an input read-only (without one, the check after the run fails it).
    assert "p/in.txt: Read-only file system" in ended.output, ended


def test_an_undeclared_absolute_path_is_not_there_on_the_node(
    nginx: NginxCache, tmp_path: Path, node: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not an input\n")
    task, _ = _task(nginx, tmp_path, f"cat {secret} > kiln-out/p/out.txt")
    ended = node_runner.run_task(task)
    assert (ended.exit_code, ended.result) == (1, None)
    assert "No such file or directory" in ended.output


@pytest.mark.parametrize(("gpus", "seen"), [(1, "[3]"), (0, "[]")])
def test_a_gpu_action_sees_the_gpus_ray_gave_its_task_and_a_cpu_action_none(
    nginx: NginxCache,
    tmp_path: Path,
    node: Path,
    monkeypatch: pytest.MonkeyPatch,
    gpus: int,
    seen: str,
) -> None:
    """Ray sets CUDA_VISIBLE_DEVICES in the task's process: the node runs the action with
    exactly that, never renumbered; an action needing no GPU gets none of them."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    task, _ = _task(nginx, tmp_path, 'echo "[${CUDA_VISIBLE_DEVICES-unset}]" > kiln-out/p/out.txt')
    action = dataclasses.replace(task.action, resources=Resources(cpu=1, gpu=gpus))
    ended = node_runner.run_task(dataclasses.replace(task, action=action))
    assert ended.exit_code == 0 and ended.result is not None, ended
    (output,) = ended.result.output_files
    stored = nginx.root / task.remote.remote_instance_name / "cas" / output.digest.hash
    assert stored.read_text() == seen + "\n"
