"""An action's outputs enter the CAS by hard link, never at the expense of another file;
execroots are gone once the executor shuts down."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from kiln.action_graph import Action, File

from tests.unit.exec.test_executor_strategies import _executor


def _genrule(name: str, script: str, inputs: tuple[File, ...] = ()) -> Action:
    return Action(
        owner=f"//app:{name}",
        mnemonic="Genrule",
        argv=("/bin/bash", "-c", script),
        inputs=inputs,
        outputs=(File(f"kiln-out/app/{name}.txt"),),
        env=(("PATH", "/usr/bin:/bin"),),
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "app").mkdir(parents=True)
    (root / "app/src.txt").write_text("source\n")
    return root


def test_an_output_is_linked_into_the_cas_not_copied(workspace: Path, tmp_path: Path) -> None:
    executor = _executor(tmp_path, "local")
    try:
        outcome = executor.execute(_genrule("out", "echo made > $PWD/kiln-out/app/out.txt"), "l")
    finally:
        executor.shutdown()
    assert outcome.status == "executed", outcome.failure
    delivered = os.stat(workspace / "kiln-out/app/out.txt")
    blob = os.stat(executor.cas.path(executor.outputs.digest("kiln-out/app/out.txt")))
    assert os.path.samestat(delivered, blob)
    # The action's own file, the blob and kiln-out/: one inode, three names, until
    # the execroot went.
    assert blob.st_nlink == 2
    assert stat.S_IMODE(blob.st_mode) == 0o444


def test_an_output_with_another_name_is_copied_and_that_name_keeps_its_mode(
    workspace: Path, tmp_path: Path
) -> None:
    keep = tmp_path / "keep.txt"
    # Writing outside its execroot is what the sandbox forbids; this action must.
    executor = _executor(tmp_path, "local", sandbox=False)
    try:
        outcome = executor.execute(
            _genrule("out", f"echo made > kiln-out/app/out.txt && ln kiln-out/app/out.txt {keep}"),
            "l",
        )
    finally:
        executor.shutdown()
    assert outcome.status == "executed", outcome.failure
    assert stat.S_IMODE(keep.stat().st_mode) == 0o644
    blob = executor.cas.path(executor.outputs.digest("kiln-out/app/out.txt"))
    assert not os.path.samestat(keep.stat(), blob.stat())
    assert blob.read_text() == "made\n"


def test_a_symlink_output_is_stored_by_content_and_its_target_keeps_its_mode(
    workspace: Path, tmp_path: Path
) -> None:
    target = workspace / "app/src.txt"
    target.chmod(0o644)
    executor = _executor(tmp_path, "local")
    try:
        outcome = executor.execute(
            _genrule("link", f"ln -s {target} kiln-out/app/link.txt", (File("app/src.txt"),)), "l"
        )
    finally:
        executor.shutdown()
    assert outcome.status == "executed", outcome.failure
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    delivered = workspace / "kiln-out/app/link.txt"
    assert not delivered.is_symlink()
    assert delivered.read_text() == "source\n"


def test_execroots_are_gone_after_shutdown(workspace: Path, tmp_path: Path) -> None:
    executor = _executor(tmp_path, "local")
    try:
        for i in range(5):
            script = f"mkdir -p deep/er/still && echo {i} > kiln-out/app/n{i}.txt"
            action = Action(
                owner=f"//app:n{i}",
                mnemonic="Genrule",
                argv=("/bin/bash", "-c", script),
                inputs=(File("app/src.txt"),),
                outputs=(File(f"kiln-out/app/n{i}.txt"),),
            )
            assert executor.execute(action, "l").status == "executed"
    finally:
        executor.shutdown()
    assert list(executor.execroots.base.iterdir()) == []
    assert (workspace / "kiln-out/app/n4.txt").read_text() == "4\n"
