"""model_test's gates as BUILD files write them: metric names and bounds."""

from __future__ import annotations

import pytest
from kiln.rule_api import Bound
from kiln.rules.testing.model_gates import GateError, check_metric, parse_bound, top_k


@pytest.mark.parametrize(
    ("text", "op", "value"),
    [(">= 0.70", ">=", 0.7), ("<=1e-4", "<=", 1e-4), (" < .5 ", "<", 0.5), ("== -2", "==", -2.0)],
)
def test_a_bound_is_a_comparison_and_a_number(text: str, op: str, value: float) -> None:
    assert parse_bound("m", text) == Bound(metric="m", op=op, value=value, text=text.strip())


@pytest.mark.parametrize("text", ["0.7", ">= ", "at least 0.7", ">= 0.7%", "=> 0.7", ">= 1e"])
def test_anything_else_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(GateError) as error:
        parse_bound("top1", text)
    assert error.value.message == f"cannot read the bound '{text}' of metric 'top1'"
    assert '"top1": ">= 0.70"' in error.value.hint


def test_metric_names() -> None:
    assert (top_k("top1"), top_k("top15"), top_k("top0"), top_k("top-1")) == (1, 15, None, None)
    for name in ("top5", "max_abs_error", "cosine", "mine"):
        check_metric(name, "metrics", ["mine"])
    with pytest.raises(GateError, match="unknown metric 'accuracy' in max_drop"):
        check_metric("accuracy", "max_drop", [])
