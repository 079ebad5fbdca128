"""The attributes every test rule has, as Bazel's tests have them."""

from __future__ import annotations

from kiln.rule_api import RuleAttrs, TestSize, TestTimeout
from pydantic import Field


class TestAttrs(RuleAttrs):
    __test__ = False  # not a pytest class

    size: TestSize = Field(
        default="medium",
        description="small, medium, large or enormous: sets the default timeout "
        "(60, 300, 900, 3600 s)",
    )
    timeout: TestTimeout | None = Field(
        default=None, description="short, moderate, long or eternal: overrides size's"
    )
    flaky: bool = Field(
        default=False, description="run a failing test up to 3 times; a later pass is FLAKY"
    )
