"""docs/writing-a-rule.md's example rule, run as written: its schema, spec record and
implementation are the page's own code blocks, analyzed against a model with a `@pip`
dep, whose locked package must reach the action's environment (a model whose source
imports one fails to build otherwise). CPU only: the action itself is not run."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from kiln import rule_api
from kiln.action_graph import PythonPackage
from kiln.rules.model.torch_model import TorchModelInfo

from tests.model_fixtures import MLP, rule_context

PAGE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-rule.md"
EINOPS = PythonPackage("einops", "0.8.1", ("sha256:" + "0" * 64,))


def _rule_blocks(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The page's schema, spec record and implementation blocks, as one module (pydantic
    resolves the annotations in the module's namespace)."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    module = types.ModuleType("onnx_export_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for block in blocks[:3]:  # schema, spec record, implementation
        exec(block, module.__dict__)  # the page's own code, as a reader pastes it
    return module.__dict__


def test_the_example_rule_gives_its_action_the_models_pip_packages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    example = _rule_blocks(monkeypatch)
    model = TorchModelInfo(MLP.spec, MLP.src, MLP.deps, MLP.weights, (EINOPS,))
    attrs = example["OnnxExportAttrs"].model_validate({"name": "mlp_onnx", "model": MLP.label})
    ctx = rule_context(
        example["RULE"],
        "//models:mlp_onnx",
        attrs,
        {MLP.label: rule_api.AnalyzedTarget(MLP.label, {TorchModelInfo: model})},
    )
    example["implementation"](ctx)
    (action,) = [a for a in ctx.actions.declared if a.mnemonic == "OnnxExport"]
    assert action.python_env == (EINOPS,)
    assert action.argv[1:3] == ("-m", "kiln.actions.onnx_export")
