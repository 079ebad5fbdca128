"""What a sandbox shows: the toolchain without what must stay hidden; an action's binds."""

from __future__ import annotations

import sys
from pathlib import Path

from kiln.sandbox.view import Bind, SandboxConfig, action_binds, toolchain_dirs


def test_the_toolchain_holds_the_system_and_this_interpreter() -> None:
    shown = toolchain_dirs([])
    assert "/usr" in shown
    assert any(Path(sys.prefix).resolve().is_relative_to(p) for p in map(Path, shown))


def test_no_toolchain_directory_shows_a_hidden_one(tmp_path: Path) -> None:
    """A directory holding the workspace (or the output base) is left out: the workspace
    shows only what an action declares."""
    hidden = Path(sys.prefix).resolve().parent  # say the workspace were the venv's parent
    shown = toolchain_dirs([hidden / "ws"])
    assert not any((hidden / "ws").is_relative_to(p) for p in map(Path, shown) if p != Path("/"))
    assert "/" not in shown


def test_an_actions_binds_are_its_execroot_and_its_inputs_read_only(tmp_path: Path) -> None:
    source = tmp_path / "ws/pkg/in.txt"
    source.parent.mkdir(parents=True)
    source.write_text("x")
    root = tmp_path / "execroot"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/in.txt").symlink_to(source)
    (root / "kiln-out").mkdir()
    (root / "kiln-out/gen.txt").write_text("generated")
    assert action_binds(root, ["pkg/in.txt", "kiln-out/gen.txt"]) == [
        Bind(str(root), str(root), writable=True),
        Bind(str(source), str(source)),
        Bind(str(root / "kiln-out/gen.txt"), str(root / "kiln-out/gen.txt")),
    ]


def test_a_config_survives_json() -> None:
    config = SandboxConfig(("/usr",), (Bind("/a", "/tmp/a", writable=True),), "/s")
    assert SandboxConfig.from_json(config.to_json()) == config
