"""The build report: an invocation's record rendered as one self-contained HTML page;
the figures are in its DOM (tables, SVG bars), and every user string is escaped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kiln.cli.build_report import (
    _latencies,
    _logged_metrics,
    _logged_timings,
    _metrics,
    _validation,
)
from kiln.report.html import human_bytes, render, write
from kiln.report.record import (
    ActionRecord,
    FileSize,
    Invocation,
    Latency,
    Metric,
    Phase,
    TargetRecord,
    TestRecord,
    Validation,
    ValidationPoint,
)

from tests.unit.report.html_dom import Element, parse

EVIL = '//evil:<script>alert("x")</script>&'


def invocation() -> Invocation:
    return Invocation(
        command="test",
        patterns=("//models/...",),
        started="2026-12-05T23:00:00+00:00",
        seconds=12.5,
        exit_code=3,
        workspace="/ws",
        phases=(
            Phase("loading", 0.0, 0.5),
            Phase("analysis", 0.5, 0.7),
            Phase("execution", 0.7, 12.5),
        ),
        actions=(
            ActionRecord(
                "//models:mlp_pt2",
                "AotiCompile",
                "kiln-out/models/mlp.so",
                "executed",
                "worker",
                "worker-1",
                0.8,
                6.0,
                reason="input changed: models/mlp.py",
            ),
            ActionRecord(
                "//models:mlp_pt2",
                "TorchExport",
                "kiln-out/models/mlp.pt2e",
                "cached",
                "disk",
                "local-1",
                0.7,
                0.05,
            ),
            ActionRecord(
                EVIL,
                "Genrule",
                "kiln-out/evil/x",
                "failed",
                "local",
                "local-2",
                1.0,
                0.5,
                reason="new action: never built in this workspace",
                failure="exited with code 1: <b>boom</b>",
            ),
        ),
        targets=(
            TargetRecord(
                "//models:mlp_pt2",
                files=(
                    FileSize("kiln-out/models/mlp_pt2.pt2", "program", 2_345_678),
                    FileSize("kiln-out/models/mlp_pt2.weights.safetensors", "weights", 1024),
                ),
                validation=Validation(
                    "mlp_pt2.validation.json",
                    1e-4,
                    1e-3,
                    0.999,
                    (
                        ValidationPoint("min", "x=1x8", 2.5e-6, 1.2e-5, 0.99999, True),
                        ValidationPoint("max", "x=64x8", 3.25e-3, None, 0.9, False),
                    ),
                ),
            ),
            TargetRecord(
                "//models:mlp_accuracy",
                test=TestRecord(
                    "FAILED",
                    False,
                    3.2,
                    1,
                    "kiln-testlogs/models/mlp_accuracy/test.log",
                    "model_test",
                    metrics=(
                        Metric("top1", 0.65, ">= 0.70", False),
                        Metric("cosine", 0.9999, ">= 0.999", True),
                        Metric("max_abs_error", 0.0012),
                    ),
                ),
            ),
            TargetRecord(
                "//models:mlp_bench",
                test=TestRecord(
                    "PASSED",
                    True,
                    5.0,
                    1,
                    kind="model_benchmark",
                    latencies=(
                        Latency("x=1x8", 0.125, 0.15, 0.2, 0.1, 1.0, 1.5),
                        Latency("x=64x8", 2.5, 2.9, 3.1, None, 1.0, None),
                    ),
                ),
            ),
            TargetRecord(EVIL, test=TestRecord("NO STATUS", False, 0.0, 1)),
        ),
        errors=("//bad:x: <i>no such target</i>",),
    )


@pytest.fixture(scope="module")
def page() -> tuple[str, Element]:
    text = render(invocation())
    return text, parse(text)


def target(dom: Element, label: str) -> Element:
    (found,) = [d for d in dom.find_all("div", "target") if d.attrs["data-label"] == label]
    return found


def test_the_page_is_self_contained(page: tuple[str, Element]) -> None:
    text, dom = page
    assert not dom.find_all("script") and not dom.find_all("link") and not dom.find_all("img")
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in text and "@import" not in text and "url(" not in text
    assert dom.find("style").text.strip()


def test_user_strings_are_escaped(page: tuple[str, Element]) -> None:
    text, dom = page
    assert "<script>" not in text and "<b>boom" not in text and "<i>no such" not in text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;" in text
    # ... and read back as the strings they were
    assert target(dom, EVIL).find("h3").text == EVIL
    (failed,) = dom.find("svg", "timeline").find_all("rect", "failed")
    assert failed.text.startswith(f"Genrule {EVIL}: failed")
    assert "exited with code 1: <b>boom</b>" in dom.find("table", "actions").text
    assert dom.find("ul", "errors").text.strip() == "//bad:x: <i>no such target</i>"


def test_summary_and_outcome(page: tuple[str, Element]) -> None:
    _, dom = page
    outcome = next(e for e in dom.iter() if e.attrs.get("id") == "outcome")
    assert "Failed (exit code 3) in 12.50s" in " ".join(outcome.text.split())
    counts = {
        e.attrs["id"]: e.text for e in dom.iter() if e.attrs.get("id", "").startswith("count-")
    }
    assert counts == {
        "count-actions": "3",
        "count-executed": "1",
        "count-cached": "1",
        "count-failed": "1",
    }


def test_sizes_are_in_a_table_and_a_bar_each(page: tuple[str, Element]) -> None:
    _, dom = page
    mlp = target(dom, "//models:mlp_pt2")
    rows = mlp.find("table", "sizes").rows()
    assert rows[1] == ["kiln-out/models/mlp_pt2.pt2", "program", "2.2 MiB", "2345678"]
    assert rows[2] == ["kiln-out/models/mlp_pt2.weights.safetensors", "weights", "1.0 KiB", "1024"]
    plot = mlp.find("svg", "sizes-plot")
    assert {"mlp_pt2.pt2", "2.2 MiB", "mlp_pt2.weights.safetensors"} <= {
        t.text for t in plot.find_all("text")
    }
    bars = plot.find_all("rect")
    assert [sorted(b.classes) for b in bars] == [["program", "size"], ["size", "weights"]]
    widths = [float(b.attrs["width"]) for b in bars]
    assert widths[0] == 360.0 and widths[1] == pytest.approx(360 * 1024 / 2_345_678, abs=1)
    assert human_bytes(512) == "512 B" and human_bytes(3 * 1024**3) == "3.0 GiB"


def test_validation_errors_at_each_point(page: tuple[str, Element]) -> None:
    _, dom = page
    rows = target(dom, "//models:mlp_pt2").find("table", "validation").rows()
    assert rows[1] == ["min", "x=1x8", "2.5e-06", "1.2e-05", "1", "ok"]
    assert rows[2] == ["max", "x=64x8", "0.00325", "-", "0.9", "FAIL"]


def test_test_metrics_against_bounds(page: tuple[str, Element]) -> None:
    _, dom = page
    accuracy = target(dom, "//models:mlp_accuracy")
    assert accuracy.find("span", "status").text == "FAILED"
    assert accuracy.find("table", "metrics").rows()[1:] == [
        ["top1", "0.65", ">= 0.70", "FAIL"],
        ["cosine", "0.9999", ">= 0.999", "ok"],
        ["max_abs_error", "0.0012", "-", "-"],
    ]
    assert target(dom, EVIL).find("span", "status").text == "NO STATUS"


def test_benchmark_latency_against_baseline_is_plotted(page: tuple[str, Element]) -> None:
    _, dom = page
    bench = target(dom, "//models:mlp_bench")
    assert "(cached)" in bench.find("p", "test").text
    rows = bench.find("table", "latencies").rows()
    assert rows[1][:6] == ["x=1x8", "0.125", "0.15", "0.2", "0.1", "x1.25"]
    assert rows[2][4:6] == ["-", "-"]
    plot = bench.find("svg", "latency-plot")
    p50, baseline = plot.find_all("rect", "p50"), plot.find_all("rect", "baseline")
    assert len(p50) == 2 and len(baseline) == 1  # the second point has no baseline
    assert "baseline p50 0.100 ms" in baseline[0].text
    # bars to scale: 0.125 against 0.1
    assert float(p50[0].attrs["height"]) / float(baseline[0].attrs["height"]) == pytest.approx(
        1.25, rel=0.01
    )
    assert len(plot.find_all("line", "gate")) == 2  # max_p50_ms at both points


def test_timeline_has_a_bar_per_action_on_its_lane_and_reasons(page: tuple[str, Element]) -> None:
    _, dom = page
    svg = dom.find("svg", "timeline")
    actions = svg.find_all("rect", "action")
    assert len(actions) == 3 and len(svg.find_all("rect", "phase")) == 3
    lanes = [t.text for t in svg.find_all("text")]
    assert {"local-1", "local-2", "worker-1"} <= set(lanes)
    compile_bar = next(a for a in actions if "AotiCompile" in a.text)
    assert "executed" in compile_bar.classes and "input changed: models/mlp.py" in compile_bar.text
    # bars are placed by time: 6 s of 12.5 is 48% of the plot's 900 px
    assert float(compile_bar.attrs["width"]) == pytest.approx(900 * 6 / 12.5, abs=0.1)
    table = dom.find("table", "actions").rows()
    assert table[1][0] == "//models:mlp_pt2" and table[1][-1] == "input changed: models/mlp.py"
    assert table[2][2] == "failed" and "new action" in table[2][-1]
    hits = dom.find("table", "hits").rows()
    assert hits[1] == ["//models:mlp_pt2", "TorchExport", "disk", "kiln-out/models/mlp.pt2e"]


def test_record_round_trips_and_refuses_others(tmp_path: Path) -> None:
    record = invocation()
    assert Invocation.from_json(record.to_json()) == record
    assert Invocation.from_json("{}") is None
    assert Invocation.from_json("not json") is None
    data = json.loads(record.to_json())
    data["targets"][0]["files"][0]["bytes"] = "big"
    assert Invocation.from_json(json.dumps(data)) is None
    out = tmp_path / "r.html"
    write(record, out)
    assert out.read_text() == render(record)
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # no temp file left


def test_an_empty_invocation_renders() -> None:
    dom = parse(render(Invocation("build", ("//x",), "t", 0.0, 1, "/ws", errors=("boom",))))
    assert "No action ran." in dom.text and "No target." in dom.text


def test_results_read_from_the_actions_files(tmp_path: Path) -> None:
    report = tmp_path / "m.validation.json"
    report.write_text(
        json.dumps(
            {
                "package": "m.pt2",
                "rtol": 1e-3,
                "atol": 1e-4,
                "min_cosine": 0.99,
                "max_abs_error": 1e-5,
                "max_relative_error": None,
                "checks": [
                    {
                        "point": "opt",
                        "shapes": {"x": [4, 8]},
                        "max_abs_error": 1e-5,
                        "max_relative_error": None,
                        "min_cosine": 1.0,
                        "outputs": [],
                        "ok": True,
                    }
                ],
            }
        )
    )
    validation = _validation(report)
    assert validation is not None
    assert validation.points == (ValidationPoint("opt", "x=4x8", 1e-5, None, 1.0, True),)
    report.write_text("{}")
    assert _validation(report) is None
    spec = {"bounds": [{"metric": "top1", "op": ">=", "value": 0.7, "text": ">= 0.70"}]}
    assert _metrics(spec, {"top1": 0.75, "cosine": 1.0}, "") == (
        Metric("cosine", 1.0),
        Metric("top1", 0.75, ">= 0.70", True),
    )
    log = (
        "model_test //m:t: ...\n"
        "metric  value  bound    baseline  verdict\n"
        "top1    0.5    >= 0.70  -         FAIL\n"
    )
    assert _logged_metrics(log) == {"top1": 0.5}
    assert _metrics(spec, None, log) == (Metric("top1", 0.5, ">= 0.70", False),)
    timings = {"points": {"x=1x8": {"p50_ms": 2.0, "p90_ms": 3.0, "p99_ms": 4.0}}}
    baseline = {"points": {"x=1x8": {"p50_ms": 1.0}}}
    assert _latencies({"max_p50_ms": None, "max_regression": 1.5}, timings, baseline) == (
        Latency("x=1x8", 2.0, 3.0, 4.0, 1.0, None, 1.5),
    )
    assert _latencies({}, None, None) == ()
    log = (
        "model_benchmark //m:b: ...\n"
        "shape    p50_ms  p90_ms  p99_ms  spread  per_s   baseline  verdict\n"
        "x=1x10   14.869  16.044  16.044  8.046   67.3    0.011     p50 <= 1000 ms: ok\n"
        "kiln-action-error: //m:b: x=1x10: p50 14.869 ms is x1413.253 the baseline's\n"
    )
    logged = _logged_timings(log)
    assert logged == {"points": {"x=1x10": {"p50_ms": 14.869, "p90_ms": 16.044, "p99_ms": 16.044}}}
    assert _latencies({}, logged, {"points": {"x=1x10": {"p50_ms": 0.011}}})[0].baseline_ms == (
        0.011
    )
