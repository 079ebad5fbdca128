"""model_test: a built artifact over a dataset, with metrics and gates, as a test.

    model_test(
        name = "mlp_accuracy_test",
        artifact = ":mlp_pt2",                  # an aoti_package: run through its Python loader
        data = ":mlp_data",                     # a model_dataset
        eager = ":mlp",                         # error metrics against eager (or reference =)
        metrics = {"top1": ">= 0.70", "max_abs_error": "<= 1e-4"},
        baseline = ":mlp_old_pt2", max_drop = {"top1": 0.01},
    )

Two actions: ModelEager runs the torch_model over the dataset (keyed on its source and
weights) and writes its outputs; the test (TestRunner around kiln.actions.model_test)
reads the artifact, the data, those outputs and the test's spec. So a comment-only edit of
the model re-runs ModelEager, whose outputs come out the same, and the test's pass stays
cached; retrained weights change the artifact and run it again.
"""

from __future__ import annotations

from typing import Any, Literal

from kiln.rule_api import (
    ArtifactSpec,
    EagerOutputsSpec,
    File,
    LabelAttr,
    ModelTestSpec,
    PythonPackage,
    Resources,
    Rule,
    RuleContext,
    class_name,
    declare_test,
    weights_file_of,
)
from kiln.rules.model.torch_model import TorchModelInfo
from kiln.rules.testing.model_dataset import DatasetInfo
from kiln.rules.testing.model_gates import GateError, check_metric, parse_bound, top_k
from kiln.rules.testing.test_attrs import TestAttrs
from pydantic import Field

PACKAGES = ("torch", "numpy", "safetensors")


class ModelTestAttrs(TestAttrs):
    artifact: LabelAttr = Field(description="the aoti_package under test")
    data: LabelAttr = Field(description="the model_dataset it runs over")
    metrics: dict[str, str] = Field(
        default_factory=dict,
        description='gates: metric -> bound, as {"top1": ">= 0.70", "max_abs_error": "<= 1e-4"}',
    )
    eager: LabelAttr | None = Field(
        default=None, description="the torch_model whose outputs error metrics compare with"
    )
    reference: LabelAttr | None = Field(
        default=None, description="an aoti_package whose outputs error metrics compare with"
    )
    baseline: LabelAttr | None = Field(
        default=None, description="an aoti_package whose metrics max_drop compares with"
    )
    max_drop: dict[str, float] = Field(
        default_factory=dict,
        description="metric -> how far below the baseline's it may fall",
        examples=[{"cosine": 0.001}],
    )
    metric_src: LabelAttr | None = Field(
        default=None, description="a Python file defining the functions of user_metrics"
    )
    user_metrics: list[str] = Field(
        default_factory=list,
        description="metric functions of metric_src: (outputs, labels, reference) -> float",
    )
    runtime: Literal["python", "cc"] = Field(
        default="python",
        description="how the artifact runs: its generated Python loader, or its C++ loader "
        "library (compiled against the toolchain's libtorch; what apps use)",
    )


def implementation(ctx: RuleContext[ModelTestAttrs]) -> list[object]:
    attrs = ctx.attrs
    dataset = ctx.provider("data", attrs.data, DatasetInfo, "a model_dataset target")
    artifact, artifact_files = artifact_spec(ctx, "artifact", attrs.artifact)
    _check_gates(ctx, dataset)
    inputs: list[File] = [*artifact_files, *dataset.files]
    reference = baseline = None
    if attrs.reference:
        reference, files = artifact_spec(ctx, "reference", attrs.reference)
        inputs += files
    if attrs.baseline:
        baseline, files = artifact_spec(ctx, "baseline", attrs.baseline)
        inputs += files
    eager_outputs: File | None = None
    python_env: tuple[PythonPackage, ...] = ()
    if attrs.eager:
        model = ctx.provider("eager", attrs.eager, TorchModelInfo, "a torch_model target")
        python_env = model.python_env
        eager_outputs = ctx.declare_file(f"{ctx.name}.eager.safetensors")
        eager_spec = ctx.declare_file(f"{ctx.name}.eager.json")
        ctx.actions.write_spec(
            eager_spec,
            EagerOutputsSpec(model=model.spec, dataset=dataset.spec, output=eager_outputs.path),
        )
        ctx.actions.run_python(
            mnemonic="ModelEager",
            module="model_eager",
            spec=eager_spec,
            inputs=[*model.files, *dataset.files],
            outputs=[eager_outputs],
            packages=PACKAGES,
            python_env=model.python_env,
            resources=Resources(cpu=1, memory_mb=2000),
        )
        inputs.append(eager_outputs)
    metric_src = ctx.file("metric_src", attrs.metric_src) if attrs.metric_src else None
    if metric_src is not None:
        inputs.append(metric_src)
    spec = ctx.declare_file(f"{ctx.name}.model_test.json")
    ctx.actions.write_spec(
        spec,
        ModelTestSpec(
            label=ctx.label,
            artifact=artifact,
            dataset=dataset.spec,
            eager_outputs=eager_outputs.path if eager_outputs else None,
            reference=reference,
            baseline=baseline,
            bounds=tuple(parse_bound(m, text) for m, text in sorted(attrs.metrics.items())),
            max_drop=tuple(sorted(attrs.max_drop.items())),
            metric_src=metric_src.path if metric_src else None,
            user_metrics=tuple(attrs.user_metrics),
            runtime=attrs.runtime,
        ),
    )
    return declare_test(
        ctx,
        command=("python", "-m", "kiln.actions.model_test", spec.path),
        inputs=[spec, *inputs],
        size=attrs.size,
        timeout=attrs.timeout,
        flaky=attrs.flaky,
        module="model_test",
        packages=PACKAGES,
        python_env=python_env,
        resources=Resources(cpu=1, memory_mb=2000),
    )


