"""A test run's result: the record the test runner writes and `kiln test` reads; JUnit XML.

The runner (kiln.actions.test_runner) writes into the test action's output directory:

    test.log      what the test printed, stdout and stderr as they came
    test.xml      JUnit XML, which CI systems read
    result.json   this module's TestRun: status, seconds, attempts

A run that did not pass stores nothing (the executor never caches a failed action, so a
test that did not pass is never served as a cached pass): the runner prints the log and,
as its last line, RESULT_PREFIX and the TestRun, which `kiln test` reads back from the
failure's output (parse_failure_output).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Literal
from xml.etree import ElementTree

Status = Literal["PASSED", "FLAKY", "FAILED", "TIMEOUT"]
STATUSES: tuple[Status, ...] = ("PASSED", "FLAKY", "FAILED", "TIMEOUT")

RESULT_PREFIX = "kiln-test-result: "
LOG = "test.log"
XML = "test.xml"
RESULT = "result.json"

# The test action's environment variables that `kiln test`'s flags set (so its key).
TIMEOUT_ENV = "TEST_TIMEOUT"  # --test_timeout
ATTEMPTS_ENV = "KILN_TEST_ATTEMPTS"  # --flaky_test_attempts
OUTPUTS_ENV = "KILN_TEST_OUTPUTS"  # the output directory (one per run)
FILTER_ENV = "TESTBRIDGE_TEST_ONLY"  # --test_filter, as Bazel passes it
RUN_ENV = "TEST_RUN_NUMBER"  # --runs_per_test=N: 1..N, and TEST_TOTAL_RUNS = N
BASELINE_ENV = "KILN_BASELINE_FILE"  # a model_benchmark's baseline file (workspace path)
UPDATE_BASELINES_ENV = "KILN_UPDATE_BASELINES"  # --update_baselines
# Where a passed benchmark's timings are, in its results directory.
BENCHMARK = "undeclared_outputs/benchmark.json"

# What Bazel runs a test for at most, by its `size` (and by `timeout`, which wins).
TIMEOUT_SECONDS = {"short": 60, "moderate": 300, "long": 900, "eternal": 3600}
SIZE_TIMEOUT = {"small": "short", "medium": "moderate", "large": "long", "enormous": "eternal"}


@dataclass(frozen=True)
class TestRun:
    """How one run of a test ended. FLAKY: an attempt failed, a later one passed."""

    __test__ = False  # not a pytest class

    status: Status
    seconds: float
    attempts: int = 1

    @property
    def passed(self) -> bool:
        return self.status in ("PASSED", "FLAKY")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TestRun | None:
        """The record, or None for text that is not one (a damaged or foreign file)."""
        try:
            data = json.loads(text)
            status, seconds, attempts = data["status"], data["seconds"], data["attempts"]
        except (ValueError, KeyError, TypeError):
            return None
        if status not in STATUSES or not isinstance(seconds, int | float):
            return None
        if not isinstance(attempts, int) or attempts < 1:
            return None
        return cls(status, float(seconds), attempts)


def parse_failure_output(output: str) -> tuple[TestRun | None, str]:
    """(the runner's result line, the output without it) of a failed test action."""
    lines = output.rstrip("\n").split("\n")
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith(RESULT_PREFIX):
            run = TestRun.from_json(lines[index][len(RESULT_PREFIX) :])
            rest = lines[:index] + lines[index + 1 :]
            return run, "\n".join(rest) + ("\n" if rest else "")
    return None, output


# Characters XML 1.0 cannot hold at all, even escaped: a test may print them.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def junit_xml(label: str, run: TestRun, log: str, *, message: str = "") -> str:
    """The JUnit XML of one test target's run, as Bazel writes it for a test that writes
    none itself: one suite, one case named after the target, the log as system-out."""
    name = label.removeprefix("//").replace(":", "/")  # Bazel's: the test's path
    failed = not run.passed
    suites = ElementTree.Element("testsuites")
    suite = ElementTree.SubElement(
        suites,
        "testsuite",
        name=name,
        tests="1",
        failures="1" if failed else "0",
        errors="0",
        time=f"{run.seconds:.3f}",
    )
    case = ElementTree.SubElement(
        suite, "testcase", name=name, classname=name, status="run", time=f"{run.seconds:.3f}"
    )
    if failed:
        why = message or ("timed out" if run.status == "TIMEOUT" else "failed")
        failure = ElementTree.SubElement(case, "failure", message=why, type=run.status)
        failure.text = _NOT_XML.sub("?", why)
    out = ElementTree.SubElement(suite, "system-out")
    out.text = _NOT_XML.sub("?", log)
    body = ElementTree.tostring(suites, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"
