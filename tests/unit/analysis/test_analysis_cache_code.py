"""The analysis cache is stale when code whose digest it put in the actions' keys changes.

Analysis writes the digest of each Python action's module (`kiln.actions.<name>` and what
it imports) into the action's key. A cached analysis replays those keys: if it outlived
an edit of the action's code, the build was served the old code's results.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kiln import state_file
from kiln.action_graph import Action, File
from kiln.analysis.analysis_cache import (
    ANALYSIS_CODE,
    FORMAT,
    AnalysisCache,
    CachedAnalysis,
    action_modules,
)
from kiln.code_digest import KILN_ROOT, files
from kiln.host_facts import HostFacts

HOST = HostFacts("linux", "x86_64", "3.11.7", "cpython", "/venv/bin/python", ())


def _python_action(module: str) -> Action:
    return Action(
        owner="//m:t",
        mnemonic="AotiValidate",
        argv=("python", "-m", module, "bazel-out/m/t.validate.json"),
        inputs=(),
        outputs=(File("bazel-out/m/t.validation.json"),),
        supports_workers=True,
    )


def _genrule() -> Action:
    return Action(
        owner="//m:g",
        mnemonic="Genrule",
        argv=("/bin/bash", "-c", "python -m kiln.actions.validate"),
        inputs=(),
        outputs=(File("bazel-out/m/g.txt"),),
    )


def test_the_modules_the_actions_run_are_those_after_dash_m() -> None:
    actions = [
        _python_action("kiln.actions.validate"),
        _python_action("kiln.actions.test_runner"),
        _python_action("kiln.actions.validate"),
        _genrule(),  # a shell command that mentions a module runs no kiln code of its key
    ]
    assert action_modules(actions) == ["kiln.actions.test_runner", "kiln.actions.validate"]


def test_a_stored_analysis_is_stamped_with_its_actions_code(tmp_path: Path) -> None:
    path = tmp_path / "analysis-cache.pickle"
    loader: Any = SimpleNamespace(packages={})
    graph: Any = SimpleNamespace(targets={})
    analysis = CachedAnalysis(requested={}, actions=[_python_action("kiln.actions.validate")])
    AnalysisCache(path).store(loader, graph, ["//m:t"], HOST, [], analysis)

    stamped = {Path(p) for p, *_ in state_file.read(path, FORMAT, lambda _: True, "")["code"].stats}
    assert KILN_ROOT / "actions" / "validate.py" in stamped
    assert KILN_ROOT / "actions" / "spec.py" in stamped  # imported by validate: its code too
    assert set(files(ANALYSIS_CODE)) <= stamped
