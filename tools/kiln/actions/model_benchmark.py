"""python -m kiln.actions.model_benchmark SPEC: model_benchmark's timing, run by the test
runner: the artifact through its C++ loader at each shape point, warm-up discarded; each
repeat's p50/p90/p99, and their medians over the repeats (with the p50's spread), against
max_p50_ms and the baseline file's p50 times max_regression. The timings go to
$TEST_UNDECLARED_OUTPUTS_DIR/benchmark.json, which `kiln test --update_baselines` copies
to the baseline file (and with KILN_UPDATE_BASELINES=1 the regression gate is not read).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from kiln.actions import cc_runner
from kiln.actions import spec as action_spec
from kiln.model_test_specs import BenchmarkSpec
from kiln.test_results import UPDATE_BASELINES_ENV as UPDATE_ENV

BASELINE_FORMAT = 1


def point_name(point: tuple[tuple[str, tuple[int, ...]], ...]) -> str:
    return ",".join(f"{name}={'x'.join(map(str, shape))}" for name, shape in point)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def main(spec: BenchmarkSpec) -> None:
    loader_dtypes = _dtypes(spec)
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=os.environ.get("TMPDIR")))
    binary = cc_runner.compile_runner(spec.artifact, work)
    updating = os.environ.get(UPDATE_ENV) == "1"
    baseline = _baseline(spec, required=not updating)
    results: dict[str, dict[str, float]] = {}
    for point in spec.shapes:
        names = [name for name, _ in point]
        if names != list(loader_dtypes):
            raise action_spec.ActionFailure(
                f"{spec.label}: shapes name the inputs {', '.join(names)}; "
                f"{spec.artifact.label} takes {', '.join(loader_dtypes)}"
            )
        inputs = [(loader_dtypes[name], shape) for name, shape in point]
        times = cc_runner.bench_cc(
            spec.artifact,
            binary,
            inputs,
            work,
            warmup=spec.warmup,
            repeats=spec.repeats,
            iterations=spec.iterations,
        )
        p50s = [_percentile(t, 50) for t in times]
        batch = point[0][1][0] if point[0][1] else 1
        p50 = statistics.median(p50s)
        results[point_name(point)] = {
            "p50_ms": p50,
            "p90_ms": statistics.median(_percentile(t, 90) for t in times),
            "p99_ms": statistics.median(_percentile(t, 99) for t in times),
            "spread_ms": max(p50s) - min(p50s),
            "throughput_per_s": batch * 1000.0 / p50 if p50 > 0 else 0.0,
        }
    rows, failed = _gates(spec, results, baseline, updating)
    print(
        f"model_benchmark {spec.label}: {spec.artifact.label} through its C++ loader; "
        f"timings keyed on {spec.machine}; median of {spec.repeats} repeats of "
        f"{spec.iterations} calls after {spec.warmup} warm-up",
        flush=True,
    )
    print(_table(rows), flush=True)
    undeclared = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if undeclared:
        Path(undeclared).mkdir(parents=True, exist_ok=True)
        record = {"format": BASELINE_FORMAT, "machine": spec.machine, "points": results}
        text = json.dumps(record, indent=2, sort_keys=True) + "\n"
        (Path(undeclared) / "benchmark.json").write_text(text)
    if failed:
        raise action_spec.ActionFailure(f"{spec.label}: " + "; ".join(failed))


def _dtypes(spec: BenchmarkSpec) -> dict[str, str]:
    from kiln.actions.model_test import _loader_class

    loader = _loader_class(spec.artifact)
    return {i.name: i.dtype_name for i in loader.INPUTS}


def _baseline(spec: BenchmarkSpec, *, required: bool) -> dict[str, Any]:
    if spec.baseline is None:
        return {}
    text = Path(spec.baseline).read_text(encoding="utf-8").strip()
    try:
        data = json.loads(text) if text else {}
        points = data.get("points", {}) if isinstance(data, dict) else None
    except ValueError as error:
        raise action_spec.ActionFailure(
            f"{spec.label}: the baseline file {spec.baseline} is not JSON ({error}); "
            "write it anew with kiln test --update_baselines"
        ) from None
    if not isinstance(points, dict) or (required and not points):
        if required:
            raise action_spec.ActionFailure(
                f"{spec.label}: the baseline file {spec.baseline} holds no timings; "
                "record them with kiln test --update_baselines"
            )
        return {}
    return points


def _gates(
    spec: BenchmarkSpec,
    results: dict[str, dict[str, float]],
    baseline: dict[str, Any],
    updating: bool,
) -> tuple[list[tuple[str, ...]], list[str]]:
    rows: list[tuple[str, ...]] = []
    failed: list[str] = []
    for point, r in results.items():
        verdicts = []
        if spec.max_p50_ms is not None:
            ok = r["p50_ms"] <= spec.max_p50_ms
            verdicts.append(f"p50 <= {spec.max_p50_ms:g} ms: {'ok' if ok else 'FAIL'}")
            if not ok:
                failed.append(f"{point}: p50 {r['p50_ms']:.3f} ms > max_p50_ms {spec.max_p50_ms:g}")
        base = (
            baseline.get(point, {}).get("p50_ms") if isinstance(baseline.get(point), dict) else None
        )
        if spec.max_regression is not None and not updating:
            if base is None:
                failed.append(
                    f"{point}: the baseline file has no timing for it "
                    "(kiln test --update_baselines)"
                )
                verdicts.append("baseline: none FAIL")
            else:
                ratio = r["p50_ms"] / base
                # A slowdown no larger than this run's own spread across repeats is
                # noise (another process took the CPU during one repeat), not a
                # regression: with sub-millisecond calls one descheduling is a x1000.
                # A real regression slows every repeat, so its spread stays small.
                noise = r["p50_ms"] - base <= r["spread_ms"]
                ok = ratio <= spec.max_regression or noise
                verdict = "ok" if ratio <= spec.max_regression else "noisy" if noise else "FAIL"
                verdicts.append(f"x{ratio:.3f} of baseline <= x{spec.max_regression:g}: {verdict}")
                if not ok:
                    failed.append(
                        f"{point}: p50 {r['p50_ms']:.3f} ms is x{ratio:.3f} the "
                        f"baseline's {base:.3f} ms (max_regression {spec.max_regression:g})"
                    )
        rows.append(
            (
                point,
                f"{r['p50_ms']:.3f}",
                f"{r['p90_ms']:.3f}",
                f"{r['p99_ms']:.3f}",
                f"{r['spread_ms']:.3f}",
                f"{r['throughput_per_s']:.1f}",
                f"{base:.3f}" if base is not None else "-",
                "; ".join(verdicts) or "-",
            )
        )
    return rows, failed


def _table(rows: list[tuple[str, ...]]) -> str:
    header = ("shape", "p50_ms", "p90_ms", "p99_ms", "spread", "per_s", "baseline", "verdict")
    cells = [header, *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


if __name__ == "__main__":
    action_spec.run(main, BenchmarkSpec, sys.argv[1:])
