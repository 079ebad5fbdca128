"""Analysis: rule definitions and the narrow handle rule implementations get.

rules/ imports only the names re-exported here.
"""

from kiln.analysis.attrs import (
    LabelAttr,
    LabelListAttr,
    OutputAttr,
    OutputListAttr,
    RuleAttrs,
)
from kiln.analysis.rule import Rule

__all__ = [
    "LabelAttr",
    "LabelListAttr",
    "OutputAttr",
    "OutputListAttr",
    "Rule",
    "RuleAttrs",
]
