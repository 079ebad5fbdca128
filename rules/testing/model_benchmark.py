"""model_benchmark: latency (p50/p90/p99) and throughput of an artifact through its C++
loader at declared shapes, as a test with gates.

    model_benchmark(
        name = "resnet_latency",
        artifact = ":resnet_pt2",
        shapes = [{"image": [1, 3, 224, 224]}, {"image": [8, 3, 224, 224]}],
        max_p50_ms = 50.0,
        baseline = "resnet_latency.json", max_regression = 1.05,
    )

Warm-up calls are discarded; each repeat's percentiles are computed, and the medians over
the repeats are what gates read (their spread is shown). The timings are keyed on this
machine's CPU model and core count (the CPU toolchain), so a pass is never served on
another machine. `kiln test --update_baselines` writes the baseline file.
"""

from __future__ import annotations

from kiln.rule_api import (
    BASELINE_ENV,
    BenchmarkSpec,
    LabelAttr,
    Resources,
    Rule,
    RuleContext,
    declare_test,
)
from kiln.rules.testing.cpu_toolchain import CPU
from kiln.rules.testing.model_test import PACKAGES, artifact_spec
from kiln.rules.testing.test_attrs import TestAttrs
from pydantic import Field


class ModelBenchmarkAttrs(TestAttrs):
    artifact: LabelAttr = Field(description="the aoti_package to time")
    shapes: list[dict[str, list[int]]] = Field(
        min_length=1, description="shape points: input name -> shape, for every input"
    )
    warmup: int = Field(default=10, ge=0, description="calls discarded before timing")
    repeats: int = Field(default=5, ge=1, description="timed repeats; gates read their median")
    iterations: int = Field(default=20, ge=1, description="calls timed per repeat")
    max_p50_ms: float | None = Field(
        default=None, gt=0, description="the median latency (ms) may not exceed this"
    )
    max_regression: float | None = Field(
        default=None, gt=1, description="p50 may grow at most this factor over the baseline's"
    )
    baseline: LabelAttr | None = Field(
        default=None, description="a JSON file of timings kept in the repository"
    )


def implementation(ctx: RuleContext[ModelBenchmarkAttrs]) -> list[object]:
    attrs = ctx.attrs
    if attrs.max_regression is not None and attrs.baseline is None:
        raise ctx.error(
            "max_regression needs a baseline file to compare with",
            hint='add baseline = "<name>.json" (an empty file at first) and run '
            "kiln test --update_baselines",
        )
    if attrs.baseline is not None and attrs.max_regression is None:
        raise ctx.error("baseline without max_regression gates nothing")
    artifact, files = artifact_spec(ctx, "artifact", attrs.artifact)
    baseline = ctx.file("baseline", attrs.baseline) if attrs.baseline else None
    model, cores = ctx.toolchain(CPU)
    machine = f"{model} x {cores} cores"
    spec = ctx.declare_file(f"{ctx.name}.benchmark.json")
    ctx.actions.write_spec(
        spec,
        BenchmarkSpec(
            label=ctx.label,
            artifact=artifact,
            shapes=tuple(
                tuple((name, tuple(shape)) for name, shape in point.items())
                for point in attrs.shapes
            ),
            warmup=attrs.warmup,
            repeats=attrs.repeats,
            iterations=attrs.iterations,
            max_p50_ms=attrs.max_p50_ms,
            max_regression=attrs.max_regression,
            baseline=baseline.path if baseline else None,
            machine=machine,
        ),
    )
    return declare_test(
        ctx,
        command=("python", "-m", "kiln.actions.model_benchmark", spec.path),
        inputs=[spec, *files, *([baseline] if baseline else [])],
        size=attrs.size,
        timeout=attrs.timeout,
        flaky=attrs.flaky,
        env={BASELINE_ENV: baseline.path} if baseline else {},
        module="model_benchmark",
        packages=PACKAGES,
        # Timed alone, on every core: keyed on the CPU, never served on another machine.
        resources=Resources(cpu=cores),
        platform={"cpu_model": model, "cpu_count": str(cores)},
    )


RULE = Rule(
    name="model_benchmark",
    attrs=ModelBenchmarkAttrs,
    doc="Times an aoti_package through its C++ loader at declared shapes; gates on p50 and "
    "on regression against a baseline file; a test `kiln test` runs.",
    impl=implementation,
    toolchains=(CPU,),
)
