"""filegroup: a name for a set of files, as in Bazel."""

from __future__ import annotations

from kiln.rule_api import LabelListAttr, Rule, RuleAttrs
from kiln.rule_api.context import RuleContext
from kiln.rule_api.providers import DefaultInfo
from pydantic import Field


class FilegroupAttrs(RuleAttrs):
    srcs: LabelListAttr = Field(default_factory=list)
    data: LabelListAttr = Field(default_factory=list)


def implementation(ctx: RuleContext[FilegroupAttrs]) -> list[object]:
    return [DefaultInfo(tuple(ctx.files(ctx.attrs.srcs)), tuple(ctx.files(ctx.attrs.data)))]


RULE = Rule(
    name="filegroup",
    attrs=FilegroupAttrs,
    doc="Gives a set of files (sources or outputs of other rules) one label.",
    impl=implementation,
)
