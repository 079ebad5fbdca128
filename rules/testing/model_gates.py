"""model_test's gates as the BUILD file writes them: metric names and bounds, checked at
analysis so a typo is an error at its line, not a failed test."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kiln.rule_api import ERROR_METRICS, LABEL_METRIC_PREFIX, Bound

_BOUND = re.compile(r"^\s*(>=|<=|==|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
_TOP_K = re.compile(rf"^{LABEL_METRIC_PREFIX}([1-9]\d*)$")


class GateError(ValueError):
    """A gate the BUILD file got wrong: the message, and the fix."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def top_k(metric: str) -> int | None:
    """K of a `top<K>` metric, else None."""
    found = _TOP_K.match(metric)
    return int(found.group(1)) if found else None


def check_metric(metric: str, where: str, user_metrics: Iterable[str]) -> None:
    user = tuple(user_metrics)
    if top_k(metric) is not None or metric in ERROR_METRICS or metric in user:
        return
    known = ", ".join(["top1", "top5 (any top<K>)", *ERROR_METRICS, *user])
    raise GateError(
        f"unknown metric '{metric}' in {where}",
        hint=f"known: {known}; a metric of your own is a function named in user_metrics",
    )


def parse_bound(metric: str, text: str) -> Bound:
    found = _BOUND.match(text)
    if found is None:
        raise GateError(
            f"cannot read the bound '{text}' of metric '{metric}'",
            hint='write a comparison and a number, as in "top1": ">= 0.70" or '
            '"max_abs_error": "<= 1e-4"',
        )
    op, value = found.group(1), float(found.group(2))
    return Bound(metric=metric, op=op, value=value, text=text.strip())  # type: ignore[arg-type]
