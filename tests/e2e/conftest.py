"""Fixtures for driving `kiln build` end to end on small temporary workspaces."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Workspace


@pytest.fixture
def ws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Workspace]:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "WORKSPACE").write_text("")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(tmp_path / "cache"))
    yield Workspace(root, env, capsys, monkeypatch)
