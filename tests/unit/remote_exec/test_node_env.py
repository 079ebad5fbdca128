"""A node runs an action with third-party packages in an environment of the wheels it was sent.

node_runner.run_task here without Ray, as in test_node_runner.py: a real nginx is
the remote cache, the node's state lives under KILN_WORKER_ROOT in the test's
folder, and the wheel (a team's own, made on the spot) is a blob of the cache,
as the driver uploads it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from kiln.action_graph import PIP_PROPERTY, PYTHON_ACTION_ENV, Action, File, PythonPackage
from kiln.cache.digest import Digest
from kiln.cache.remote import RemoteCache
from kiln.pyenv import pip
from kiln.pyenv.environment import MANIFEST
from kiln.remote.options import RemoteOptions
from kiln.remote_exec import node_runner
from kiln.remote_exec.protocol import RemoteTask, TaskResult, TaskWheel

from tests.nginx_cache import NginxCache
from tests.wheels import make_wheel

PRINT_TEAMLIB = "import sys, teamlib; open(sys.argv[1], 'w').write(f'{teamlib.WIDTH} {sys.prefix}')"


def _sent(nginx: NginxCache, tmp_path: Path, wheel: Path, data: bytes | None = None) -> TaskWheel:
    """The wheel as the driver sends it: its blob in the remote cache (`data` instead of
    its bytes, to damage it), its file name and digest in the task."""
    digest = Digest(hashlib.sha256(wheel.read_bytes()).hexdigest(), wheel.stat().st_size)
    blob = tmp_path / "upload"
    blob.write_bytes(data if data is not None else wheel.read_bytes())
    with RemoteCache(nginx.url, instance_name=tmp_path.name) as remote:
        remote.upload_file(digest, blob)
    return TaskWheel(wheel.name, digest.hash, digest.size)


def _task(
    nginx: NginxCache,
    tmp_path: Path,
    package: PythonPackage,
    wheels: tuple[TaskWheel, ...],
    out: str = "out.txt",
) -> RemoteTask:
    action = Action(
        owner="//p:t",
        mnemonic="ModelWeights",
        argv=("python", "-c", PRINT_TEAMLIB, f"kiln-out/p/{out}"),
        inputs=(),
        outputs=(File(f"kiln-out/p/{out}"),),
        env=tuple(PYTHON_ACTION_ENV.items()),
        # As run_python keys it; a node makes the environment, so it matches any node.
        platform=((f"{PIP_PROPERTY}{package.name}", f"{package.version} {package.hashes[0]}"),),
        python_env=(package,),
    )
    config = RemoteOptions(nginx.url, remote_instance_name=tmp_path.name)
    key = hashlib.sha256(out.encode()).hexdigest()
    return RemoteTask(action, key, (), "sha256", config, None, wheels)


def _output(nginx: NginxCache, tmp_path: Path, ended: TaskResult) -> str:
    assert ended.result is not None, ended
    (output,) = ended.result.output_files
    return (nginx.root / tmp_path.name / "cas" / output.digest.hash).read_text()


def test_the_environment_is_made_of_the_wheels_sent_once_and_reused_by_the_next_action(
    nginx: NginxCache, tmp_path: Path, node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel, teamlib = make_wheel(
        tmp_path / "w", "teamlib", "1.0", {"teamlib/__init__.py": "WIDTH = 3"}
    )
    sent = (_sent(nginx, tmp_path, wheel),)
    first = node_runner.run_task(_task(nginx, tmp_path, teamlib, sent))
    width, prefix = _output(nginx, tmp_path, first).split()
    assert width == "3"
    assert Path(prefix).parent == node / "cache/python-envs"  # not the node's own interpreter
    assert (Path(prefix) / MANIFEST).is_file()
    assert first.notes[0].startswith("making the Python environment ")
    assert "installing 1 with pip" in first.notes[0]
    assert not list((node / "execroot").iterdir())  # its wheelhouse went with its execroot

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip ran for an environment the node has")

    monkeypatch.setattr(pip, "install", no_pip)
    # The remote cache lost the wheel: a node with the environment does not need it.
    (nginx.root / tmp_path.name / "cas" / sent[0].hash).unlink()
    second = node_runner.run_task(_task(nginx, tmp_path, teamlib, sent, out="other.txt"))
    assert _output(nginx, tmp_path, second) == f"3 {prefix}"
    assert second.notes == ()


def test_a_wheel_whose_bytes_are_not_the_locks_is_refused_naming_it_and_nothing_is_stored(
    nginx: NginxCache, tmp_path: Path, node: Path
) -> None:
    wheel, _ = make_wheel(tmp_path / "w", "teamlib", "1.0", {"teamlib/__init__.py": "WIDTH = 3"})
    _, locked = make_wheel(
        tmp_path / "lock", "teamlib", "1.0", {"teamlib/__init__.py": "WIDTH = 4"}
    )
    # The blob is intact (its digest is its bytes'), but not the wheel the lock pins.
    task = _task(nginx, tmp_path, locked, (_sent(nginx, tmp_path, wheel),))
    ended = node_runner.run_task(task)
    assert ended.result is None and ended.exit_code == -1
    assert ended.message.startswith("cannot make its Python environment on "), ended.message
    assert (
        ": cannot make the Python environment of 1 locked package (teamlib 1.0): "
        "pip could not install teamlib==1.0:\n"
    ) in ended.message
    assert "DO NOT MATCH THE HASHES" in ended.message and "Traceback" not in ended.message
    assert not (nginx.root / tmp_path.name / "ac").exists()
    assert not list((node / "cache/python-envs").glob(f"*/{MANIFEST}"))  # nothing half-made
    assert not list((node / "execroot").iterdir())


def test_a_wheel_damaged_in_the_remote_cache_is_refused(
    nginx: NginxCache, tmp_path: Path, node: Path
) -> None:
    wheel, teamlib = make_wheel(
        tmp_path / "w", "teamlib", "1.0", {"teamlib/__init__.py": "WIDTH = 3"}
    )
    sent = _sent(nginx, tmp_path, wheel, data=b"x" * wheel.stat().st_size)
    ended = node_runner.run_task(_task(nginx, tmp_path, teamlib, (sent,)))
    assert ended.result is None
    assert "a wheel from the remote cache is damaged" in ended.message, ended.message
    assert not (nginx.root / tmp_path.name / "ac").exists()
