"""`kiln help <rule>`: every rule's attributes with their types, defaults and docs."""

from __future__ import annotations

import pytest
from kiln.cli import rule_help
from kiln.rules import CATALOGUE, load_rule


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_attribute_of_every_rule_is_documented(name: str) -> None:
    rule = load_rule(name)
    assert rule.doc
    undocumented = [key for key, info in rule.attrs.model_fields.items() if not info.description]
    assert not undocumented, f"{name}: no description for {undocumented}"


def test_help_shows_the_call_the_types_defaults_and_docs() -> None:
    text = rule_help.describe("aoti_package")
    assert text is not None
    assert text.startswith('aoti_package(name, model, device = "cpu", backend = "inductor",')
    assert "\n  model (label, mandatory)\n      the torch_model to export and package\n" in text
    assert '\n  device ("cpu" | "cuda", default "cpu")\n' in text
    assert "\n  validate (bool, default True)\n      check the package against eager\n" in text
    assert "\n  tags (list of str, default [])\n" in text


def test_label_lists_and_outputs_are_named_so() -> None:
    text = rule_help.describe("genrule")
    assert text is not None
    assert "\n  srcs (list of labels, default [])\n" in text
    assert "\n  outs (list of outputs, mandatory)\n" in text
    weights = rule_help.describe("torch_model")
    assert weights is not None and "\n  weights (label | None, default None)\n" in weights


def test_an_unknown_rule_has_no_help() -> None:
    assert rule_help.describe("py_binary") is None
