"""genrule: a shell command from declared inputs to declared outputs, as in Bazel."""

from __future__ import annotations

from kiln.analysis import LabelListAttr, OutputListAttr, Rule, RuleAttrs
from pydantic import Field


class GenruleAttrs(RuleAttrs):
    srcs: LabelListAttr = Field(default_factory=list)
    outs: OutputListAttr
    cmd: str
    tools: LabelListAttr = Field(default_factory=list)
    message: str | None = None
    executable: bool = False


RULE = Rule(
    name="genrule",
    attrs=GenruleAttrs,
    doc=(
        "Runs `cmd` with bash in a private execroot holding only `srcs` and `tools`; "
        "`$(SRCS)`, `$(OUTS)`, `$@`, `$<` and `$(location label)` are expanded."
    ),
)
