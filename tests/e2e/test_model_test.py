"""model_test: the mlp's package over a small deterministic dataset, through its generated
Python loader; metrics, gates, the failure table, and what its cached pass is keyed on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.e2e.test_aoti_package import REPO
from tests.kiln_workspace import ModelWorkspace, model_workspace, write_file
from tests.unit.report.html_dom import parse

pytestmark = pytest.mark.torch

BUILD = """
torch_model(
    name = "mlp",
    src = "mlp.py",
    factory = "mlp:build",
    weights = "mlp.safetensors",
    inputs = [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
    dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
)
aoti_package(name = "mlp_pt2", model = ":mlp")
model_dataset(name = "data", srcs = ["data.npz"], inputs = ["x"], labels = "y")
model_dataset(name = "wide", srcs = ["wide.npz"], inputs = ["x"])
model_test(
    name = "accuracy_test",
    artifact = ":mlp_pt2",
    data = ":data",
    eager = ":mlp",
    metrics = {"top1": ">= 0.70", "max_abs_error": "<= 1e-4", "cosine": ">= 0.9999"},
    metric_src = "metrics.py",
    user_metrics = ["mean_logit"],
)
model_test(
    name = "strict_test",
    artifact = ":mlp_pt2",
    data = ":data",
    metrics = {"top1": ">= 0.95"},
    baseline = ":mlp_pt2",
    max_drop = {"top1": 0.0},
    tags = ["manual"],
)
model_test(
    name = "wide_test",
    artifact = ":mlp_pt2",
    data = ":wide",
    eager = ":mlp",
    metrics = {"max_abs_error": "<= 1e-4"},
    tags = ["manual"],
)
model_test(
    name = "cc_test",
    artifact = ":mlp_pt2",
    data = ":data",
    eager = ":mlp",
    runtime = "cc",
    metrics = {"top1": ">= 0.70", "max_abs_error": "<= 1e-4"},
    tags = ["manual"],
)
model_benchmark(
    name = "latency",
    artifact = ":mlp_pt2",
    shapes = [{"x": [1, 10]}, {"x": [32, 10]}],
    warmup = 2,
    repeats = 3,
    iterations = 5,
    # bounds no loaded machine reaches: this test is of the gate's plumbing, not of
    # timings (test_benchmark_gates.py pins the verdicts)
    max_p50_ms = 1000000.0,
    baseline = "latency.json",
    max_regression = 1000000000.0,
    tags = ["manual"],
)
"""

# 100 samples; labels are eager's class for 80 of them, another class for 20: top1 0.8.
DATA = """
import sys, numpy as np, torch
sys.path.insert(0, "models")
from mlp import build
from safetensors.torch import load_file
m = build(); m.load_state_dict(load_file("models/mlp.safetensors")); m.eval()
x = np.random.default_rng(0).standard_normal((100, 10)).astype(np.float32)
with torch.no_grad():
    y = m(torch.from_numpy(x)).argmax(1).numpy()
y[:20] = (y[:20] + 1) % 4
np.savez("models/data.npz", x=x, y=y.astype(np.int64))
np.savez("models/wide.npz", x=np.zeros((4, 12), np.float32))
"""


@dataclass(frozen=True)
class TestRun:
    __test__ = False

    code: int
    err: str


class Tests:
    def __init__(self, workspace: ModelWorkspace) -> None:
        self.ws = workspace

    def run(self, *args: str) -> TestRun:
        done = subprocess.run(
            [sys.executable, "-m", "kiln", "test", *args],
            cwd=self.ws.root,
            env=self.ws.env,
            capture_output=True,
            text=True,
            check=False,
        )
        return TestRun(done.returncode, done.stderr)

    def log(self, name: str) -> str:
        return (self.ws.root / f"kiln-testlogs/models/{name}/test.log").read_text()


@pytest.fixture(scope="module")
def tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tests]:
    base = tmp_path_factory.mktemp("model_test")
    ws = model_workspace(
        base / "ws",
        base / "cache",
        BUILD,
        [REPO / "models/mlp.py", REPO / "models/mlp.safetensors"],
    )
    write_file(
        ws.root,
        "models/metrics.py",
        "def mean_logit(outputs, labels, reference):\n    return float(outputs.mean())\n",
    )
    ws.python(DATA)
    write_file(ws.root, "models/latency.json", "")  # no timings yet
    yield Tests(ws)


def status(err: str, label: str) -> str:
    line = next(line for line in err.splitlines() if line.startswith(label + " "))
    return line[len(label) :].strip()


def test_a_passing_model_test_is_cached_on_artifact_data_and_test(tests: Tests) -> None:
    first = tests.run("//models:accuracy_test")
    assert first.code == 0, first.err
    assert status(first.err, "//models:accuracy_test").startswith("PASSED in ")
    log = tests.log("accuracy_test")
    assert (
        "model_test //models:accuracy_test: //models:mlp_pt2 over //models:data (100 samples)"
        in log
    )
    rows = {line.split()[0]: line.split() for line in log.splitlines() if line[:1].isalpha()}
    assert rows["top1"][1:] == ["0.8", ">=", "0.70", "-", "ok"]
    assert rows["cosine"][-1] == "ok" and rows["max_abs_error"][-1] == "ok"
    assert rows["mean_logit"][2:] == ["-", "-", "-"]  # a user metric without a gate
    again = tests.run("//models:accuracy_test")
    assert status(again.err, "//models:accuracy_test").startswith("(cached) PASSED in ")


def test_a_comment_edit_keeps_the_pass_weights_run_it_again(tests: Tests) -> None:
    ws = tests.ws
    assert tests.run("//models:accuracy_test").code == 0
    source = ws.root / "models/mlp.py"
    source.write_text(source.read_text() + "\n# a comment\n")
    edited = tests.run("//models:accuracy_test", "--explain")
    assert edited.code == 0, edited.err
    assert "ModelEager //models:accuracy_test" in edited.err  # eager ran again ...
    assert status(edited.err, "//models:accuracy_test").startswith("(cached) PASSED")  # same bytes
    retrain = """
    import torch
    from safetensors.torch import load_file, save_file
    w = load_file("models/mlp.safetensors")
    save_file({k: v * 1.01 for k, v in w.items()}, "models/mlp.safetensors")
    """
    ws.python(retrain)
    retrained = tests.run("//models:accuracy_test")
    assert retrained.code == 0, retrained.err
    assert status(retrained.err, "//models:accuracy_test").startswith("PASSED in ")


def test_runtime_cc_runs_the_artifact_through_its_cpp_loader(tests: Tests) -> None:
    run = tests.run("//models:cc_test")
    assert run.code == 0, run.err
    rows = {
        line.split()[0]: line.split()
        for line in tests.log("cc_test").splitlines()
        if line[:1].isalpha()
    }
    assert rows["top1"][1:] == ["0.8", ">=", "0.70", "-", "ok"]
    assert float(rows["max_abs_error"][1]) <= 1e-4


def test_a_failed_gate_prints_the_table_and_is_never_cached(tests: Tests) -> None:
    for _ in range(2):
        run = tests.run("//models:strict_test", "--test_output=errors")
        assert run.code == 3, run.err
        assert status(run.err, "//models:strict_test").startswith("FAILED in ")
    log = tests.log("strict_test")
    assert "//models:strict_test: 1 of 2 gates failed: top1 = " in log
    table = [line.split() for line in log.splitlines() if line.startswith("top1")]
    assert table[0][-4:] == [">=", "0.95", "-", "FAIL"]
    assert table[1][0:2] == ["top1", "(drop)"] and table[1][-1] == "ok"
    assert "metric" in run.err and "FAIL" in run.err  # --test_output=errors shows the table


def test_a_dataset_that_does_not_fit_is_a_user_error_at_its_line(tests: Tests) -> None:
    run = tests.run("//models:wide_test")
    assert run.code == 1, run.err  # the user's mistake, found building: not a failed test
    assert (
        "ERROR: models/BUILD:31:1: ModelEager //models:wide_test failed: exited with code 1\n"
        "kiln-action-error: //models:wide: the dataset does not fit //models:mlp's inputs: "
        "'x' is float32 [4, 12], the model's 'x' takes float32 [samples, 10]\n"
        "  hint: make the arrays fit (the first axis counts samples), or test another model"
    ) in run.err
    assert status(run.err, "//models:wide_test") == "NO STATUS"
    assert "Traceback" not in run.err


def test_a_benchmark_needs_its_baseline_then_gates_on_it(tests: Tests) -> None:
    empty = tests.run("//models:latency")
    assert empty.code == 3, empty.err
    assert (
        "//models:latency: the baseline file models/latency.json holds no timings; "
        "record them with kiln test --update_baselines"
    ) in tests.log("latency")
    update = tests.run("//models:latency", "--update_baselines")
    assert update.code == 0, update.err
    baseline = json.loads((tests.ws.root / "models/latency.json").read_text())
    assert sorted(baseline["points"]) == ["x=1x10", "x=32x10"]
    assert baseline["points"]["x=1x10"]["p50_ms"] > 0
    assert " cores" in baseline["machine"]  # what the timings are keyed on
    gated = tests.run("//models:latency")
    assert gated.code == 0, gated.err
    log = tests.log("latency")
    assert "timings keyed on " in log and "of baseline <= x1e+09: ok" in log
    assert status(gated.err, "//models:latency").startswith("PASSED in ")


def test_the_report_holds_metrics_bounds_validation_and_latencies(tests: Tests) -> None:
    """--report: the package's sizes and validation points, each model_test's metrics
    against its bounds (a failed run's from its log), the benchmark's p50 against the
    baseline file, in the page's DOM."""
    baseline = (tests.ws.root / "models/latency.json").read_text()
    if '"points"' not in baseline:  # run alone: the benchmark test above records them
        assert tests.run("//models:latency", "--update_baselines").code == 0
    run = tests.run(  # -j1: the benchmark's timings away from the other tests' load
        "//models:accuracy_test",
        "//models:strict_test",
        "//models:latency",
        "--report=r.html",
        "--jobs=1",
    )
    assert run.code == 3, run.err  # strict_test's gate fails
    dom = parse((tests.ws.root / "r.html").read_text())
    targets = {d.attrs["data-label"]: d for d in dom.find_all("div", "target")}
    package = targets["//models:mlp_pt2"]
    kinds = {row[1] for row in package.find("table", "sizes").rows()[1:]}
    assert "program" in kinds
    validation = package.find("table", "validation").rows()[1:]
    assert [row[0] for row in validation] == ["min", "opt", "max"]
    assert [row[1] for row in validation] == ["x=1x10", "x=8x10", "x=64x10"]
    assert all(row[-1] == "ok" for row in validation)
    accuracy = {r[0]: r for r in targets["//models:accuracy_test"].find("table", "metrics").rows()}
    assert accuracy["top1"][1:] == ["0.8", ">= 0.70", "ok"]
    assert accuracy["mean_logit"][2:] == ["-", "-"]
    strict = {r[0]: r for r in targets["//models:strict_test"].find("table", "metrics").rows()}
    assert strict["top1"][1:] == ["0.8", ">= 0.95", "FAIL"]  # from its log: it kept no outputs
    assert targets["//models:strict_test"].find("span", "status").text == "FAILED"
    latency = targets["//models:latency"]  # passed or not (a loaded machine): its table
    rows = {r[0]: r for r in latency.find("table", "latencies").rows()[1:]}
    assert sorted(rows) == ["x=1x10", "x=32x10"]
    assert all(row[4] != "-" for row in rows.values())  # the baseline's p50 beside each
    plot = latency.find("svg", "latency-plot")
    assert len(plot.find_all("rect", "p50")) == 2 and len(plot.find_all("rect", "baseline")) == 2
