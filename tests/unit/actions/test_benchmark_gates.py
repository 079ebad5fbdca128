"""model_benchmark's gates (kiln.actions.model_benchmark._gates): what fails a benchmark."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kiln.actions.model_benchmark import _gates

pytestmark = pytest.mark.torch  # the action's module imports torch's loader helpers

SPEC: Any = SimpleNamespace(max_p50_ms=None, max_regression=1.05)
BASELINE = {"x=1x10": {"p50_ms": 0.020}}


def _timing(p50: float, spread: float) -> dict[str, dict[str, float]]:
    return {
        "x=1x10": {
            "p50_ms": p50,
            "p90_ms": p50,
            "p99_ms": p50,
            "spread_ms": spread,
            "throughput_per_s": 1000 / p50,
        }
    }


def test_a_slowdown_in_every_repeat_fails_the_gate() -> None:
    rows, failed = _gates(SPEC, _timing(0.030, spread=0.001), BASELINE, updating=False)
    assert failed == [
        "x=1x10: p50 0.030 ms is x1.500 the baseline's 0.020 ms (max_regression 1.05)"
    ]
    assert rows[0][-1] == "x1.500 of baseline <= x1.05: FAIL"


def test_a_slowdown_within_the_runs_own_spread_is_noise_not_a_regression() -> None:
    """Seen on a loaded CI machine: one descheduled repeat made a 0.02 ms call x1000."""
    rows, failed = _gates(SPEC, _timing(20.0, spread=25.0), BASELINE, updating=False)
    assert failed == []
    assert rows[0][-1] == "x1000.000 of baseline <= x1.05: noisy"


def test_within_the_bound_is_ok_and_updating_reads_no_baseline() -> None:
    rows, failed = _gates(SPEC, _timing(0.0201, spread=0.0), BASELINE, updating=False)
    assert (failed, rows[0][-1]) == ([], "x1.005 of baseline <= x1.05: ok")
    _, failed = _gates(SPEC, _timing(9.0, spread=0.0), {}, updating=True)
    assert failed == []
