"""The rule catalogue: every rule a BUILD file can call, by name.

Each rule lives in its own module (attribute schema + implementation) and is
imported only when a BUILD file evaluation needs the catalogue, so commands
served from the graph cache never pay for pydantic or the rules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiln.rule_api import Rule

# rule name -> module under kiln.rules that defines RULE
CATALOGUE: dict[str, str] = {
    "filegroup": "filegroup",
    "genrule": "genrule",
    "torch_model": "torch_model",
    "model_weights": "model_weights",
    "aoti_package": "aoti_package",
    "trt_engine": "trt_engine",
    "trt_windows_engine": "trt_windows_engine",
}


def load_rule(name: str) -> Rule:
    module = importlib.import_module(f"kiln.rules.{CATALOGUE[name]}")
    rule: Rule = module.RULE
    return rule


def all_rules() -> dict[str, Rule]:
    return {name: load_rule(name) for name in CATALOGUE}
