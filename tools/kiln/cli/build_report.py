"""The record of an invocation (kiln.report.record), gathered as `kiln build` or `kiln
test` ends, however it ends: kept in the output base (last-invocation.json, written
whole) and, with --report=FILE.html, rendered there (kiln.report.html).

What it reads: the command's Reports (phases, the actions' timeline, the executed
graph, the tests' results) and the files the actions left in kiln-out/: each target's
outputs and their sizes, an aoti_package's <name>.validation.json, a model_test's
metrics.json and its spec's bounds, a model_benchmark's benchmark.json and the
baseline file it is compared with.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from kiln.action_graph import Action
from kiln.cli.reports import Reports
from kiln.cli.session import Session
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
from kiln.test_results import BASELINE_ENV, BENCHMARK

TEST_MNEMONIC = "TestRunner"
METRICS = "undeclared_outputs/metrics.json"  # kiln.actions.model_test writes it
_COMPARE = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
}


def finish_report(session: Session, reports: Reports, command: str, patterns: list[str]) -> None:
    """The invocation's record into the output base; with --report, its HTML. A file that
    cannot be written is a warning: the build's own result stands."""
    record = gather(session, reports, command, patterns)
    try:
        session.output_base.root.mkdir(parents=True, exist_ok=True)
        _replace(session.output_base.last_invocation, record.to_json())
    except OSError as error:
        click.echo(f"WARNING: cannot keep the record of this {command}: {error}", err=True)
    if reports.report is not None:
        from kiln.report.html import write

        try:
            write(record, reports.report)
        except OSError as error:
            click.echo(f"WARNING: cannot write --report={reports.report}: {error}", err=True)
        else:
            click.echo(f"INFO: Build report: {reports.report}", err=True)


def gather(session: Session, reports: Reports, command: str, patterns: list[str]) -> Invocation:
    root = session.workspace.root
    origin = reports.origin
    actions = tuple(
        ActionRecord(
            label=outcome.action.owner,
            mnemonic=outcome.action.mnemonic,
            output=outcome.action.primary_output.path,
            status=outcome.status,
            source=outcome.source_name,
            lane=outcome.lane,
            start=round(max(0.0, start - origin), 6),
            seconds=round(max(0.0, end - start), 6),
            reason=outcome.explanation if outcome.status != "cached" else "",
            failure=outcome.failure.message if outcome.failure else "",
        )
        for start, end, outcome in sorted(reports.timeline.finished, key=lambda f: f[0])
    )
    phases = tuple(
        Phase(p.name, round(p.start - origin, 6), round((p.end or p.start) - origin, 6))
        for p in reports.phases
    )
    done = reports.executed
    planned: list[Action] = list(done.planned) if done is not None else []
    errors = [e.format() for e in done.errors] if done is not None else []
    if reports.error and done is None:  # loading or analysis stopped the command
        errors.append(reports.error)
    tests = {t.label: t for t in reports.tests}
    owners = list(dict.fromkeys([a.owner for a in planned] + list(tests)))
    by_owner: dict[str, list[Action]] = {}
    for action in planned:
        by_owner.setdefault(action.owner, []).append(action)
    # the specs file-write actions wrote (a test's): known at analysis, and so readable
    # even where a failed test's outputs left kiln-out/
    written = {a.primary_output.path: a.content for a in planned if a.content is not None}
    targets = tuple(
        _target(label, by_owner.get(label, []), tests.get(label), root, written) for label in owners
    )
    return Invocation(
        command=command,
        patterns=tuple(patterns),
        started=datetime.fromtimestamp(reports.started, UTC).isoformat(timespec="seconds"),
        seconds=round(max((p.end for p in phases), default=0.0), 3),
        exit_code=reports.exit_code,
        workspace=str(root),
        phases=phases,
        actions=actions,
        targets=targets,
        errors=tuple(errors),
    )


def _target(
    label: str, actions: list[Action], test: Any, root: Path, written: dict[str, bytes]
) -> TargetRecord:
    files: list[FileSize] = []
    validation = None
    for action in actions:
        if action.mnemonic == TEST_MNEMONIC:
            continue
        for output in action.outputs:
            path = root / output.path
            size = _size(path)
            if size is None:
                continue
            files.append(FileSize(output.path, _kind(output.path), size))
            if output.path.endswith(".validation.json"):
                validation = _validation(path) or validation
    return TargetRecord(
        label, tuple(files), validation, _test(test, root, written) if test else None
    )


