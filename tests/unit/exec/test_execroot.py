"""A reused execroot holds exactly what a fresh one would: nothing an earlier action left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kiln.action_graph import Action, File
from kiln.cache.cas import ContentStore
from kiln.exec.execroot import Execroots, InputUnavailable


@pytest.fixture
def execroots(tmp_path: Path) -> Execroots:
    workspace = tmp_path / "ws"
    for path in ("a/src.txt", "b/deep/src.txt", "tools/tool.py"):
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(path)
    return Execroots(tmp_path / "base", workspace, ContentStore(tmp_path / "cache"))


def _tree(root: Path) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            found.add(os.path.relpath(os.path.join(dirpath, name), root))
    return found


def _paths(action: Action) -> list[str]:
    return [f.path for f in action.inputs]


def _action(inputs: tuple[str, ...], output: str) -> Action:
    return Action("//x:y", "Test", ("true",), tuple(map(File, inputs)), (File(output),))


def test_a_reused_execroot_holds_only_the_next_actions_inputs(
    execroots: Execroots, tmp_path: Path
) -> None:
    blob = execroots.cas.put_bytes(b"generated")
    first = _action(("a/src.txt", "tools/tool.py", "kiln-out/c/gen.txt"), "kiln-out/a/out.txt")
    root = execroots.create(first, "k1", dict.fromkeys(_paths(first), blob))
    # What an action leaves behind: outputs, temp files, directories of its own.
    (root / "kiln-out/a/out.txt").write_text("out")
    (root / ".tmp/stdout").write_text("log")
    (root / "a/made/by/action").mkdir(parents=True)
    (root / "tools/extra.txt").write_text("x")
    (root / "stray").symlink_to(tmp_path)
    tool_link = os.lstat(root / "tools/tool.py")
    execroots.release(root)

    second = _action(("b/deep/src.txt", "tools/tool.py"), "kiln-out/b/out.txt")
    again = execroots.create(second, "k2", dict.fromkeys(_paths(second), blob))
    assert again == root  # reused
    assert _tree(again) == {
        ".tmp",
        "b",
        "b/deep",
        "b/deep/src.txt",
        "tools",
        "tools/tool.py",
        "kiln-out",
        "kiln-out/b",
    }
    assert (again / "b/deep/src.txt").read_text() == "b/deep/src.txt"
    # A source both actions read keeps its symlink.
    assert os.path.samestat(os.lstat(again / "tools/tool.py"), tool_link)
    execroots.release(again)
    execroots.close()
    assert not execroots.base.exists() or list(execroots.base.iterdir()) == []


def test_two_actions_at_once_get_two_execroots(execroots: Execroots) -> None:
    action = _action(("a/src.txt",), "kiln-out/a/out.txt")
    one = execroots.create(action, "k", {"a/src.txt": execroots.cas.put_bytes(b"")})
    two = execroots.create(action, "k", {"a/src.txt": execroots.cas.put_bytes(b"")})
    assert one != two
    execroots.release(one)
    execroots.release(two)
    execroots.close()
    assert list(execroots.base.iterdir()) == []


def test_an_input_blob_gone_during_the_build_is_put_back_from_kiln_out(
    execroots: Execroots,
) -> None:
    """Issue 11 B2: a concurrent collection or expunge of a shared cache removed a blob
    an action was about to read."""
    blob = execroots.cas.put_bytes(b"generated")
    kept = execroots.workspace_root / "kiln-out/c/gen.txt"
    execroots.cas.materialize(blob, kept)
    execroots.cas.path(blob).unlink()
    action = _action(("kiln-out/c/gen.txt",), "kiln-out/a/out.txt")
    root = execroots.create(action, "k", {"kiln-out/c/gen.txt": blob})
    assert (root / "kiln-out/c/gen.txt").read_bytes() == b"generated"
    assert execroots.cas.intact(blob)


def test_an_input_blob_nothing_can_restore_fails_naming_the_input(
    execroots: Execroots,
) -> None:
    blob = execroots.cas.put_bytes(b"generated")
    execroots.cas.path(blob).unlink()  # and kiln-out/ never held it
    action = _action(("a/src.txt", "kiln-out/c/gen.txt"), "kiln-out/a/out.txt")
    with pytest.raises(
        InputUnavailable, match=r"its input kiln-out/c/gen\.txt left the disk cache"
    ):
        execroots.create(action, "k", {"a/src.txt": blob, "kiln-out/c/gen.txt": blob})
    assert len(execroots._free) == 1  # the half-made execroot went back to the pool
