"""Third-party packages as declared, locked, hashed inputs: keys, environments, leaks.

A team's own wheel (`teamlib`, made on the spot) stands in for a library: two
versions of it, installed offline from a wheelhouse, into real environments,
by `kiln build` of model_weights targets (the cheapest torch action that
imports a model). The factories print their interpreter's prefix and their worker's pid,
which kiln shows as `INFO: From ModelWeights ...`: that is how these tests see
which environment, and which worker, ran what.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kiln.loading.package import RACY_NS

from tests.wheels import make_wheel

pytestmark = pytest.mark.torch

KILN = [sys.executable, "-m", "kiln"]

MODELS = """\
import os
import sys

import torch


def where() -> None:
    print(f"prefix={sys.prefix} pid={os.getppid()}")  # the worker: each action is its fork


def team() -> torch.nn.Module:
    import teamlib

    where()
    return torch.nn.Linear(2, teamlib.WIDTH)


def also_team() -> torch.nn.Module:
    import teamlib

    where()
    return torch.nn.Linear(3, teamlib.WIDTH)


def plain() -> torch.nn.Module:
    where()
    return torch.nn.Linear(2, 2)


def sneaky() -> torch.nn.Module:
    import teamlib  # not declared by its target

    return torch.nn.Linear(2, teamlib.WIDTH)
"""

BUILD = """\
model_weights(name = "team", src = "m.py", factory = "m:team", deps = ["@pip//teamlib"],
              out = "team.safetensors")
model_weights(name = "also_team", src = "m.py", factory = "m:also_team",
              deps = ["@pip//teamlib"], out = "also_team.safetensors")
model_weights(name = "plain", src = "m.py", factory = "m:plain", out = "plain.safetensors")
model_weights(name = "sneaky", src = "m.py", factory = "m:sneaky", out = "sneaky.safetensors",
              tags = ["manual"])
