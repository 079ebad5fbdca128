"""kiln.actions.test_runner as `bazel test` runs it (kiln_rule.bzl's launcher): with Bazel's
XML_OUTPUT_FILE set for the runner itself, the run's JUnit XML goes there, pass or fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from kiln.action_graph import PYTHON_ACTION_ENV


def runner(tmp_path: Path, code: str, *, bazel: bool) -> subprocess.CompletedProcess[str]:
    env = {
        **PYTHON_ACTION_ENV,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "TEST_TARGET": "//t:x_test",
        "KILN_TEST_OUTPUTS": str(tmp_path / "out"),
        "TMPDIR": str(tmp_path),
    }
    if bazel:
        env["XML_OUTPUT_FILE"] = str(tmp_path / "bazel.xml")
    command = ["python", "-c", f"print('metric value verdict'); raise SystemExit({code})"]
    return subprocess.run(
        [sys.executable, "-m", "kiln.actions.test_runner", "--", *command],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("code", ["0", "1"])
def test_bazels_xml_output_file_gets_the_runs_junit_xml(tmp_path: Path, code: str) -> None:
    run = runner(tmp_path, code, bazel=True)
    assert run.returncode == int(code), run.stderr
    suite = ElementTree.parse(tmp_path / "bazel.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == code
    assert "metric value verdict" in (suite.findtext("system-out") or "")
    assert "metric value verdict" in run.stdout  # Bazel's test.log: pass or fail


def test_under_kiln_a_pass_prints_nothing_and_writes_no_bazel_file(tmp_path: Path) -> None:
    run = runner(tmp_path, "0", bazel=False)
    assert run.returncode == 0 and run.stdout == ""
    assert not (tmp_path / "bazel.xml").exists()
    assert (tmp_path / "out/test.xml").is_file()
