"""The catalogue's shape: a rule is `rules/<folder>/<name>.py` and one catalogue line,
`"<name>": "<folder>.<name>"` (docs/writing-a-rule.md says so)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kiln.rules import CATALOGUE, MADE_BY_LOADING, load_rule, source_of

REPO = Path(__file__).resolve().parents[3]
RULES = {**CATALOGUE, **MADE_BY_LOADING}


@pytest.mark.parametrize("name", sorted(RULES))
def test_a_rule_is_a_module_named_after_it_in_a_folder(name: str) -> None:
    folder, _, module = RULES[name].partition(".")
    assert module == name
    assert (REPO / "rules" / folder / "__init__.py").is_file()
    assert source_of(name) == f"rules/{folder}/{name}.py"
    assert (REPO / source_of(name)).is_file()
    assert load_rule(name).name == name


def test_the_page_names_every_folder() -> None:
    page = (REPO / "docs" / "writing-a-rule.md").read_text()
    for folder in {module.partition(".")[0] for module in RULES.values()}:
        assert f"`rules/{folder}/`" in page