"""


@dataclass
class Run:
    code: int
    err: str

    def ran(self, label: str) -> bool:
        return f"ModelWeights {label} (" in self.err

    def prefixes(self) -> dict[str, tuple[str, str]]:
        """label -> (the prefix, the pid) its factory printed."""
        found = re.findall(r"INFO: From ModelWeights (\S+):\nprefix=(\S+) pid=(\d+)", self.err)
        return {label: (prefix, pid) for label, prefix, pid in found}


@dataclass
class TeamWorkspace:
    root: Path
    wheelhouse: Path
    env: dict[str, str]

    def lock(self, version: str) -> None:
        _, package = make_wheel(
            self.wheelhouse,
            "teamlib",
            version,
            {"teamlib/__init__.py": f"WIDTH = {3 if version == '1.0' else 4}\n"},
        )
        (self.root / "requirements_lock.txt").write_text(
            f"teamlib=={version} \\\n    --hash={package.hashes[0]}\n    # via -r requirements.in\n"
        )

    def build(self, *args: str) -> Run:
        done = subprocess.run(
            [*KILN, "build", f"--pip_find_links={self.wheelhouse}", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        return Run(done.returncode, done.stderr)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamWorkspace]:
    base = tmp_path_factory.mktemp("packages")
    root = base / "ws"
    (root / "m").mkdir(parents=True)
    (root / "WORKSPACE").write_text("")
    (root / "BUILD").write_text(
        'python_requirements(name = "pip", lock = "requirements_lock.txt")\n'
    )
    (root / "m/BUILD").write_text(BUILD)
    (root / "m/m.py").write_text(MODELS)
    env = dict(os.environ, XDG_CACHE_HOME=str(base / "cache"), HOME=str(base))
    workspace = TeamWorkspace(root, base / "wheelhouse", env)
    workspace.lock("1.0")
    first = workspace.build("//m/...")
    assert first.code == 0, first.err
    # Two environments, made once each: teamlib's closure, and the toolchain alone.
    assert first.err.count("INFO: making the Python environment ") == 2, first.err
    assert "INFO:   [1/1] teamlib-1.0\n" in first.err
    yield workspace


def test_targets_with_other_packages_never_share_an_interpreter(
    team: TeamWorkspace,
) -> None:
    # New keys (another environment variable), the same Python environments.
    run = team.build("//m/...", "--action_env=ROUND=2", "--worker_max_instances=1")
    assert run.code == 0, run.err
    assert "making the Python environment" not in run.err
    seen = run.prefixes()
    assert seen["//m:team"][0] == seen["//m:also_team"][0]  # one closure, one environment
    assert seen["//m:team"][0] != seen["//m:plain"][0]
    assert seen["//m:team"][1] != seen["//m:plain"][1]  # and not one worker either
    # One worker per environment here: the two teamlib targets shared it.
    assert seen["//m:team"][1] == seen["//m:also_team"][1]
    for prefix, _ in seen.values():
        assert not prefix.startswith(sys.prefix), "ran in kiln's own virtualenv"


def test_an_undeclared_package_cannot_be_imported_and_the_error_says_what_to_declare(
    team: TeamWorkspace,
) -> None:
    run = team.build("//m:sneaky")
    assert run.code == 1
    assert (
        "m/m.py:31: the factory m:sneaky raised ModuleNotFoundError: No module named "
        "'teamlib'\n"
        "  hint: if 'teamlib' is a third-party package, lock it and add \"@pip//teamlib\" "
        "(its distribution's name) to the target's deps (it declares no packages); "
        "if it is a file of the workspace, add teamlib.py (or its folder's files) to deps"
    ) in run.err


def test_a_new_version_rebuilds_only_its_declarers_and_explain_names_both_versions(
    team: TeamWorkspace,
) -> None:
    assert team.build("//m/...").code == 0
    team.lock("1.1")
    try:
        run = team.build("//m/...", "--explain")
        assert run.code == 0, run.err
        assert run.ran("//m:team") and run.ran("//m:also_team")
        assert not run.ran("//m:plain")
        assert (
            "EXPLAIN: ModelWeights //m:team: python package changed: teamlib 1.0 -> 1.1" in run.err
        )
        assert "EXPLAIN: ModelWeights //m:plain" not in run.err
        same = team.build("//m/...", "--explain")
        assert same.code == 0 and "EXPLAIN" not in same.err
        assert "0 executed" in same.err
    finally:
        team.lock("1.0")


def test_a_wheel_missing_from_the_wheelhouse_fails_naming_it_and_leaves_no_environment(
    team: TeamWorkspace,
) -> None:
    team.lock("2.0")
    wheel = team.wheelhouse / "teamlib-2.0-py3-none-any.whl"
    hidden = wheel.rename(wheel.with_suffix(".hidden"))
    try:
        run = team.build("//m:team")
        assert run.code == 1
        assert "cannot make the Python environment of 1 locked package (teamlib 2.0): " in run.err
        assert "pip could not install teamlib==2.0:\n    ERROR: " in run.err
        hidden.rename(wheel)
        assert team.build("//m:team").code == 0  # nothing half-made was left to trip over
    finally:
        if hidden.exists():
            hidden.rename(wheel)
        team.lock("1.0")


def test_action_env_pythonpath_is_refused_with_what_to_do(team: TeamWorkspace) -> None:
    run = team.build("//m:plain", "--action_env=PYTHONPATH=/somewhere")
    assert run.code == 1
    assert run.err.startswith(
        "ERROR: --action_env=PYTHONPATH is refused: actions would import code kiln does not "
        "track, and their keys would not change when it does\n"
        "  hint: declare the Python files a model imports in its target's deps"
    ), run.err


def test_a_noop_build_imports_neither_torch_nor_pip_machinery(team: TeamWorkspace) -> None:
    time.sleep(RACY_NS / 1e9 + 0.1)  # the lock just written back is never trusted: let it age
    assert team.build("//m/...").code == 0
    script = textwrap.dedent(
        f"""
        import sys
        from kiln.cli import main
        code = main(["build", "//m/...", "--pip_find_links={team.wheelhouse}"])
        heavy = [m for m in ("torch", "pydantic", "pip", "packaging", "kiln.pyenv",
                             "importlib.metadata") if m in sys.modules]
        print(code, heavy)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=team.root,
        env=team.env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split("\n")[-2] == "0 []", done.stdout + done.stderr
