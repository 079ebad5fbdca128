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
    "filegroup": "native.filegroup",
    "genrule": "native.genrule",
    "torch_model": "model.torch_model",
    "model_weights": "model.model_weights",
    "aoti_package": "aoti.aoti_package",
    "trt_engine": "tensorrt.trt_engine",
    "trt_windows_engine": "tensorrt.trt_windows_engine",
    "python_requirements": "pip.python_requirements",
    "sh_test": "testing.sh_test",
    "test_suite": "testing.test_suite",
    "model_dataset": "testing.model_dataset",
    "model_test": "testing.model_test",
    "model_benchmark": "testing.model_benchmark",
}
# Kinds of targets kiln makes itself, which BUILD files cannot call: rule name -> module.
MADE_BY_LOADING: dict[str, str] = {
    "python_requirement": "pip.python_requirement",  # @pip//<name> (kiln.loading.pip_repository)
}


# Bazel's own rules, which kiln implements too: a BUILD file shared with Bazel calls
# them without a load(), so @kiln//rules:defs.bzl does not export them.
BAZEL_NATIVE = ("filegroup", "genrule", "sh_test", "test_suite")

# kiln's rules the Bazel rule set has no counterpart of yet, so @kiln//rules:defs.bzl
# does not export them: a BUILD file that calls one builds with kiln only.
NOT_IN_BAZEL: tuple[str, ...] = ("model_benchmark",)

# The label a BUILD file shared with Bazel loads kiln's rules from, and what it exports.
DEFS_BZL = "@kiln//rules:defs.bzl"


def exported_rules() -> tuple[str, ...]:
    """The rules of `load("@kiln//rules:defs.bzl", ...)`: the catalogue but Bazel's own
    and those the Bazel rule set lacks."""
    return tuple(name for name in CATALOGUE if name not in (*BAZEL_NATIVE, *NOT_IN_BAZEL))


def load_rule(name: str) -> Rule:
    module = importlib.import_module(f"kiln.rules.{CATALOGUE.get(name) or MADE_BY_LOADING[name]}")
    rule: Rule = module.RULE
    return rule


def source_of(name: str) -> str:
    """The file that defines rule `name`, relative to the repository: rules/<folder>/<name>.py."""
    return f"rules/{(CATALOGUE.get(name) or MADE_BY_LOADING[name]).replace('.', '/')}.py"


def all_rules() -> dict[str, Rule]:
    return {name: load_rule(name) for name in (*CATALOGUE, *MADE_BY_LOADING)}
