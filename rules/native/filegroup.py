"""filegroup: a name for a set of files, as in Bazel."""

from __future__ import annotations

from kiln.rule_api import DefaultInfo, LabelListAttr, Rule, RuleAttrs, RuleContext
from pydantic import Field


class FilegroupAttrs(RuleAttrs):
    srcs: LabelListAttr = Field(default_factory=list, description="the files the group names")
    data: LabelListAttr = Field(
        default_factory=list, description="files the group's files need at run time"
    )


def implementation(ctx: RuleContext[FilegroupAttrs]) -> list[object]:
    return [DefaultInfo(tuple(ctx.files(ctx.attrs.srcs)), tuple(ctx.files(ctx.attrs.data)))]


RULE = Rule(
    name="filegroup",
    attrs=FilegroupAttrs,
    doc="Gives a set of files (sources or outputs of other rules) one label.",
    impl=implementation,
)
