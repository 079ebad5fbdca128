"""Driving `kiln` end to end on small temporary workspaces."""

from __future__ import annotations

import re
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
