"""AotiValidate: load a .pt2 in a fresh process and compare it with eager's golden outputs.

Runs the package at every shape point TorchExport recorded goldens for (the min,
opt and max of every dynamic dimension), on the same deterministic inputs, and
compares each output with eager's by a measure that scales with it:

    max abs error <= atol + rtol * max |eager|      (relative to the output's magnitude)
    cosine(package, eager) >= min_cosine            (the same direction, not just small)

so an output of magnitude 1e-5 (random-weight EfficientNets) is held to 1e-9, and
an all-zero or shuffled output fails whatever its magnitude. The report
(<name>.validation.json) has abs and relative errors and the cosine of every
output at every point; the build prints a line per point.

It reads no model source: a comment-only edit of the model re-runs TorchExport,
whose goldens come out byte-identical, and this check is a cache hit.

Some bad inputs abort the whole process (an uncaught c10::Error). So the checks
run in a child process of this action: a child that dies is reported as a failed
check at the shape point it had reached, in one paragraph, with the C++ error's
text. In a persistent worker that child is forked from the worker's fork server
(kiln.fork_server: torch already imported, and a package that aborts kills the
child, never the worker); elsewhere it is a fresh `python -m`.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kiln import cpu_isa, fork_server
from kiln.action_specs import (
    GoldenOutputs,
    GoldenPoint,
    OutputCheck,
    ValidateSpec,
    ValidationCheck,
    ValidationReport,
)
from kiln.actions import spec as action_spec
from kiln.actions.errors import ActionError, at_point, summary
from kiln.actions.spec import ERROR_PREFIX, ActionFailure, verbose

CHILD = "--checks"


# -- the measure ----------------------------------------------------------------------


def compare(
    name: str, actual: Any, expected: Any, *, rtol: float, atol: float, min_cosine: float
) -> OutputCheck:
    """One output of the package against eager's (torch tensors of the same shape)."""
    a = actual.detach().to("cpu").double()
    e = expected.detach().to("cpu").double()
    if a.numel() == 0:
        return OutputCheck(
            output=name,
            shape=tuple(e.shape),
            max_abs_error=0.0,
            reference_max=0.0,
            relative_error=0.0,
            cosine=1.0,
            ok=True,
        )
    # inf, -inf and NaN are values like any other where eager has the same at the same
    # place (a masked softmax's -inf: inf - inf is NaN, which failed a package equal to
    # eager); anywhere else a non-finite value is an infinite error. The measures below
    # (the reference scale, the cosine) are over the finite places only.
    same = (a == e) | (a.isnan() & e.isnan())
    special = ~(a.isfinite() & e.isfinite())
    diff = (a - e).abs().masked_fill(special, math.inf).masked_fill(same, 0.0)
    max_abs = float(diff.max())
    reference = float(e.abs().masked_fill(special, 0.0).max())
    relative = max_abs / reference if reference > 0 else (0.0 if max_abs == 0 else None)
    cosine = _cosine(a.masked_fill(special, 0.0), e.masked_fill(special, 0.0))
    ok = max_abs <= atol + rtol * reference and cosine >= min_cosine
    return OutputCheck(
        output=name,
        shape=tuple(e.shape),
        max_abs_error=max_abs,
        reference_max=reference,
        relative_error=relative,
        cosine=cosine,
        ok=ok,
    )


def _cosine(a: Any, e: Any) -> float:
    na, ne = float(a.norm()), float(e.norm())
    if na == 0 and ne == 0:
        return 1.0
    if na == 0 or ne == 0 or not (math.isfinite(na) and math.isfinite(ne)):
        return 0.0
    return max(-1.0, min(1.0, float((a.flatten() @ e.flatten()) / (na * ne))))


def _looks(actual: Any, expected: Any) -> str:
    """A name for what a wrong output looks like, where one fits."""
    import torch

    a, e = actual.detach().to("cpu").double(), expected.detach().to("cpu").double()
    if a.isnan().any() and not e.isnan().any():
        return "; the package's output holds NaN"
    if not a.any() and e.any():
        return "; the package's output is all zeros"
    scale = float(e.abs().max()) if e.numel() else 0.0
    if a.shape == e.shape and torch.allclose(
        a.flatten().sort().values, e.flatten().sort().values, rtol=1e-3, atol=1e-6 * scale
    ):
        return "; the package's output holds eager's values in another order"
    return ""


# -- the checks (child process) ---------------------------------------------------------


def read_goldens(path: str) -> tuple[GoldenOutputs, Any]:
    from safetensors import safe_open

    handle = safe_open(path, framework="pt")
    metadata = handle.metadata() or {}  # type: ignore[no-untyped-call]
    if "kiln" not in metadata:
        raise ActionError(f"{path} holds no golden outputs record (rebuild it)")
    return GoldenOutputs.from_json(metadata["kiln"], source=path), handle