def _kind(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    if name.endswith(".pt2"):
        return "program"
    if name.endswith(".weights.safetensors"):
        return "weights"
    return "output"


def _size(path: Path) -> int | None:
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size
    except OSError:
        return None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _spec(path: str, root: Path, written: dict[str, bytes]) -> Any:
    if path in written:
        try:
            return json.loads(written[path])
        except ValueError:
            return None
    return _json(root / path)


def _validation(path: Path) -> Validation | None:
    """<name>.validation.json (kiln.action_specs.ValidationReport), read loosely."""
    data = _json(path)
    try:
        points = tuple(
            ValidationPoint(
                point=str(check["point"]),
                shapes=", ".join(
                    f"{name}={'x'.join(map(str, shape))}"
                    for name, shape in check.get("shapes", {}).items()
                ),
                max_abs_error=float(check["max_abs_error"]),
                max_relative_error=_float(check.get("max_relative_error")),
                cosine=float(check["min_cosine"]),
                ok=bool(check["ok"]),
            )
            for check in data["checks"]
        )
        return Validation(
            path.name, float(data["atol"]), float(data["rtol"]), float(data["min_cosine"]), points
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _test(target: Any, root: Path, written: dict[str, bytes]) -> TestRecord:
    """A test_summary.TargetResult: the status over its runs, and what its last run that
    reported left: model_test metrics, model_benchmark timings."""
    runs = target.runs
    reported = [r for r in runs if r.run is not None]
    seconds = sum(r.run.seconds for r in reported)
    log = f"{runs[0].test.logs}/test.log" if reported and len(runs) == 1 else ""
    kind = ""
    metrics: tuple[Metric, ...] = ()
    latencies: tuple[Latency, ...] = ()
    if runs:
        action = runs[-1].test.action
        results = root / action.primary_output.path
        specs = [f.path for f in action.inputs]
        model_test = next((p for p in specs if p.endswith(".model_test.json")), None)
        benchmark = next((p for p in specs if p.endswith(".benchmark.json")), None)
        if model_test:
            kind = "model_test"
            spec = _spec(model_test, root, written)
            metrics = _metrics(spec, _json(results / METRICS), runs[-1].log)
        elif benchmark:
            kind = "model_benchmark"
            baseline = dict(action.env).get(BASELINE_ENV)
            latencies = _latencies(
                _spec(benchmark, root, written),
                _json(results / BENCHMARK) or _logged_timings(runs[-1].log),
                _json(root / baseline) if baseline else None,
            )
    return TestRecord(
        status=target.status,
        cached=bool(runs) and target.cached,
        seconds=round(seconds, 3),
        runs=len(runs),
        log=log,
        kind=kind,
        metrics=metrics,
        latencies=latencies,
    )


def _metrics(spec: Any, values: Any, log: str) -> tuple[Metric, ...]:
    """Each metric's value (metrics.json; else the log's table, for a run that failed and
    so kept no outputs) against the spec's bounds."""
    bounds = spec.get("bounds", []) if isinstance(spec, dict) else []
    if not isinstance(values, dict):
        values = _logged_metrics(log)
    metrics = []
    for name, value in sorted(values.items()):
        if not isinstance(value, int | float):
            continue
        gates = [b for b in bounds if isinstance(b, dict) and b.get("metric") == name]
        text = ", ".join(str(b.get("text", "")) for b in gates)
        verdicts = [
            _COMPARE[b["op"]](value, b["value"])
            for b in gates
            if b.get("op") in _COMPARE and isinstance(b.get("value"), int | float)
        ]
        metrics.append(Metric(name, float(value), text, all(verdicts) if verdicts else None))
    return tuple(metrics)


def _logged_metrics(log: str) -> dict[str, float]:
    """model_test's table (metric, value, bound, baseline, verdict) as its log holds it."""
    found: dict[str, float] = {}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.split()[:2] == ["metric", "value"]:
            for row in lines[i + 1 :]:
                cells = row.split()
                if len(cells) < 2:
                    break
                try:
                    found[cells[0]] = float(cells[1])
                except ValueError:
                    break
            break
    return found


def _logged_timings(log: str) -> dict[str, Any]:
    """model_benchmark's table (shape, p50_ms, p90_ms, p99_ms, ...) as its log holds it,
    as benchmark.json would: a failed run (a regression) keeps no outputs."""
    points: dict[str, dict[str, float]] = {}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.split()[:4] == ["shape", "p50_ms", "p90_ms", "p99_ms"]:
            for row in lines[i + 1 :]:
                cells = row.split()
                try:
                    p50, p90, p99 = (float(c) for c in cells[1:4])
                except ValueError:
                    break
                points[cells[0]] = {"p50_ms": p50, "p90_ms": p90, "p99_ms": p99}
            break
    return {"points": points}


def _latencies(spec: Any, timings: Any, baseline: Any) -> tuple[Latency, ...]:
    points = timings.get("points") if isinstance(timings, dict) else None
    if not isinstance(points, dict):
        return ()
    spec = spec if isinstance(spec, dict) else {}
    base = baseline.get("points", {}) if isinstance(baseline, dict) else {}
    found = []
    for point, t in points.items():
        try:
            before = base.get(point, {}).get("p50_ms") if isinstance(base, dict) else None
            found.append(
                Latency(
                    point=point,
                    p50_ms=float(t["p50_ms"]),
                    p90_ms=float(t["p90_ms"]),
                    p99_ms=float(t["p99_ms"]),
                    baseline_ms=_float(before),
                    max_p50_ms=_float(spec.get("max_p50_ms")),
                    max_regression=_float(spec.get("max_regression")),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return tuple(found)


def _replace(path: Path, text: str) -> None:
    """Write a whole file (a temp file beside it, renamed over it)."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
