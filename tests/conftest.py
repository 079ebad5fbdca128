"""Fixtures shared by every test: an isolated home, and temporary workspaces."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.kiln_workspace import MakeWorkspace, Workspace

# The fast tier's guard (-m "not torch"), how `pytest -n 2` splits the suite, and the
# check that no process the tests started outlives them.
pytest_plugins = ["tests.torch_tier", "tests.parallel", "tests.leftover_processes"]


def pytest_configure(config: pytest.Config) -> None:
    sigint_as_a_terminal_gives_it()
    hypothesis_without_timing()


def hypothesis_without_timing() -> None:
    """Property tests judge what is generated, never how fast: Hypothesis' deadline and its
    "input generation is slow" health check failed test_label on a loaded machine (two
    suites at once), where a 200 ms deadline says nothing about kiln."""
    from hypothesis import HealthCheck, settings

    settings.register_profile("kiln", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("kiln")


def sigint_as_a_terminal_gives_it() -> None:
    """A run started in the background by a non-interactive shell (`tools/test ... &` in a
    script, as landing scripts do) inherits SIGINT ignored, and so does every kiln the
    tests start: each Ctrl-C test then fails (three did in a landing run, none in CI).
    With a handler installed here, the test process takes Ctrl-C as a foreground job
    does, and its children start with SIGINT at its default (exec resets handled
    signals)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point HOME and XDG_CACHE_HOME at fresh directories: the real ~/.kilnrc and
    ~/.cache/kiln are never read or written by a test."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    return home


@pytest.fixture
def home(_isolated_home: Path) -> Path:
    """The test's home directory (where a ~/.kilnrc would go)."""
    return _isolated_home


@pytest.fixture
def make_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> MakeWorkspace:
    """make_workspace({path: text}) -> a workspace under tmp_path; WORKSPACE is added."""
    count = 0

    def make(files: dict[str, str]) -> Workspace:
        nonlocal count
        count += 1
        root = tmp_path / f"ws{count}"
        root.mkdir()
        workspace = Workspace(root, dict(os.environ), capsys, monkeypatch)
        for path, text in {"WORKSPACE": "", **files}.items():
            workspace.write(path, text)
        return workspace

    return make


@pytest.fixture
def ws(make_workspace: MakeWorkspace) -> Workspace:
    """An empty workspace (its WORKSPACE file only)."""
    return make_workspace({})