def checks(spec: ValidateSpec, progress: Path) -> None:
    import torch

    from kiln.actions import package_loading
    from kiln.actions.model_loading import example_inputs

    if spec.backend == "tensorrt":
        from kiln.actions import torchtrt_runtime

        torchtrt_runtime.load()  # the engine class and ops the package needs, nothing more

    _check_this_cpu(spec)
    goldens, tensors = read_goldens(spec.goldens)
    device = torch.device(spec.device)
    # AOTIModelPackageLoader itself: no torch._inductor import, nothing compiled (the
    # package and, for weights = "separate", its weights file, checked).
    try:
        package = package_loading.load(spec.package, spec.weights)
    except ActionFailure as error:
        raise ActionError(str(error), label=spec.label, cause=error) from error
    results = []
    for golden in goldens.points:
        progress.write_text(golden.point)
        inputs = example_inputs(spec.signature.inputs, golden.shapes, seed=goldens.input_seed)
        where = _where(golden)
        try:
            with torch.no_grad():
                # The flat outputs, in pytree order: what the goldens hold, and no import
                # of the output types (Hugging Face's) is needed to unflatten them.
                outputs = package(*(t.to(device) for t in inputs))
        except Exception as error:
            raise ActionError(
                f"the package fails {where}: {summary(error)}",
                label=spec.label,
                hint=f"eager runs there ({spec.model}'s goldens were made at these shapes): "
                "a packaging problem; try another cpu_target or inductor_configs of the "
                "aoti_package",
                cause=error,
            ) from error
        if len(outputs) != len(golden.outputs):
            raise ActionError(
                f"the package returned {len(outputs)} outputs {where}, eager {len(golden.outputs)}",
                label=spec.label,
            )
        outcome = []
        for out, ref in zip(outputs, golden.outputs, strict=True):
            expected = tensors.get_tensor(ref.tensor)
            name = ref.path or "output"
            if tuple(out.shape) != tuple(expected.shape):
                raise ActionError(
                    f"the package's {name} has shape {list(out.shape)} {where}, eager's "
                    f"{list(expected.shape)}",
                    label=spec.label,
                )
            check = compare(
                name,
                out,
                expected,
                rtol=spec.rtol,
                atol=spec.atol,
                min_cosine=spec.min_cosine,
            )
            if not check.ok:
                raise _mismatch(spec, check, where, _looks(out, expected))
            outcome.append(check)
        results.append(_point_check(golden, outcome))
    report = ValidationReport(
        # The package's file name, not its path: the path names the output root, which
        # must not reach the report's bytes.
        package=Path(spec.package).name,
        rtol=spec.rtol,
        atol=spec.atol,
        min_cosine=spec.min_cosine,
        max_abs_error=max(c.max_abs_error for c in results),
        max_relative_error=_worst(c.max_relative_error for c in results),
        checks=tuple(results),
    )
    Path(spec.output).write_text(report.to_json(), encoding="utf-8")
    print(summary_text(report))


def _check_this_cpu(spec: ValidateSpec) -> None:
    """Refuse to run a package whose code needs instructions this CPU lacks (a named
    cpu_target above this machine's): it would die of SIGILL, saying nothing."""
    metadata: dict[str, str] = {}
    with zipfile.ZipFile(spec.package) as archive:  # the wrapper's and the kernels' metadata
        for record in archive.namelist():
            if record.endswith("_metadata.json") and "/aotinductor/" in record:
                metadata.update(json.loads(archive.read(record)))
    isa, needed = cpu_isa.needed_by(metadata)
    here = cpu_isa.this_cpu_flags()
    missing = cpu_isa.lacking(needed, here) if here is not None else []
    if missing:
        raise ActionError(
            f"this machine cannot run the package to validate it: it needs the instruction "
            f"set {isa}; this CPU lacks {' '.join(missing)}",
            label=spec.label,
            hint="validate it on a machine of that instruction set, or build for a lower "
            "cpu_target (docs/models.md)",
        )


def _point_check(golden: GoldenPoint, outputs: Sequence[OutputCheck]) -> ValidationCheck:
    return ValidationCheck(
        point=golden.point,
        shapes=golden.shapes,
        max_abs_error=max((o.max_abs_error for o in outputs), default=0.0),
        max_relative_error=_worst(o.relative_error for o in outputs),
        min_cosine=min((o.cosine for o in outputs), default=1.0),
        outputs=tuple(outputs),
        ok=all(o.ok for o in outputs),
    )


