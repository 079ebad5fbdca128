"""kiln test's summary lines, in Bazel's words and columns, and the test result record."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest
from kiln.action_graph import Action, File
from kiln.cli.test_runs import RunResult, TestAction
from kiln.cli.test_summary import TargetResult, executed_line, status_line
from kiln.test_results import RESULT_PREFIX, TestRun, junit_xml, parse_failure_output

ACTION = Action("//t:a", "TestRunner", ("true",), (), (File("kiln-out/t/a.test", directory=True),))


def target(label: str, *runs: TestRun | None, cached: bool = False) -> TargetResult:
    test = TestAction(label, ACTION, 1, len(runs))
    return TargetResult(label, tuple(RunResult(test, run, cached=cached) for run in runs))


def test_status_lines_end_at_bazels_column() -> None:
    assert status_line(target("//t:a", TestRun("PASSED", 0.42))) == (
        "//t:a" + " " * 67 + " PASSED in 0.4s"
    )
    cached = status_line(target("//t:a", TestRun("PASSED", 2.0), cached=True))
    assert cached == "//t:a" + " " * 58 + " (cached) PASSED in 2.0s"
    assert status_line(target("//t:a", None)) == "//t:a" + " " * 64 + " NO STATUS"
    flaky = status_line(target("//t:a", TestRun("FLAKY", 1.0, attempts=3)))
    assert flaky.endswith(" FLAKY, failed in 2 out of 3 in 1.0s")
    assert len(flaky) == 79 + len(" in 1.0s")


def test_the_worst_run_is_the_targets_status() -> None:
    runs = (TestRun("PASSED", 1.0), TestRun("TIMEOUT", 5.0), TestRun("FAILED", 0.1))
    assert target("//t:a", *runs).status == "TIMEOUT"
    assert target("//t:a", TestRun("PASSED", 1.0), None).status == "NO STATUS"


@pytest.mark.parametrize(
    ("targets", "line"),
    [
        ([target("//t:a", TestRun("PASSED", 1))], "Executed 1 out of 1 test: 1 test passes."),
        (
            [
                target("//t:a", TestRun("PASSED", 1), cached=True),
                target("//t:b", TestRun("FAILED", 1)),
            ],
            "Executed 1 out of 2 tests: 1 test passes and 1 fails locally.",
        ),
        (
            [
                target("//t:a", TestRun("PASSED", 1)),
                target("//t:b", TestRun("FLAKY", 1, 2)),
                target("//t:c", TestRun("FAILED", 1)),
                target("//t:d", None),
            ],
            "Executed 3 out of 4 tests: 2 tests pass, 1 fails locally and 1 was skipped.",
        ),
    ],
)
def test_executed_line(targets: list[TargetResult], line: str) -> None:
    assert executed_line(targets) == line


def test_the_result_line_is_read_back_from_a_failures_output() -> None:
    run = TestRun("TIMEOUT", 60.0)
    output = "printed\n" + RESULT_PREFIX + run.to_json() + "\n"
    assert parse_failure_output(output) == (run, "printed\n")
    assert parse_failure_output("no result here\n") == (None, "no result here\n")


def test_every_prefix_of_a_result_record_is_a_record_or_none() -> None:
    text = TestRun("FLAKY", 1.5, 2).to_json()
    for end in range(len(text)):
        assert TestRun.from_json(text[:end]) is None
    assert TestRun.from_json(text) == TestRun("FLAKY", 1.5, 2)
    assert TestRun.from_json('{"status": "WON", "seconds": 1, "attempts": 1}') is None


def test_junit_xml_holds_a_log_with_control_characters() -> None:
    xml = junit_xml("//t:a", TestRun("FAILED", 0.5), "bell\x07 and <tag> & more\n")
    suite = ElementTree.fromstring(xml.split("\n", 1)[1])[0]
    assert (suite.get("name"), suite.get("failures"), suite.get("time")) == ("t/a", "1", "0.500")
    assert suite.findtext("system-out") == "bell? and <tag> & more\n"
