"""validate.compare: one output of a package against eager's, as the validation judges it.

Non-finite values are values: where eager has inf, -inf or NaN, the package must have the
same at the same places, and then they cost nothing (issue 20: a package equal to eager
failed because its outputs held -inf)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from kiln.action_specs import OutputCheck  # noqa: E402
from kiln.actions.validate import compare  # noqa: E402

pytestmark = pytest.mark.torch

INF, NAN = math.inf, math.nan


def check(actual: list[float], expected: list[float]) -> OutputCheck:
    return compare(
        "y", torch.tensor(actual), torch.tensor(expected), rtol=1e-4, atol=1e-5, min_cosine=0.99
    )


@pytest.mark.parametrize("special", [INF, -INF, NAN], ids=["inf", "-inf", "nan"])
def test_the_same_non_finite_value_at_the_same_place_is_equal(special: float) -> None:
    result = check([1.0, special, 3.0], [1.0, special, 3.0])
    assert result.ok
    assert result.max_abs_error == 0.0
    assert result.reference_max == 3.0  # the finite places' scale
    assert result.cosine == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        ([1.0, INF, 3.0], [1.0, -INF, 3.0]),  # the other sign
        ([1.0, 2.0, 3.0], [1.0, -INF, 3.0]),  # finite where eager has -inf
        ([1.0, -INF, 3.0], [1.0, 2.0, 3.0]),  # -inf where eager is finite
        ([1.0, NAN, 3.0], [1.0, 2.0, 3.0]),
        ([1.0, 2.0, 3.0], [1.0, NAN, 3.0]),
        ([1.0, NAN, 3.0], [1.0, INF, 3.0]),
    ],
    ids=["inf_vs_-inf", "finite_vs_-inf", "-inf_vs_finite", "nan_vs_finite", "finite_vs_nan",
         "nan_vs_inf"],
)  # fmt: skip
def test_a_non_finite_value_anywhere_else_is_an_infinite_error(
    actual: list[float], expected: list[float]
) -> None:
    result = check(actual, expected)
    assert not result.ok
    assert result.max_abs_error == INF


def test_finite_places_are_still_judged_beside_equal_infinities() -> None:
    assert not check([1.0, -INF, 3.5], [1.0, -INF, 3.0]).ok
    assert check([1.0, -INF, 3.00001], [1.0, -INF, 3.0]).ok
