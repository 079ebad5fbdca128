"""Analysis: rule definitions and the narrow handle rule implementations get.

rules/ imports only the names re-exported here. They are loaded on first
use, so that importing kiln.analysis.<module> for the analysis cache (on a
no-op build) does not import pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.rule_api.attrs import (
        LabelAttr,
        LabelListAttr,
        OutputAttr,
        OutputListAttr,
        RuleAttrs,
    )
    from kiln.rule_api.rule import Rule

_EXPORTS = {
    "LabelAttr": "kiln.rule_api.attrs",
    "LabelListAttr": "kiln.rule_api.attrs",
    "OutputAttr": "kiln.rule_api.attrs",
    "OutputListAttr": "kiln.rule_api.attrs",
    "RuleAttrs": "kiln.rule_api.attrs",
    "Rule": "kiln.rule_api.rule",
}

__all__ = [
    "LabelAttr",
    "LabelListAttr",
    "OutputAttr",
    "OutputListAttr",
    "Rule",
    "RuleAttrs",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kiln.analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
