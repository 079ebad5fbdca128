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

from typing import Any

from kiln.action_graph import Resources
from kiln.exec.toolchain import python_toolchain
from kiln.rule_api import LabelAttr, LabelListAttr, OutputAttr, Rule, RuleAttrs
from kiln.rule_api.context import RuleContext
from kiln.rule_api.providers import DefaultInfo
from pydantic import Field


class ModelWeightsAttrs(RuleAttrs):
    src: LabelAttr
    deps: LabelListAttr = Field(default_factory=list)
    factory: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
    factory_kwargs: dict[str, int | float | str | bool] = Field(default_factory=dict)
    seed: int = 0
    out: OutputAttr = Field(pattern=r"\.(safetensors|pt)$")


def implementation(ctx: RuleContext[ModelWeightsAttrs]) -> list[object]:
    attrs = ctx.attrs
    sources = ctx.files([attrs.src, *attrs.deps])
    weights = ctx.declare_file(attrs.out)
    spec = ctx.declare_file(f"{ctx.name}.weights.json")
    model: dict[str, Any] = {
        "src": ctx.files(attrs.src)[0].path,
        "factory": attrs.factory,
        "factory_kwargs": dict(attrs.factory_kwargs),
        "weights": None,
        "seed": attrs.seed,
    }
    ctx.actions.write_json(spec, {"model": model, "output": weights.path})
    ctx.actions.run_python(
        mnemonic="ModelWeights",
        module="init_weights",
        spec=spec,
        inputs=sources,
        outputs=[weights],
        platform=python_toolchain("torch", "safetensors"),
        resources=Resources(cpu=1, memory_mb=2000),
    )
    return [DefaultInfo((weights,))]


RULE = Rule(
    name="model_weights",
    attrs=ModelWeightsAttrs,
    doc="Seeded initial weights of a model, saved as safetensors (or a torch state dict).",
    impl=implementation,
)
