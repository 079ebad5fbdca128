"""model_test under `bazel test`: the same rule logic as `kiln test`, the same verdict, and
Bazel's test.xml (JUnit) holding the metrics; a failed gate makes `bazel test` exit 3.

Runs in the session's copy of the repository (conftest.py), whose //models:mlp_pt2 Bazel
has built: what runs here is the eager pass over the data and the tests themselves.
"""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.e2e.bazel.conftest import Twins

pytestmark = pytest.mark.torch

FAILING = """
load("@kiln//rules:defs.bzl", "model_dataset", "model_test")

model_dataset(name = "data", srcs = ["mlp_data.safetensors"], inputs = ["x"], labels = "y")

model_test(
    name = "strict_test",
    artifact = "//models:mlp_pt2",
    data = ":data",
    metrics = {"top1": ">= 0.95"},
)
"""


def bazel_test(twins: Twins, label: str) -> tuple[int, str, Path]:
    """`bazel test LABEL`: its exit code, its output and the target's testlogs folder."""
    run = twins.bazel("test", "--color=no", "--curses=no", label)
    testlogs = Path(twins.bazel.ok("info", "bazel-testlogs").out.strip())
    package, name = label.removeprefix("//").split(":")
    return run.code, run.err + run.out, testlogs / package / name  # the summary is stdout


def rows(log: str) -> list[list[str]]:
    """The verdict table of a model_test's log: the header and a row per metric."""
    found = []
    for line in log[log.index("metric ") :].splitlines():
        if not line.strip() or line.startswith(("kiln-", "--")):
            break  # the error line of a failed gate, the runner's last line
        found.append(line.split())
    return found


def test_bazel_test_runs_the_mlp_model_test_as_kiln_does(twins: Twins) -> None:
    code, err, logs = bazel_test(twins, "//models/tests:mlp_test")
    assert code == 0, err[-6000:]
    assert "//models/tests:mlp_test" in err and "PASSED in" in err
    suite = ElementTree.parse(logs / "test.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    bazel_log = suite.findtext("system-out") or ""
    assert "model_test //models/tests:mlp_test: //models:mlp_pt2 over" in bazel_log
    bazel_rows = rows(bazel_log)
    assert ["top1", "0.9", ">=", "0.85", "-", "ok"] in bazel_rows
    kiln = twins.kiln("test", "//models/tests:mlp_test")
    assert kiln.returncode == 0, kiln.stderr
    kiln_log = (twins.root / "kiln-testlogs/models/tests/mlp_test/test.log").read_text()
    assert rows(kiln_log) == bazel_rows  # one rule logic: the same metrics and verdicts


def test_a_failed_gate_fails_bazel_test_with_the_table_in_test_xml(twins: Twins) -> None:
    package = twins.root / "bazel_model_test"
    package.mkdir(exist_ok=True)
    (package / "BUILD").write_text(FAILING.lstrip())
    (package / "mlp_data.safetensors").write_bytes(
        (twins.root / "models/tests/mlp_data.safetensors").read_bytes()
    )
    code, err, logs = bazel_test(twins, "//bazel_model_test:strict_test")
    assert code == 3, err[-6000:]  # Bazel's exit code of a failed test
    assert "1 fails locally" in err
    suite = ElementTree.parse(logs / "test.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    bazel_rows = rows(suite.findtext("system-out") or "")
    assert ["top1", "0.9", ">=", "0.95", "-", "FAIL"] in bazel_rows
    kiln = twins.kiln("test", "//bazel_model_test:strict_test")
    assert kiln.returncode == 3, kiln.stderr
    kiln_log = twins.root / "kiln-testlogs/bazel_model_test/strict_test/test.log"
    assert rows(kiln_log.read_text()) == bazel_rows
