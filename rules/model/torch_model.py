"""torch_model: a PyTorch module defined in plain Python, ready to export.

    torch_model(
        name = "mlp",
        src = "mlp.py",                 # defines the factory
        deps = ["layers.py",            # other Python files it imports,
                "@pip//timm"],          # and the locked packages (python_requirements)
        factory = "mlp:build",          # module:function returning an nn.Module
        weights = "mlp.safetensors",    # optional; safetensors or a torch state dict
        inputs = [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
        dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
    )

`inputs` are the example inputs torch.export traces with; each dynamic
dimension becomes a torch.export.Dim bound to the named input axes. The
rule runs nothing: it hands the model to the rules that export it, with the
locked closure of its `@pip//` deps, which every action that imports the
model runs with (and is keyed on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from kiln.rule_api import (
    INTEGER_DTYPES,
    DefaultInfo,
    DynamicDim,
    FactoryValue,
    File,
    LabelAttr,
    LabelListAttr,
    ModelSignature,
    ModelSource,
    ModelSpec,
    PythonPackage,
    Rule,
    RuleAttrs,
    RuleContext,
    TensorSpec,
)
from kiln.rules.pip.python_requirements import declared_packages
from pydantic import Field, model_validator

FACTORY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"


class TorchModelAttrs(RuleAttrs):
    src: LabelAttr = Field(description="the Python file defining the factory")
    deps: LabelListAttr = Field(
        default_factory=list,
        description="other Python files the model imports, and the third-party packages "
        "it imports as '@pip//<name>' (python_requirements)",
    )
    factory: str = Field(
        pattern=FACTORY_PATTERN,
        description="'module:function' returning the nn.Module (module relative to src)",
        examples=["mlp:build"],
    )
    factory_kwargs: dict[str, FactoryValue] = Field(
        default_factory=dict, description="keyword arguments of the factory"
    )
    weights: LabelAttr | None = Field(
        default=None,
        description="a safetensors file or torch state dict, loaded strictly; default: the "
        "factory's own (seeded) initialization",
    )
    inputs: list[TensorSpec] = Field(
        min_length=1,
        description="example inputs: [{'name', 'shape', 'dtype'}], in order",
        examples=[[{"name": "x", "shape": [8, 10], "dtype": "float32"}]],
    )
    dynamic_dims: list[DynamicDim] = Field(
        default_factory=list,
        description="dimensions that vary: [{'name', 'min', 'max', 'opt', 'axes': {input: axis}}]",
    )

    @model_validator(mode="after")
    def _integer_inputs_declare_their_values(self) -> Self:
        # Without a range, export and validation sampled [0, 10) and the loaders checked
        # nothing: an id past the vocabulary aborted the application (exit 134) instead
        # of being refused (issue 20).
        for spec in self.inputs:
            if spec.dtype in INTEGER_DTYPES and spec.value_range is None:
                raise ValueError(
                    f"integer input '{spec.name}' ({spec.dtype}) declares no values: give "
                    '"low" and "high", the values it takes (high exclusive, e.g. "low": 0, '
                    '"high": the vocabulary size), so that validation samples all of them and '
                    "the loaders refuse the rest"
                )
        return self

    @model_validator(mode="after")
    def _dims_match_inputs(self) -> Self:
        shapes = {spec.name: spec.shape for spec in self.inputs}
        for name, shape in shapes.items():
            for axis, size in enumerate(shape):
                if size < 1:
                    raise ValueError(
                        f"the example input '{name}' has size {size} on axis {axis}: "
                        "torch.export cannot trace an empty example; give every axis a size "
                        "of 1 or more"
                    )
        bound: dict[tuple[str, int], str] = {}
        for dim in self.dynamic_dims:
            for name, axis in dim.axes.items():
                other = bound.setdefault((name, axis), dim.name)
                if other != dim.name:
                    raise ValueError(
                        f"dynamic dims '{other}' and '{dim.name}' both bind axis {axis} of "
                        f"'{name}': an axis has one size, so give it one dynamic dim"
                    )
                if name not in shapes:
                    raise ValueError(
                        f"dynamic dim '{dim.name}' binds input '{name}', which is not in "
                        f"inputs ({', '.join(shapes)})"
                    )
                if not 0 <= axis < len(shapes[name]):
                    raise ValueError(
                        f"dynamic dim '{dim.name}' binds axis {axis} of '{name}', which has "
                        f"{len(shapes[name])} axes"
                    )
                size = shapes[name][axis]
                if size == 1 and dim.max > 1:
                    raise ValueError(
                        f"the example input '{name}' has size 1 on axis {axis}, the dynamic dim "
                        f"'{dim.name}': torch.export specializes a size-1 example to the constant "
                        f"1, so the dimension could not vary; give the example a size of 2 or "
                        f"more inside [{dim.min}, {dim.max}]"
                    )
                if not dim.min <= size <= dim.max:
                    raise ValueError(
                        f"the example input '{name}' has size {size} on axis {axis}, outside "
                        f"the dynamic dim '{dim.name}' range [{dim.min}, {dim.max}]"
                    )
        return self


@dataclass(frozen=True)
class TorchModelInfo:
    """A model as the export rules need it: its files, and the record actions read."""

    spec: ModelSpec
    src: File
    deps: tuple[File, ...]
    weights: File | None
    # The locked closure of its `@pip//` deps: what its actions' environment holds.
    python_env: tuple[PythonPackage, ...]

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def signature(self) -> ModelSignature:
        return self.spec.signature

    @property
    def files(self) -> list[File]:
        return [self.src, *self.deps, *([self.weights] if self.weights else [])]


def implementation(ctx: RuleContext[TorchModelAttrs]) -> list[object]:
    attrs = ctx.attrs
    src = ctx.file("src", attrs.src)
    weights = ctx.file("weights", attrs.weights) if attrs.weights else None
    declared = declared_packages(ctx, "deps", attrs.deps)
    spec = ModelSpec(
        label=ctx.label,
        source=ModelSource(
            src=src.path,
            factory=attrs.factory,
            factory_kwargs=dict(attrs.factory_kwargs),
            weights=weights.path if weights else None,
            seed=0,
            python_deps=declared.labels,
            torchvision_cpu_ops=declared.torchvision_cpu_ops,
        ),
        signature=ModelSignature(
            inputs=tuple(attrs.inputs), dynamic_dims=tuple(attrs.dynamic_dims)
        ),
    )
    info = TorchModelInfo(spec, src, tuple(ctx.files(attrs.deps)), weights, declared.packages)
    return [DefaultInfo(tuple(info.files)), info]


RULE = Rule(
    name="torch_model",
    attrs=TorchModelAttrs,
    doc=(
        "A model: `src` (and `deps`) define `factory` ('module:function') returning an "
        "nn.Module; optional `weights`; example `inputs` and `dynamic_dims` for torch.export."
    ),
    impl=implementation,
)
