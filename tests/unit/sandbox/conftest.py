"""A workspace with a secret, an execroot made the way Execroots makes them, a sandbox."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kiln.sandbox.client import Sandbox, SandboxUnavailable
from kiln.sandbox.view import Bind, SandboxConfig, action_binds, toolchain_dirs


@dataclass(frozen=True)
class Layout:
    workspace: Path
    base: Path  # the output base: execroots and the sandbox's staging directory
    shared: Path  # a writable directory shown at /tmp/shared (as the torch state is)

    def execroot(self, name: str, sources: dict[str, str]) -> tuple[Path, list[str]]:
        """An execroot holding `sources` (path -> text) as symlinks to the workspace."""
        root = self.base / "execroot" / name
        (root / ".tmp").mkdir(parents=True)
        for path, text in sources.items():
            (self.workspace / path).parent.mkdir(parents=True, exist_ok=True)
            (self.workspace / path).write_text(text)
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).symlink_to(self.workspace / path)
        return root, list(sources)

    def binds(self, root: Path, inputs: list[str]) -> list[Bind]:
        return action_binds(root, inputs)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "secret.txt").write_text("undeclared\n")
    (tmp_path / "shared").mkdir()
    return Layout(workspace, tmp_path / "base", tmp_path / "shared")


@pytest.fixture
def sandbox(layout: Layout) -> Iterator[Sandbox]:
    config = SandboxConfig(
        toolchain=toolchain_dirs([layout.workspace, layout.base]),
        binds=(Bind(str(layout.shared), "/tmp/shared", writable=True),),
        staging=str(layout.base / "sandbox"),
        scratch=(str(layout.workspace), str(layout.base / "execroot")),
    )
    try:
        started = Sandbox.start(sys.executable, config)
    except SandboxUnavailable as error:  # pragma: no cover - namespaces work here and in CI
        pytest.skip(f"no user namespaces here: {error.message}")
    yield started
    started.close()
