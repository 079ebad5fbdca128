"""sh_test: a shell script as a test, as in Bazel.

The script runs under bash in the test action's execroot (which holds only the script and
`data`), with `args`; exit 0 passes. Its pass is cached on the script, the data and the
environment: a changed input runs it again.
"""

from __future__ import annotations

from kiln.rule_api import LabelListAttr, Rule, RuleContext, declare_test
from kiln.rules.testing.test_attrs import TestAttrs
from pydantic import Field

ACTION_PATH = "/usr/local/bin:/usr/bin:/bin"


class ShTestAttrs(TestAttrs):
    srcs: LabelListAttr = Field(description="the test script: exactly one file")
    data: LabelListAttr = Field(
        default_factory=list, description="files the test reads at run time"
    )
    args: list[str] = Field(default_factory=list, description="arguments passed to the script")
    env: dict[str, str] = Field(
        default_factory=dict, description="environment variables the test gets"
    )


def implementation(ctx: RuleContext[ShTestAttrs]) -> list[object]:
    srcs = ctx.files(ctx.attrs.srcs)
    if len(srcs) != 1:
        raise ctx.error(
            f"sh_test needs exactly one file in srcs, there are {len(srcs)}",
            hint="put helper scripts in data",
        )
    script = srcs[0]
    return declare_test(
        ctx,
        command=("/bin/bash", script.path, *ctx.attrs.args),
        inputs=[script, *ctx.files(ctx.attrs.data)],
        size=ctx.attrs.size,
        timeout=ctx.attrs.timeout,
        flaky=ctx.attrs.flaky,
        env={"PATH": ACTION_PATH, **ctx.attrs.env},
    )


RULE = Rule(
    name="sh_test",
    attrs=ShTestAttrs,
    doc="A bash script as a test: `kiln test` runs it (exit 0 passes) and caches its pass.",
    impl=implementation,
)
