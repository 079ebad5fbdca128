"""python -m kiln.actions.model_test SPEC: model_test's check, run by the test runner.

The artifact runs over the dataset through its generated Python loader (what apps use);
then the metrics (top-k against labels; max/mean abs error, max relative error and the
least per-sample cosine against eager's outputs or a reference artifact; the user's own
functions), and the gates: bounds, and drops against a baseline artifact. It prints a table
of every metric, its value, its bound and the verdict; a gate that fails exits 1 (the test
FAILED). The metrics also go to $TEST_UNDECLARED_OUTPUTS_DIR/metrics.json when set.
"""

from __future__ import annotations

import importlib.util
import json
import operator
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kiln.actions import spec as action_spec
from kiln.actions.datasets import (
    InputShape,
    batches,
    named,
    read_arrays,
    run_batches,
    samples,
)
from kiln.actions.errors import ActionError, summary, user_location
from kiln.model_test_specs import ERROR_METRICS, ArtifactSpec, Bound, ModelTestSpec

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}


@dataclass(frozen=True)
class Row:
    metric: str
    value: float
    bound: str
    baseline: str
    ok: bool | None  # None: no gate


def main(spec: ModelTestSpec) -> None:
    arrays = read_arrays(spec.dataset)
    labels = named(spec.dataset, arrays, spec.dataset.labels) if spec.dataset.labels else None
    outputs, count = _run(spec.artifact, spec, arrays)
    reference = None
    if spec.eager_outputs:
        from safetensors.torch import load_file

        reference = load_file(spec.eager_outputs)["output"]
    elif spec.reference:
        reference, _ = _run(spec.reference, spec, arrays)
    user = _user_metrics(spec)
    wanted = sorted({*(b.metric for b in spec.bounds), *(m for m, _ in spec.max_drop)} | set(user))
    values = {m: _metric(m, outputs, labels, reference, user) for m in wanted}
    drops = dict(spec.max_drop)
    baseline_values: dict[str, float] = {}
    if spec.baseline is not None:
        base, _ = _run(spec.baseline, spec, arrays)
        baseline_values = {m: _metric(m, base, labels, reference, user) for m in drops}
    rows = _rows(values, spec.bounds, drops, baseline_values)
    print(
        f"model_test {spec.label}: {spec.artifact.label} over {spec.dataset.label} "
        f"({count} samples)"
    )
    print(_table(rows), flush=True)  # before a failure's line on stderr, in the log
    undeclared = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if undeclared:
        Path(undeclared).mkdir(parents=True, exist_ok=True)
        (Path(undeclared) / "metrics.json").write_text(json.dumps(values, sort_keys=True) + "\n")
    failed = [r for r in rows if r.ok is False]
    if failed:
        raise action_spec.ActionFailure(
            f"{spec.label}: {len(failed)} of {sum(r.ok is not None for r in rows)} gates failed: "
            + ", ".join(f"{r.metric} = {_number(r.value)} (wants {r.bound})" for r in failed)
        )


def _run(
    artifact: ArtifactSpec, spec: ModelTestSpec, arrays: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, int]:
    """The artifact's first output for every sample, through the runtime's loader."""
    loader = _loader_class(artifact)
    shapes = [
        InputShape(i.name, i.dtype, tuple((d.min, d.max) for d in i.dims)) for i in loader.INPUTS
    ]
    tensors, count = samples(spec.dataset, arrays, artifact.label, shapes)
    if spec.runtime == "cc":
        from kiln.actions import cc_runner

        work = Path(tempfile.mkdtemp(prefix="cc-", dir=os.environ.get("TMPDIR")))
        binary = cc_runner.compile_runner(artifact, work)
        chunks = list(batches(tensors, count, shapes[0].dims[0]))
        outs = cc_runner.run_cc(artifact, binary, chunks, work)
        kept, done = [], 0
        for chunk, out in zip(chunks, outs, strict=True):
            take = min(chunk[0].shape[0], count - done)
            kept.append(out[:take])
            done += take
        return torch.cat(kept), count
    model = loader(artifact.package, weights_path=artifact.weights, plain_outputs=True)
    try:
        return run_batches(model, tensors, count, shapes[0].dims[0]), count
    except ValueError as error:  # the loader's InputError: an input it was not built for
        raise ActionError(
            f"{artifact.label} refused the dataset: {error}", label=spec.dataset.label
        ) from None


