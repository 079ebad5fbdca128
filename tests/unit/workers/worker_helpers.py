"""Helpers for the persistent-worker tests (conftest.py turns them into fixtures).

An action here is a file `kiln_test_action.py` written into a fresh execroot;
the worker puts the execroot first on sys.path, as `python -m` does with its
working directory, so `[python, -m, kiln_test_action, ...]` finds it.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kiln.workers import WorkRequest

ACTION = "kiln_test_action"


@dataclass(frozen=True)
class Execroot:
    path: Path

    @property
    def stdout(self) -> Path:
        return self.stdout_of("")

    @property
    def stderr(self) -> Path:
        return self.path.parent / f"{self.path.name}.stderr"

    def stdout_of(self, tag: str) -> Path:
        return self.path.parent / f"{self.path.name}{tag}.stdout"

    def request(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        module: str = ACTION,
        tag: str = "",
    ) -> WorkRequest:
        """A request to run the action; a tag gives it output files of its own."""
        return WorkRequest(
            argv=(sys.executable, "-m", module, *args),
            env=action_env() if env is None else env,
            cwd=str(self.path),
            stdout_path=str(self.stdout_of(tag)),
            stderr_path=str(self.path.parent / f"{self.path.name}{tag}.stderr"),
            timeout=timeout,
        )

    def out(self) -> str:
        return self.stdout.read_text()

    def err(self) -> str:
        return self.stderr.read_text()


def action_env(**extra: str) -> dict[str, str]:
    """A small, fixed environment, as the executor gives an action."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **extra}


MakeExecroot = Callable[..., Execroot]


def execroot_factory(tmp_path: Path) -> MakeExecroot:
    """make(source, name=None, **modules) -> a fresh execroot holding the action (+ modules)."""
    counter = iter(range(1000))

    def make(source: str, name: str | None = None, **modules: str) -> Execroot:
        root = tmp_path / (name or f"execroot{next(counter)}")
        root.mkdir()
        (root / f"{ACTION}.py").write_text(textwrap.dedent(source))
        for module, content in modules.items():
            (root / f"{module}.py").write_text(textwrap.dedent(content))
        return Execroot(root)

    return make
