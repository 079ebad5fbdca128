"""Real Bazel (Debian's 4.2.3) on kiln's rules, for the tests.

`ensure_bazel()` installs it through the project's script (tools/bazel.sh)
where it is missing (tools/test does so before pytest), and skips the test,
saying why, only where it cannot be installed; with KILN_REQUIRE_BAZEL set
(CI's .ci/run) that is a failure instead. A `Bazel` runs in one workspace with
all of its state in a folder of the test (`--output_user_root`) and no
~/.bazelrc; `shutdown()` stops its server (`bazel shutdown` under that root),
which every fixture does when done. Actions run the test session's
interpreter (KILN_PYTHON), so the venv's path never matters.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tools" / "bazel.sh"
# Never copied into a test's copy of the repository: state, caches, build outputs.
_SKIP = {".git", ".venv", "kiln-out", "__pycache__", ".mypy_cache", ".ruff_cache"}
_SKIP |= {".pytest_cache", ".hypothesis", "user.bazelrc", "gpu-check-out", ".device", ".whl"}
_SKIP |= {".wheelhouse"}  # filled by test_models_from_libraries, maybe meanwhile (-n 2)


def ensure_bazel() -> str:
    """The bazel binary, installed with tools/bazel.sh if missing; else the test is skipped."""
    run = subprocess.run(
        ["bash", str(SCRIPT), "install"], capture_output=True, text=True, check=False
    )
    if run.returncode != 0 or not run.stdout.strip():
        why = run.stderr.strip() or "tools/bazel.sh install printed nothing"
        if os.environ.get("KILN_REQUIRE_BAZEL"):  # CI (.ci/run): these tests must run
            pytest.fail(f"Bazel is required (KILN_REQUIRE_BAZEL) but cannot be installed: {why}")
        pytest.skip(f"Bazel is not installed and cannot be installed here: {why}")
    return run.stdout.strip().splitlines()[-1]


def copy_repository(target: Path) -> Path:
    """The kiln repository's files (sources, BUILD files, Starlark, stubs) under `target`."""

    def ignore(directory: str, names: list[str]) -> list[str]:
        del directory
        return [n for n in names if n in _SKIP or n.startswith("bazel-") or n.endswith(".egg-info")]

    shutil.copytree(REPO, target, symlinks=True, ignore=ignore)
    shutil.rmtree(target / "bench" / "out", ignore_errors=True)
    return target


@dataclass
class Result:
    code: int
    out: str
    err: str

    def processes(self, kind: str) -> int:
        """From `INFO: 17 processes: 9 remote cache hit, 8 internal.`: how many of `kind`."""
        for line in reversed(self.err.splitlines()):
            if " processes: " in line:
                found = re.search(rf"(\d+) {re.escape(kind)}", line)
                return int(found.group(1)) if found else 0
        raise AssertionError(f"no process summary in:\n{self.err[-3000:]}")


@dataclass
class Bazel:
    """`bazel` in `workspace`, its output base under `user_root`."""

    binary: str
    workspace: Path
    user_root: Path
    env: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def at(workspace: Path, user_root: Path, home: Path) -> Bazel:
        home.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "KILN_PYTHON": sys.executable,
            "LANG": "C.UTF-8",
        }
        return Bazel(ensure_bazel(), workspace, user_root, env)

    def __call__(self, *args: str, timeout: float = 1200) -> Result:
        argv = [self.binary, f"--output_user_root={self.user_root}", "--nohome_rc", *args]
        done = subprocess.run(
            argv,
            cwd=self.workspace,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def build(self, *args: str, timeout: float = 1200) -> Result:
        return self("build", "--color=no", "--curses=no", *args, timeout=timeout)

    def ok(self, *args: str, timeout: float = 1200) -> Result:
        """`bazel ARGS`, which must succeed."""
        result = self(*args, timeout=timeout)
        assert result.code == 0, f"bazel {' '.join(args)} failed:\n{result.err[-6000:]}"
        return result

    @property
    def bin(self) -> Path:
        """bazel-bin, without the convenience link (`bazel info bazel-bin`)."""
        return Path(self.ok("info", "bazel-bin").out.strip())

    def shutdown(self) -> None:
        if self.user_root.exists():
            self("shutdown", timeout=120)
