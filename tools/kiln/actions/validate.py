"""AotiValidate: load a .pt2 in a fresh process and compare it with eager.

Runs the package at the min, opt and max of every dynamic dimension and
compares each output with the eager model within rtol/atol. This action
never runs in a persistent worker: some bad inputs abort the whole process
(an uncaught c10::Error), and that must fail this check, not a worker. The
report (JSON) records the largest error, which the build prints.
"""

from __future__ import annotations

import sys
from typing import Any

from kiln.action_specs import ValidateSpec, ValidationCheck, ValidationReport
from kiln.actions import spec as action_spec
from kiln.actions.aoti_package import pin_temp_dirs
from kiln.actions.model_loading import build_model, example_inputs
from kiln.actions.spec import ActionFailure


def main(spec: ValidateSpec) -> None:
    # Loading a package builds helpers into inductor's cache under $TMPDIR: 7 s
    # in a fresh execroot's, nothing in the warm one packaging already uses.
    pin_temp_dirs()
    import torch
    import torch._inductor

    if spec.backend == "tensorrt":
        import torch_tensorrt  # noqa: F401 - registers the TensorRT engine class the package needs

    device = torch.device(spec.device)
    signature = spec.model.signature
    model = build_model(spec.model.source).to(device)
    package = torch._inductor.aoti_load_package(spec.package)
    checks = []
    worst = 0.0
    for point, shapes in signature.shape_points():
        args = tuple(t.to(device) for t in example_inputs(signature.inputs, shapes, seed=1))
        with torch.no_grad():
            expected = _flatten(model(*args))
            actual = _flatten(package(*args))
        shown = {name: list(shape) for name, shape in shapes.items()}
        if len(expected) != len(actual):
            raise ActionFailure(
                f"at {point} {shown}: the package returned {len(actual)} outputs, eager "
                f"{len(expected)}"
            )
        error = max(
            (float((a.float() - e.float()).abs().max()) if a.numel() else 0.0)
            for a, e in zip(actual, expected, strict=True)
        )
        ok = all(
            torch.allclose(a.float(), e.float(), rtol=spec.rtol, atol=spec.atol)
            for a, e in zip(actual, expected, strict=True)
        )
        checks.append(ValidationCheck(point=point, shapes=shapes, max_abs_error=error, ok=ok))
        worst = max(worst, error)
        if not ok:
            raise ActionFailure(
                f"validation failed at the {point} shapes {shown}: max abs error {error:.3g} "
                f"exceeds rtol={spec.rtol:g}, atol={spec.atol:g}"
            )
    report = ValidationReport(package=spec.package, max_abs_error=worst, checks=tuple(checks))
    with open(spec.output, "w", encoding="utf-8") as f:
        f.write(report.to_json())
    print(f"validated: max abs error {worst:.3g} over {len(checks)} shape points")


def _flatten(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flatten(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _flatten(v)]
    return []


if __name__ == "__main__":
    action_spec.run(main, ValidateSpec, sys.argv[1:])
