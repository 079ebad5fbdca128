"""model_weights: deterministic initial weights for a model, as a build step.

    model_weights(
        name = "resnet_weights",
        src = "resnet.py",
        factory = "resnet:build",
        seed = 0,
        out = "resnet18.safetensors",
    )

Builds the module with torch's generator seeded, and saves its state dict
as safetensors: the same bytes on every machine, so a model whose weights
are not worth checking in still has real, strictly-matched weights.
"""

from __future__ import annotations

from kiln.rule_api import (
    DefaultInfo,
    FactoryValue,
    LabelAttr,
    LabelListAttr,
    ModelSource,
    OutputAttr,
    Resources,
    Rule,
    RuleAttrs,
    RuleContext,
    WeightsSpec,
)
from kiln.rules.model.torch_model import FACTORY_PATTERN
from kiln.rules.pip.python_requirements import declared_packages
from pydantic import Field


class ModelWeightsAttrs(RuleAttrs):
    src: LabelAttr = Field(description="the Python file defining the factory")
    deps: LabelListAttr = Field(
        default_factory=list,
        description="other Python files the model imports, and the third-party packages "
        "it imports as '@pip//<name>' (python_requirements)",
    )
    factory: str = Field(
        pattern=FACTORY_PATTERN, description="'module:function'", examples=["resnet:build"]
    )
    factory_kwargs: dict[str, FactoryValue] = Field(
        default_factory=dict, description="keyword arguments of the factory"
    )
    seed: int = Field(default=0, description="torch's seed before the factory runs")
    out: OutputAttr = Field(
        pattern=r"\.(safetensors|pt)$",
        description="the weights file to write: .safetensors or .pt",
        examples=["resnet18.safetensors"],
    )


def implementation(ctx: RuleContext[ModelWeightsAttrs]) -> list[object]:
    attrs = ctx.attrs
    weights = ctx.declare_file(attrs.out)
    spec = ctx.declare_file(f"{ctx.name}.weights.json")
    declared = declared_packages(ctx, "deps", attrs.deps)
    source = ModelSource(
        src=ctx.file("src", attrs.src).path,
        factory=attrs.factory,
        factory_kwargs=dict(attrs.factory_kwargs),
        weights=None,
        seed=attrs.seed,
        python_deps=declared.labels,
        torchvision_cpu_ops=declared.torchvision_cpu_ops,
    )
    ctx.actions.write_spec(spec, WeightsSpec(source=source, output=weights.path))
    ctx.actions.run_python(
        mnemonic="ModelWeights",
        module="init_weights",
        spec=spec,
        inputs=ctx.files([attrs.src, *attrs.deps]),
        outputs=[weights],
        packages=("torch", "safetensors"),
        python_env=declared.packages,
        resources=Resources(cpu=1, memory_mb=2000),
    )
    return [DefaultInfo((weights,))]


RULE = Rule(
    name="model_weights",
    attrs=ModelWeightsAttrs,
    doc="Seeded initial weights of a model, saved as safetensors (or a torch state dict).",
    impl=implementation,
)
