"""Driving `kiln` end to end on small temporary workspaces."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from kiln.cli import main

KILN = [sys.executable, "-m", "kiln"]


@dataclass
class Run:
    code: int
    out: str
    err: str

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
    env: dict[str, str]
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch

    def write(self, path: str, text: str) -> Path:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
        return target

    def kiln(self, *args: str, cwd: str = "") -> Run:
        """Run kiln in this process (fast); output captured."""
        self.capsys.readouterr()
        with self.monkeypatch.context() as m:
            m.chdir(self.root / cwd)
            code = main(list(args))
        captured = self.capsys.readouterr()
        return Run(code, captured.out, captured.err)

    def kiln_process(self, *args: str, **kwargs: object) -> subprocess.Popen[str]:
        """Start kiln as a separate process (for locks and kill tests)."""
        return subprocess.Popen(
            [*KILN, *args],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kwargs,  # type: ignore[call-overload]
        )

    def out(self, path: str) -> str:
        return (self.root / "kiln-out" / path).read_text()


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
    (root / "models").mkdir(parents=True)
    (root / "WORKSPACE").write_text("")
    (root / "models/BUILD").write_text(textwrap.dedent(build))
    for source in sources:
        shutil.copy(source, root / "models" / source.name)
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), HOME=str(cache.parent))
    return ModelWorkspace(root, env)
