"""A temporary kiln workspace for tests: files from a dict, kiln run in-process.

    ws = make_workspace({"pkg/BUILD": 'filegroup(name = "a")'})
    result = ws.kiln("query", "//...")
    assert result.code == 0 and result.out == "//pkg:a\n"

tests/conftest.py points HOME and XDG_CACHE_HOME at a fresh temporary
directory for every test, so the user's ~/.kilnrc and graph cache are never
read or written.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from kiln.cli import main
from kiln.cli.session import Session, StartupOptions
from kiln.loading.loader import PackageLoader
from kiln.loading.workspace import Workspace


def write_files(root: Path, files: dict[str, str]) -> None:
    """Create or replace files; text is dedented, so triple-quoted BUILD files read well."""
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def labels(self) -> list[str]:
        return self.out.splitlines()


@dataclass
class FixtureWorkspace:
    root: Path
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]

    def write(self, files: dict[str, str]) -> None:
        write_files(self.root, files)

    def kiln(self, *args: str, cwd: str = "") -> Result:
        """Run `kiln ARGS` in this process from `cwd` (relative to the root); capture its output."""
        self.capsys.readouterr()
        with self.monkeypatch.context() as patch:
            patch.chdir(self.root / cwd)
            code = main(list(args))
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def query(self, expression: str, *options: str, cwd: str = "") -> list[str]:
        """The labels `kiln query` prints; fails the test on any error."""
        result = self.kiln("query", *options, expression, cwd=cwd)
        assert result.code == 0, result.err
        return result.labels

    @property
    def graph_cache_file(self) -> Path:
        """Where `kiln` keeps this workspace's graph cache."""
        return Session.create(self.root, StartupOptions()).graph_cache_file

    def loader(self) -> PackageLoader:
        """A PackageLoader sharing the CLI's graph cache, as a fresh kiln process would make."""
        return PackageLoader(Workspace.find(self.root), self.graph_cache_file)


# The make_workspace fixture (tests/conftest.py): {path: text} -> a new workspace.
MakeWorkspace = Callable[[dict[str, str]], "FixtureWorkspace"]
