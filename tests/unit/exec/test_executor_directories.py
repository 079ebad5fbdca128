"""Directory outputs: collected whole, cached, used by later actions, no stale files."""

from __future__ import annotations

from pathlib import Path

from kiln.action_graph import Action, File

from tests.unit.exec.test_executor_strategies import _executor

PRODUCE = (
    "/bin/bash",
    "-c",
    "for i in $(seq 1 $(cat app/count.txt)); do echo $i > kiln-out/app/parts/part$i.txt; done",
)
CONSUME = ("/bin/bash", "-c", "cat kiln-out/app/parts/*.txt > kiln-out/app/all.txt")


def _produce() -> Action:
    return Action(
        owner="//app:parts",
        mnemonic="Split",
        argv=PRODUCE,
        inputs=(File("app/count.txt"),),
        outputs=(File("kiln-out/app/parts", directory=True),),
    )


def _consume() -> Action:
    return Action(
        owner="//app:all",
        mnemonic="Join",
        argv=CONSUME,
        inputs=(File("kiln-out/app/parts", directory=True),),
        outputs=(File("kiln-out/app/all.txt"),),
    )


def test_directory_output_flows_into_the_next_action_and_stale_files_go(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "app").mkdir(parents=True)
    (root / "app/count.txt").write_text("3")
    executor = _executor(tmp_path, "local")
    assert executor.execute(_produce(), "l").status == "executed"
    assert executor.execute(_consume(), "l").status == "executed"
    assert (root / "kiln-out/app/all.txt").read_text() == "1\n2\n3\n"
    assert sorted(p.name for p in (root / "kiln-out/app/parts").iterdir()) == [
        "part1.txt",
        "part2.txt",
        "part3.txt",
    ]

    (root / "app/count.txt").write_text("2")
    again = _executor(tmp_path, "local")
    assert again.execute(_produce(), "l").status == "executed"
    assert again.execute(_consume(), "l").status == "executed"
    assert (root / "kiln-out/app/all.txt").read_text() == "1\n2\n"
    assert sorted(p.name for p in (root / "kiln-out/app/parts").iterdir()) == [
        "part1.txt",
        "part2.txt",
    ]

    (root / "app/count.txt").write_text("3")
    third = _executor(tmp_path, "local")
    hit = third.execute(_produce(), "l")
    assert hit.status == "cached"
    assert third.execute(_consume(), "l").status == "cached"
    assert len(list((root / "kiln-out/app/parts").iterdir())) == 3


def test_missing_output_directory_fails(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "app").mkdir(parents=True)
    (root / "app/count.txt").write_text("1")
    action = Action(
        owner="//app:parts",
        mnemonic="Split",
        argv=("/bin/bash", "-c", "rmdir kiln-out/app/parts"),
        inputs=(File("app/count.txt"),),
        outputs=(File("kiln-out/app/parts", directory=True),),
    )
    outcome = _executor(tmp_path, "local").execute(action, "l")
    assert outcome.status == "failed"
    assert outcome.failure is not None
    assert "kiln-out/app/parts" in outcome.failure.message
