"""No action key holds where Python, the checkout or the output base is (issue 11 C1).

Python actions used to carry the interpreter's absolute path as argv[0], so the
same venv through another path, or a checkout elsewhere, missed every torch
action in a shared cache. tests/e2e/test_aoti_package.py builds from two paths
sharing one disk cache; this checks every part of every declared action.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kiln.action_graph import PYTHON_INTERPRETER, Action
from kiln.layout import cache_home
from kiln.rule_api import AnalyzedTarget
from kiln.rules.aoti.aoti_package import RULE as AOTI_PACKAGE
from kiln.rules.aoti.aoti_package import AotiPackageAttrs

from tests.model_fixtures import MLP, rule_context

REPO = Path(__file__).resolve().parents[3]
# Where things of this machine are: none of them may reach a key.
LOCAL_PATHS = {
    sys.executable,
    os.path.realpath(sys.executable),
    sys.prefix,
    sys.base_prefix,
    str(REPO),
    str(cache_home()),
}


def _mlp_package_actions() -> list[Action]:
    deps = {"//models:mlp": AnalyzedTarget("//models:mlp", {type(MLP): MLP})}
    attrs = AotiPackageAttrs(name="mlp_pt2", model="//models:mlp")
    ctx = rule_context(AOTI_PACKAGE, "//models:mlp_pt2", attrs, deps)
    assert AOTI_PACKAGE.impl is not None
    AOTI_PACKAGE.impl(ctx)
    return ctx.actions.declared


def test_python_actions_name_the_interpreter_symbolically() -> None:
    python = [a for a in _mlp_package_actions() if a.content is None]
    assert {a.mnemonic for a in python} >= {"TorchExport", "AotiCompile", "AotiValidate"}
    for action in python:
        assert action.argv[0] == PYTHON_INTERPRETER, action.describe()


def test_no_action_key_part_names_a_local_path() -> None:
    for action in _mlp_package_actions():
        parts = [*action.argv, *(v for _, v in action.env), *(v for _, v in action.platform)]
        parts += [f.path for f in (*action.inputs, *action.outputs)]
        if action.content is not None:
            parts.append(action.content.decode())
        for part in parts:
            assert not any(path in part for path in LOCAL_PATHS), (action.describe(), part)
