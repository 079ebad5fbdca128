"""Loading and query stay light: never torch; with a warm graph cache, not even
starlark, pydantic or the rule catalogue. Checked in a fresh interpreter each time."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from kiln.loading.package import RACY_NS

from tests.kiln_workspace import MakeWorkspace, Workspace

PROBE = """
import json, sys
from kiln.cli import main
code = main(["query", "deps(//...)"])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

HEAVY = ("torch", "torch_tensorrt", "tensorrt", "numpy")
EVALUATION = ("starlark", "pydantic", "kiln.rules", "kiln.loading.build_file")


def _query_modules(ws: Workspace) -> set[str]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(run.stdout.splitlines()[-1])
    assert report["code"] == 0, run.stderr
    return set(report["modules"])


def test_query_never_imports_torch_and_warm_cache_skips_evaluation(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace(
        {
            "models/BUILD": """\
                torch_model(
                    name = "mlp",
                    src = "mlp.py",
                    factory = "mlp:build",
                    inputs = [{"name": "x", "shape": [8, 10]}],
                )
                aoti_package(name = "mlp_pt2", model = ":mlp")
                """,
            "models/mlp.py": "import torch\n",
        }
    )
    time.sleep(RACY_NS / 1e9 + 0.1)  # files written just now are never trusted: let them age
    cold = _query_modules(ws)
    assert not [m for m in cold if m.split(".")[0] in HEAVY]
    assert "starlark" in cold  # the cold run really evaluated BUILD files

    warm = _query_modules(ws)
    assert not [m for m in warm if m.split(".")[0] in HEAVY]
    assert not [m for m in warm if m in EVALUATION or m.startswith("kiln.rules.")]


BUILD_PROBE = """
import json, sys
from kiln.cli import main
code = main(["build", "//:a", "--strategy=local"])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def test_a_build_without_remote_executor_never_imports_ray(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace({"BUILD": 'genrule(name = "a", outs = ["a.txt"], cmd = "echo a > $@")'})
    run = subprocess.run(
        [sys.executable, "-c", BUILD_PROBE],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(run.stdout.splitlines()[-1])
    assert report["code"] == 0, run.stderr
    modules = set(report["modules"])
    assert not [m for m in modules if m.split(".")[0] in ("ray", *HEAVY)]
    assert not [m for m in modules if m.startswith("kiln.remote_exec")]
