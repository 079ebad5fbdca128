"""Test targets: what a test rule declares, and the provider `kiln test` finds them by.

A test rule (sh_test, model_test) names a COMMAND and its inputs; declare_test wraps it in
one TestRunner action (`python -m kiln.actions.test_runner -- COMMAND`), keyed like any
action on everything the test reads, whose output directory holds test.log, test.xml and
result.json (kiln.test_results). `kiln build` builds what a test needs but leaves this
action out; `kiln test` runs it, and its flags (--test_timeout, --flaky_test_attempts,
--test_filter, --runs_per_test) change the action's environment, so its key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kiln import code_digest
from kiln.action_graph import PYTHON_ACTION_ENV, PYTHON_INTERPRETER, File, PythonPackage, Resources
from kiln.rule_api.context import RuleContext
from kiln.rule_api.providers import DefaultInfo
from kiln.test_results import (
    ATTEMPTS_ENV,
    OUTPUTS_ENV,
    SIZE_TIMEOUT,
    TIMEOUT_ENV,
    TIMEOUT_SECONDS,
)

TestSize = Literal["small", "medium", "large", "enormous"]
TestTimeout = Literal["short", "moderate", "long", "eternal"]

MNEMONIC = "TestRunner"
RUNNER = "kiln.actions.test_runner"


@dataclass(frozen=True)
class TestInfo:
    """A test target: the directory its TestRunner action writes (its first output)."""

    __test__ = False  # not a pytest class

    results: File
    size: TestSize
    flaky: bool


def declare_test(
    ctx: RuleContext[Any],
    *,
    command: Sequence[str],
    inputs: Sequence[File],
    size: TestSize,
    timeout: TestTimeout | None,
    flaky: bool,
    env: Mapping[str, str] | None = None,
    module: str | None = None,
    packages: Sequence[str] = (),
    python_env: Sequence[PythonPackage] = (),
    resources: Resources | None = None,
    platform: Mapping[str, str] | None = None,
) -> list[object]:
    """Declare the test action of `ctx`'s target; its providers (TestInfo, DefaultInfo).

    `module`: the kiln.actions module COMMAND runs (model_test), whose code joins the key as
    a Python action's does; `packages`/`python_env` as for run_python.
    """
    results = ctx.declare_directory(f"{ctx.name}.test")
    platform_extra = dict(platform or {})
    seconds = TIMEOUT_SECONDS[timeout or SIZE_TIMEOUT[size]]
    platform = ctx.actions.python_platform(module or "test_runner", packages, python_env)
    platform["kiln_test_runner"] = code_digest.content_digest((RUNNER,))
    platform.update(platform_extra)
    ctx.actions.run_test(
        mnemonic=MNEMONIC,
        argv=(PYTHON_INTERPRETER, "-m", RUNNER, "--", *command),
        inputs=inputs,
        outputs=(results,),
        env={
            **PYTHON_ACTION_ENV,
            **(env or {}),
            "TEST_TARGET": ctx.label,
            TIMEOUT_ENV: str(seconds),
            ATTEMPTS_ENV: "3" if flaky else "1",
            OUTPUTS_ENV: results.path,
        },
        platform=platform,
        resources=resources or Resources(cpu=1),
        python_env=python_env,
        progress_message=f"Testing {ctx.label}",
    )
    return [TestInfo(results, size, flaky), DefaultInfo(tuple(inputs))]
