"""A library bump that leaves the exported program alone re-runs the export, nothing after it.

The actions after TorchExport load the program, not the model: they are keyed
on the export's record of what loading it imports (<name>.needs.json), not on
every locked package of the model's environment. `teamlib` (a wheel made on the
spot) stands in for timm: 1.0 -> 1.1 keeps the model's graph (WIDTH stays 3),
2.0 changes it (WIDTH 4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.wheels import make_wheel

pytestmark = pytest.mark.torch

MODEL = """\
import torch
import teamlib


def build() -> torch.nn.Module:
    return torch.nn.Linear(4, teamlib.WIDTH)
"""

BUILD = """\
torch_model(
    name = "team",
    src = "m.py",
    factory = "m:build",
    deps = ["@pip//teamlib"],
    inputs = [{"name": "x", "shape": [2, 4], "dtype": "float32"}],
)

aoti_package(name = "team_pt2", model = ":team")
"""

AFTER_EXPORT = ("AotiCompile", "AotiJoin", "AotiValidate")


@dataclass
class Build:
    code: int
    err: str
    events: list[dict[str, object]]

    def status(self, mnemonic: str) -> str:
        (status,) = [
            str(e["status"])
            for e in self.events
            if e.get("type") == "action_finished" and e.get("mnemonic") == mnemonic
        ]
        return status


@dataclass
class Team:
    root: Path
    wheelhouse: Path
    env: dict[str, str]

    def lock(self, version: str, width: int) -> None:
        _, package = make_wheel(
            self.wheelhouse, "teamlib", version, {"teamlib/__init__.py": f"WIDTH = {width}\n"}
        )
        (self.root / "requirements_lock.txt").write_text(
            f"teamlib=={version} \\\n    --hash={package.hashes[0]}\n    # via -r requirements.in\n"
        )

    def build(self, *flags: str) -> Build:
        events = self.root.parent / "events.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kiln",
                "build",
                "//m:team_pt2",
                "--explain",
                f"--pip_find_links={self.wheelhouse}",
                f"--build_event_json_file={events}",
                *flags,
            ],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        lines = events.read_text().splitlines() if events.exists() else []
        return Build(done.returncode, done.stderr, [json.loads(line) for line in lines])

    @property
    def environments(self) -> Path:
        return Path(self.env["XDG_CACHE_HOME"]) / "kiln" / "python-envs"

    def needs(self) -> dict[str, object]:
        loaded: dict[str, object] = json.loads(
            (self.root / "kiln-out/m/team_pt2.needs.json").read_text()
        )
        return loaded


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    base = tmp_path_factory.mktemp("bump")
    root = base / "ws"
    (root / "m").mkdir(parents=True)
    (root / "WORKSPACE").write_text("")
    (root / "BUILD").write_text(
        'python_requirements(name = "pip", lock = "requirements_lock.txt")\n'
    )
    (root / "m/BUILD").write_text(BUILD)
    (root / "m/m.py").write_text(MODEL)
    env = dict(os.environ, XDG_CACHE_HOME=str(base / "cache"), HOME=str(base))
    workspace = Team(root, base / "wheelhouse", env)
    workspace.lock("1.0", width=3)
    first = workspace.build()
    assert first.code == 0, first.err
    yield workspace


def test_a_bump_that_keeps_the_graph_reruns_only_the_export(team: Team) -> None:
    # The program's inputs and outputs are plain tensors: loading it imports nothing of
    # teamlib, and the record says so.
    assert team.needs()["packages"] == [] and team.needs()["modules"] == []
    team.lock("1.1", width=3)
    run = team.build()
    assert run.code == 0, run.err
    assert run.status("TorchExport") == "executed"
    assert [run.status(m) for m in AFTER_EXPORT] == ["cached"] * 3
    # Why the export ran, and nothing else: not "command changed" besides.
    (why,) = [line for line in run.err.splitlines() if line.startswith("EXPLAIN:")]
    assert why == "EXPLAIN: TorchExport //m:team_pt2: python package changed: teamlib 1.0 -> 1.1"


def test_a_bump_that_changes_the_graph_reruns_everything(team: Team) -> None:
    team.lock("2.0", width=4)
    run = team.build()
    assert run.code == 0, run.err
    assert [run.status(m) for m in ("TorchExport", *AFTER_EXPORT)] == ["executed"] * 4
    assert (
        "EXPLAIN: AotiCompile //m:team_pt2: input changed: kiln-out/m/team_pt2.structure.pt2"
    ) in run.err


def test_a_build_collects_the_environments_of_old_pins_but_not_the_one_it_uses(
    team: Team,
) -> None:
    """Environments are the disk cache's: --disk_cache_max_size removes the least recently
    used whole (issue 20: 90-250 MB each, never collected), never one a build uses."""
    team.lock("3.0", width=4)
    assert team.build().code == 0
    assert len(list(team.environments.glob("*/kiln-env.json"))) >= 2  # 3.0's and older
    for in_use in team.environments.glob("*.in-use"):  # as if all were used an hour ago
        os.utime(in_use, (time.time() - 3600, time.time() - 3600))
    # New keys (an environment variable): the actions run, in 3.0's environment.
    run = team.build("--action_env=ROUND=gc", "--disk_cache_max_size=1")
    assert run.code == 0, run.err
    assert run.status("AotiCompile") == "executed"
    (kept,) = team.environments.glob("*/kiln-env.json")
    assert "teamlib==3.0 " in kept.read_text()