def _loader_class(artifact: ArtifactSpec) -> Any:
    path = Path(artifact.loader)
    loaded = importlib.util.spec_from_file_location(path.stem, path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules[loaded.name] = module  # dataclasses look their module up
    loaded.loader.exec_module(module)
    return getattr(module, module.__all__[0])


def _user_metrics(spec: ModelTestSpec) -> dict[str, Callable[..., Any]]:
    if not spec.metric_src:
        return {}
    path = Path(spec.metric_src)
    sys.path.insert(0, str(path.parent))
    try:
        loaded = importlib.util.spec_from_file_location(path.stem, path)
        assert loaded is not None and loaded.loader is not None
        module = importlib.util.module_from_spec(loaded)
        sys.modules[loaded.name] = module  # dataclasses look their module up
        loaded.loader.exec_module(module)
    except Exception as error:
        raise ActionError(
            f"cannot import {path}: {summary(error)}",
            label=spec.label,
            location=user_location(error),
            cause=error,
        ) from error
    found = {}
    for name in spec.user_metrics:
        function = getattr(module, name, None)
        if not callable(function):
            raise ActionError(
                f"{path} defines no function '{name}' (named in user_metrics)", label=spec.label
            )
        found[name] = function
    return found


def _metric(
    name: str,
    outputs: torch.Tensor,
    labels: torch.Tensor | None,
    reference: torch.Tensor | None,
    user: dict[str, Callable[..., Any]],
) -> float:
    if name in user:
        try:
            return float(user[name](outputs, labels, reference))
        except Exception as error:
            raise ActionError(
                f"the metric {name} failed: {summary(error)}",
                location=user_location(error),
                cause=error,
            ) from error
    if name in ERROR_METRICS:
        assert reference is not None
        a, r = outputs.double().flatten(1), reference.double().flatten(1)
        if a.shape != r.shape:
            raise ActionError(
                f"the outputs are {list(outputs.shape)}, the reference's "
                f"{list(reference.shape)}: no {name} between them"
            )
        if name == "max_abs_error":
            return float((a - r).abs().max())
        if name == "mean_abs_error":
            return float((a - r).abs().mean())
        if name == "max_rel_error":
            return float(((a - r).abs() / r.abs().clamp_min(1e-12)).max())
        return float(torch.nn.functional.cosine_similarity(a, r, dim=1, eps=1e-12).min())
    k = int(name.removeprefix("top"))
    assert labels is not None
    if outputs.dim() != 2 or outputs.shape[1] < k:
        raise ActionError(
            f"{name} needs [samples, classes >= {k}] outputs, not {list(outputs.shape)}"
        )
    top = outputs.topk(k, dim=1).indices
    return float((top == labels.long().view(-1, 1)).any(dim=1).double().mean())


def _rows(
    values: dict[str, float],
    bounds: tuple[Bound, ...],
    drops: dict[str, float],
    baseline: dict[str, float],
) -> list[Row]:
    rows = []
    by_metric = {b.metric: b for b in bounds}
    for metric, value in values.items():
        bound = by_metric.get(metric)
        ok = None if bound is None else _COMPARE[bound.op](value, bound.value)
        rows.append(Row(metric, value, bound.text if bound else "-", "-", ok))
        if metric in drops:
            floor = baseline[metric] - drops[metric]
            rows.append(
                Row(
                    f"{metric} (drop)",
                    value,
                    f">= {_number(floor)}",
                    f"{_number(baseline[metric])} - {_number(drops[metric])}",
                    value >= floor,
                )
            )
    return rows


def _number(value: float) -> str:
    return f"{value:.6g}"


def _table(rows: list[Row]) -> str:
    header = ("metric", "value", "bound", "baseline", "verdict")
    cells = [header] + [
        (
            r.metric,
            _number(r.value),
            r.bound,
            r.baseline,
            "-" if r.ok is None else ("ok" if r.ok else "FAIL"),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


if __name__ == "__main__":
    action_spec.run(main, ModelTestSpec, sys.argv[1:])