def _worst(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _where(golden: GoldenPoint) -> str:
    return at_point(golden.point, dict(golden.shapes))


def _mismatch(spec: ValidateSpec, check: OutputCheck, where: str, looks: str) -> ActionError:
    relative = (
        f"relative {check.relative_error:.3g} to eager's largest magnitude "
        f"{check.reference_max:.3g}"
        if check.relative_error is not None
        else "where eager's output is all zero"
    )
    return ActionError(
        f"the package's {check.output} differs from eager {where}: max abs error "
        f"{check.max_abs_error:.3g}, {relative} (allowed: rtol {spec.rtol:g}, atol "
        f"{spec.atol:g}), cosine similarity {check.cosine:.4f} (allowed: >= "
        f"{spec.min_cosine:g}){looks}",
        label=spec.label,
        hint=f"if the exported program computes something else than eager by design "
        f"(torch.compiler.is_exporting(), randomness, train mode), fix the model of "
        f"{spec.model}; if the difference is expected numerics (float16, TensorRT), "
        f"loosen rtol, atol or min_cosine of {spec.label}",
    )


def summary_text(report: ValidationReport) -> str:
    """What the build shows: the worst figures, then a line per shape point."""
    lines = [
        f"validated: max abs error {report.max_abs_error:.3g}, relative "
        f"{_relative(report.max_relative_error)}, lowest cosine "
        f"{min(c.min_cosine for c in report.checks):.6f} over {len(report.checks)} shape "
        f"points (rtol {report.rtol:g} of each output's largest magnitude, atol "
        f"{report.atol:g}, cosine >= {report.min_cosine:g})"
    ]
    for check in report.checks:
        shapes = ", ".join(f"{n}: {list(s)}" for n, s in check.shapes.items())
        lines.append(
            f"  {check.point:<7} {shapes}: abs {check.max_abs_error:.3g}, relative "
            f"{_relative(check.max_relative_error)}, cosine {check.min_cosine:.6f}"
        )
    return "\n".join(lines)


def _relative(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


# -- the action (parent process) --------------------------------------------------------


def main(spec: ValidateSpec, argv: Sequence[str]) -> None:
    """Run the checks in a child; relay its result; report a child that died in one
    paragraph, at the shape point it had reached."""
    progress = Path(os.environ.get("TMPDIR") or "/tmp") / f"kiln-validate-{os.getpid()}"
    progress.unlink(missing_ok=True)
    returncode, stdout, stderr = _run_checks([CHILD, *argv, str(progress)])
    sys.stdout.write(stdout)
    reached = progress.read_text() if progress.exists() else ""
    progress.unlink(missing_ok=True)
    if returncode == 0:
        sys.stderr.write(stderr)
        return
    marker = stderr.find(ERROR_PREFIX)
    if returncode == 1 and marker >= 0:
        sys.stderr.write(stderr if verbose() else stderr[marker:])
        raise SystemExit(1)
    raise _died(spec, returncode, stderr, reached)


def _run_checks(argv: list[str]) -> tuple[int, str, str]:
    """`python -m kiln.actions.validate argv` in a child: (exit status, stdout, stderr).

    In a persistent worker the child is forked from the worker's fork server, torch
    already imported (1.5 s less); elsewhere it is a fresh interpreter."""
    server = fork_server.current()
    if server is not None:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                code = server.run(
                    "kiln.actions.validate",
                    argv,
                    os.environ,
                    os.getcwd(),
                    (0, out.fileno(), err.fileno()),
                )
            except OSError:
                pass  # the server is gone (killed by the OOM killer, say): a fresh process
            else:
                out.seek(0)
                err.seek(0)
                return code, _text(out.read()), _text(err.read())
    child = subprocess.run(
        [sys.executable, "-m", "kiln.actions.validate", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    return child.returncode, child.stdout, child.stderr


def _text(data: bytes) -> str:
    return data.decode(errors="replace")


def _died(spec: ValidateSpec, code: int, stderr: str, reached: str) -> ActionError:
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
    what = next(
        (line.split("what():", 1)[1].strip() for line in stderr.splitlines() if "what():" in line),
        "",
    )
    shapes = dict(spec.signature.shape_points()).get(reached)  # type: ignore[call-overload]
    stage = at_point(reached, shapes) if reached else "while loading"
    message = f"the package {how} {stage}" + (f": {what}" if what else "")
    if verbose():
        message += "\n" + stderr.rstrip()
    return ActionError(
        message,
        label=spec.label,
        hint=f"eager runs at these shapes ({spec.model}'s goldens were made there): a packaging "
        "or runtime problem of the .pt2; AOTI_RUNTIME_CHECK_INPUTS=1 and --verbose_failures "
        "show more",
    )


def _main(argv: list[str]) -> None:
    if argv[:1] == [CHILD] and len(argv) == 3:
        progress = Path(argv[2])
        action_spec.run(lambda spec: checks(spec, progress), ValidateSpec, [argv[1]])
    else:
        action_spec.run(lambda spec: main(spec, argv), ValidateSpec, argv)


if __name__ == "__main__":
    _main(sys.argv[1:])