def artifact_spec(ctx: RuleContext[Any], attr: str, label: str) -> tuple[ArtifactSpec, list[File]]:
    """The aoti_package `label` as the test runs it, and every file it stands for."""
    files = ctx.files(label)
    name = label.rsplit(":", 1)[-1]
    by_name = {f.path.rsplit("/", 1)[-1]: f for f in files}
    package, loader = by_name.get(f"{name}.pt2"), by_name.get(f"{name}_loader.py")
    if package is None or loader is None:
        raise ctx.error(f"attribute '{attr}' must name an aoti_package target, not {label}")
    weights = by_name.get(weights_file_of(f"{name}.pt2"))
    header, source = by_name.get(f"{name}.h"), by_name.get(f"{name}.cpp")
    spec = ArtifactSpec(
        label=label,
        package=package.path,
        loader=loader.path,
        weights=weights.path if weights else None,
        cc_header=header.path if header else None,
        cc_source=source.path if source else None,
        cc_class=class_name(name),
    )
    return spec, files


def _check_gates(ctx: RuleContext[ModelTestAttrs], dataset: DatasetInfo) -> None:
    attrs = ctx.attrs
    try:
        for metric, bound in attrs.metrics.items():
            check_metric(metric, "metrics", attrs.user_metrics)
            parse_bound(metric, bound)
        for metric in attrs.max_drop:
            check_metric(metric, "max_drop", attrs.user_metrics)
    except GateError as error:
        raise ctx.error(error.message, hint=error.hint) from None
    if attrs.user_metrics and attrs.metric_src is None:
        raise ctx.error("user_metrics needs metric_src: the file defining them")
    if attrs.max_drop and attrs.baseline is None:
        raise ctx.error(
            "max_drop needs a baseline to drop from", hint='add baseline = ":<aoti_package>"'
        )
    if attrs.baseline is not None and not attrs.max_drop:
        raise ctx.error(
            "baseline without max_drop gates nothing", hint='add max_drop = {"top1": 0.01}'
        )
    if attrs.eager is not None and attrs.reference is not None:
        raise ctx.error("give eager or reference, not both: error metrics compare with one")
    named = [*attrs.metrics, *attrs.max_drop]
    if any(top_k(m) is not None for m in named) and dataset.spec.labels is None:
        raise ctx.error(
            f"top-k metrics need labels, and {attrs.data} has none",
            hint='name its label array: model_dataset(..., labels = "y")',
        )
    errors = [m for m in named if top_k(m) is None and m not in attrs.user_metrics]
    if errors and attrs.eager is None and attrs.reference is None:
        raise ctx.error(
            f"{errors[0]} compares with eager or a reference artifact: name one",
            hint='add eager = ":<torch_model>" or reference = ":<aoti_package>"',
        )


RULE = Rule(
    name="model_test",
    attrs=ModelTestAttrs,
    doc="Runs an aoti_package over a model_dataset: metrics, gates against bounds and a "
    "baseline; a test `kiln test` runs and caches.",
    impl=implementation,
    example_deps=(
        ("artifact", "aoti_package"),
        ("data", "model_dataset"),
        ("eager", "torch_model"),
        ("reference", "aoti_package"),
        ("baseline", "aoti_package"),
        ("metric_src", "source"),
    ),
)
