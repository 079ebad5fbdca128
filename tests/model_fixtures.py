"""TorchModelInfo samples for rule tests: what a torch_model target hands the rules."""

from __future__ import annotations

from typing import Any

from kiln.host_facts import HostFacts, ToolchainResolver
from kiln.rule_api import (
    AnalyzedTarget,
    DynamicDim,
    File,
    ModelSignature,
    ModelSource,
    ModelSpec,
    Rule,
    RuleContext,
    TensorSpec,
)
from kiln.rules.model.torch_model import TorchModelInfo


def model_info(
    label: str,
    src: str,
    factory: str,
    inputs: tuple[TensorSpec, ...],
    dynamic_dims: tuple[DynamicDim, ...] = (),
) -> TorchModelInfo:
    """The provider of a torch_model without weights or deps, as the rule would make it."""
    spec = ModelSpec(
        label=label,
        source=ModelSource(
            src=src,
            factory=factory,
            factory_kwargs={},
            weights=None,
            seed=0,
            python_deps=(),
            torchvision_cpu_ops=False,
        ),
        signature=ModelSignature(inputs=inputs, dynamic_dims=dynamic_dims),
    )
    return TorchModelInfo(spec, File(src), (), None, ())


MLP = model_info(
    "//models:mlp",
    "models/mlp.py",
    "mlp:build",
    (TensorSpec(name="x", shape=(8, 10), dtype="float32"),),
    (DynamicDim(name="batch", min=1, max=64, axes={"x": 0}),),
)


def rule_context(
    rule: Rule, label: str, attrs: Any, deps: dict[str, AnalyzedTarget] | None = None
) -> RuleContext[Any]:
    """The context analysis would give `rule`'s implementation on this machine."""
    return RuleContext(
        rule, label, attrs, deps or {}, ToolchainResolver(HostFacts.of_this_machine())
    )


# Two inputs of other dtypes, one dim bound on both, another on one.
DETECTOR = model_info(
    "//models:detector",
    "models/detector.py",
    "detector:build",
    (
        TensorSpec(name="image", shape=(2, 3, 64, 48), dtype="float16"),
        TensorSpec(name="class", shape=(2, 7), dtype="int64"),
    ),
    (
        DynamicDim(name="batch", min=1, max=8, opt=4, axes={"image": 0, "class": 0}),
        DynamicDim(name="height", min=32, max=512, axes={"image": 2}),
    ),
)
