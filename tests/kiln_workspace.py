"""Temporary kiln workspaces for tests: kiln in this process, kiln as a child process.

    ws = make_workspace({"pkg/BUILD": 'filegroup(name = "a")'})   # or the `ws` fixture
    ws.write("pkg/x.txt", "hello\\n")
    run = ws.kiln("build", "//pkg:a")          # in-process, output captured: a Run
    assert run.code == 0 and run.executed == 1 and run.hits == 0, run.err
    assert ws.query("//...") == ["//pkg:a"]
    ws.out("pkg/x.txt")                          # a file of kiln-out/
    ws.kiln_process("build", "//pkg:a")          # a child `kiln` (locks, signals, kills)

tests/conftest.py gives every test a fresh HOME and XDG_CACHE_HOME (so the
user's ~/.kilnrc and caches are never read or written); a workspace's `env` is
that environment, for the processes it starts.

ModelWorkspace is for torch models shared by the tests of a module: no
in-process kiln (module-scoped, so no capsys), each build a child `kiln build`
whose build events are read back.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from kiln.cli import main
from kiln.cli.session import Session, StartupOptions
from kiln.loading import workspace as loading_workspace
from kiln.loading.loader import PackageLoader

KILN = [sys.executable, "-m", "kiln"]


def write_file(root: Path, path: str, text: str) -> Path:
    """Create or replace root/path; text is dedented, so triple-quoted BUILD files read well."""
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(textwrap.dedent(text))
    return target


@dataclass(frozen=True)
class Run:
    """What one `kiln` command did."""

    code: int
    out: str
    err: str

    @property
    def labels(self) -> list[str]:
        return self.out.splitlines()

    @property
    def executed(self) -> int:
        return _count(self.err, "executed")

    @property
    def hits(self) -> int:
        return _count(self.err, "cache hits")


def _count(text: str, what: str) -> int:
    """A number from the summary line: 'INFO: 4 actions: 1 cache hits, 3 executed (3 local)'."""
    for line in text.splitlines():
        if line.startswith("INFO:") and " actions: " in line:
            found = re.search(rf"(\d+) {what}", line)
            return int(found.group(1)) if found else 0
    raise AssertionError(f"no summary line in:\n{text}")


@dataclass
class Workspace:
    root: Path
    env: dict[str, str]  # for the processes it starts: the test's HOME and caches
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch

    def write(self, path: str, text: str) -> Path:
        """Create or replace a file of the workspace; text is dedented."""
        return write_file(self.root, path, text)

    def kiln(self, *args: str, cwd: str = "") -> Run:
        """Run `kiln ARGS` in this process from `cwd` (relative to the root); capture its output."""
        self.capsys.readouterr()
        with self.monkeypatch.context() as patch:
            patch.chdir(self.root / cwd)
            code = main(list(args))
        captured = self.capsys.readouterr()
        return Run(code, captured.out, captured.err)

    def kiln_process(self, *args: str, **kwargs: object) -> subprocess.Popen[str]:
        """Start `kiln ARGS` as a separate process (for locks, signals and kills)."""
        return subprocess.Popen(
            [*KILN, *args],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kwargs,  # type: ignore[call-overload]
        )

    def query(self, expression: str, *options: str, cwd: str = "") -> list[str]:
        """The labels `kiln query` prints; fails the test on any error."""
        run = self.kiln("query", *options, expression, cwd=cwd)
        assert run.code == 0, run.err
        return run.labels

    def out(self, path: str) -> str:
        """A file of kiln-out/."""
        return (self.root / "kiln-out" / path).read_text()

    def copy(self, name: str) -> Workspace:
        """A copy of the sources (not kiln-out/) beside this workspace, in the same environment."""
        root = self.root.parent / name
        shutil.copytree(self.root, root, ignore=shutil.ignore_patterns("kiln-out"))
        return Workspace(root, self.env, self.capsys, self.monkeypatch)

    @property
    def disk_cache(self) -> Path:
        """The default disk cache of `kiln` run here."""
        return Path(self.env["XDG_CACHE_HOME"]) / "kiln"

    @property
    def graph_cache_file(self) -> Path:
        """Where `kiln` keeps this workspace's graph cache."""
        return Session.create(self.root, StartupOptions()).graph_cache_file

    def loader(self) -> PackageLoader:
        """A PackageLoader sharing the CLI's graph cache, as a fresh kiln process would make."""
        return PackageLoader(loading_workspace.Workspace.find(self.root), self.graph_cache_file)


# The make_workspace fixture (tests/conftest.py): {path: text} -> a new workspace.
MakeWorkspace = Callable[[dict[str, str]], Workspace]


# -- model workspaces: kiln in a child process, with build events -----------------------------


@dataclass
class BuildResult:
    code: int
    err: str
    events: list[dict[str, object]]

    def caches(self) -> set[object]:
        """Where the results came from: the `cache` field of every finished action."""
        return {e["cache"] for e in self.events if e.get("type") == "action_finished"}

    def actions(self, mnemonic: str) -> list[str]:
        """Statuses of the actions with this mnemonic: executed, cached or failed."""
        return [
            str(e["status"])
            for e in self.events
            if e.get("type") == "action_finished" and e.get("mnemonic") == mnemonic
        ]


@dataclass
class ModelWorkspace:
    """A workspace of torch models, shared by the tests of a module (so is its disk cache):
    each build is a child `kiln build` whose build events are read back."""

    root: Path
    env: dict[str, str]

    def build(self, *args: str, interpreter: str = sys.executable) -> BuildResult:
        """`interpreter`: kiln run by another Python (issue 11 C1: a venv at another path)."""
        events = self.root.parent / "events.json"
        done = subprocess.run(
            [interpreter, "-m", "kiln", "build", *args, f"--build_event_json_file={events}"],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        lines = events.read_text().splitlines() if events.exists() else []
        return BuildResult(done.returncode, done.stderr, [json.loads(line) for line in lines])

    def python(self, script: str, *args: str) -> str:
        """Runs a Python script in the workspace (a fresh process); returns its stdout."""
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script), *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


def model_workspace(root: Path, cache: Path, build: str, sources: list[Path]) -> ModelWorkspace:
    """models/BUILD from `build`, and `sources` copied into models/."""
    write_file(root, "WORKSPACE", "")
    write_file(root, "models/BUILD", build)
    for source in sources:
        shutil.copy(source, root / "models" / source.name)
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), HOME=str(cache.parent))
    return ModelWorkspace(root, env)
