"""test_suite: a name for a set of tests, as in Bazel.

`kiln test //pkg:suite` runs the tests in `tests` (suites in it are expanded in turn), or,
with `tests` empty, every test target of the package not tagged manual. Expansion is
`kiln test`'s (kiln.cli.test_targets); `kiln build` of a suite builds what its tests need.
"""

from __future__ import annotations

from kiln.rule_api import DefaultInfo, LabelListAttr, Rule, RuleAttrs, RuleContext
from pydantic import Field


class TestSuiteAttrs(RuleAttrs):
    __test__ = False  # not a pytest class

    tests: LabelListAttr = Field(
        default_factory=list,
        description="test targets and suites; empty: every test of this package but manual ones",
    )


def implementation(ctx: RuleContext[TestSuiteAttrs]) -> list[object]:
    return [DefaultInfo(tuple(ctx.files(ctx.attrs.tests)))]


RULE = Rule(
    name="test_suite",
    attrs=TestSuiteAttrs,
    doc="A set of tests `kiln test` runs together (all of the package's when `tests` is empty).",
    impl=implementation,
)
