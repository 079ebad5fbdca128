"""What a failed build takes back out of kiln-out/ (exec/withdraw.py)."""

from __future__ import annotations

from pathlib import Path

from kiln.action_graph import Action, ActionGraph, File
from kiln.exec.withdraw import unbuilt_owners, withdraw


def action(owner: str, outputs: list[str], inputs: tuple[str, ...] = ()) -> Action:
    return Action(
        owner=owner,
        mnemonic="Fake",
        argv=("true",),
        inputs=tuple(File(path) for path in inputs),
        outputs=tuple(File(path) for path in outputs),
    )


PACKAGE = action("//m:a_pt2", ["kiln-out/m/a_pt2.pt2"])
LOADER = action(
    "//m:a_pt2",
    ["kiln-out/m/a_pt2_loader/a.h", "kiln-out/m/a_pt2_loader/a.cc"],
    ("kiln-out/m/a_pt2.pt2",),
)
APP = action("//app:uses_a", ["kiln-out/app/uses_a"], ("kiln-out/m/a_pt2_loader/a.h",))
OTHER = action("//m:b_pt2", ["kiln-out/m/b_pt2.pt2"])


def place(root: Path, *actions: Action) -> None:
    for each in actions:
        for output in each.outputs:
            (root / output.path).parent.mkdir(parents=True, exist_ok=True)
            (root / output.path).write_text("built")


def test_the_failed_target_and_everything_downstream_are_unbuilt() -> None:
    graph = ActionGraph.of([PACKAGE, LOADER, APP, OTHER])
    assert unbuilt_owners(graph, [PACKAGE]) == {"//m:a_pt2", "//app:uses_a"}


def test_outputs_and_the_folders_left_empty_go_but_other_targets_stay(tmp_path: Path) -> None:
    place(tmp_path, PACKAGE, LOADER, APP, OTHER)
    gone = withdraw([PACKAGE, LOADER, APP, OTHER], {"//m:a_pt2", "//app:uses_a"}, tmp_path)
    assert gone == ["//app:uses_a", "//m:a_pt2"]
    out = tmp_path / "kiln-out"
    # The loader's folder held only its outputs: an empty one would still look placed.
    assert not (out / "m/a_pt2_loader").exists()
    assert not (out / "m/a_pt2.pt2").exists()
    assert not (out / "app").exists()
    assert (out / "m/b_pt2.pt2").read_text() == "built"
    assert out.is_dir()


def test_a_folder_holding_files_of_no_action_is_kept(tmp_path: Path) -> None:
    place(tmp_path, LOADER)
    (tmp_path / "kiln-out/m/a_pt2_loader/notes.txt").write_text("the user's")
    withdraw([LOADER], {"//m:a_pt2"}, tmp_path)
    assert sorted(p.name for p in (tmp_path / "kiln-out/m/a_pt2_loader").iterdir()) == ["notes.txt"]
