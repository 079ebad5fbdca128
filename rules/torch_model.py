"""torch_model: a PyTorch module defined in plain Python, ready to export.

    torch_model(
        name = "mlp",
        src = "mlp.py",                 # defines the factory
        deps = ["layers.py"],           # other Python files it imports
        factory = "mlp:build",          # module:function returning an nn.Module
        weights = "mlp.safetensors",    # optional; safetensors or a torch state dict
        inputs = [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
        dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
    )

`inputs` are the example inputs torch.export traces with; each dynamic
dimension becomes a torch.export.Dim bound to the named input axes. The
rule runs nothing: it hands the model to the rules that export it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Self

from kiln.action_graph import File
from kiln.rule_api import LabelAttr, LabelListAttr, Rule, RuleAttrs
from kiln.rule_api.context import RuleContext
from kiln.rule_api.providers import DefaultInfo
from pydantic import BaseModel, ConfigDict, Field, model_validator

DType = Literal["float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "bool"]


class TensorSpec(BaseModel):
    """One example input of the model: what torch.export traces with."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: str
    shape: list[int]
    dtype: DType = "float32"


class DynamicDim(BaseModel):
    """A dimension that varies at run time: torch.export.Dim(name, min=, max=)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: str
    min: int = Field(ge=0)
    max: int = Field(ge=1)
    opt: int | None = None
    # input name -> the axis of that input this dimension binds, e.g. {"x": 0}
    axes: dict[str, int]

    @model_validator(mode="after")
    def _range(self) -> Self:
        if self.min > self.max:
            raise ValueError(f"dynamic dim '{self.name}': min {self.min} > max {self.max}")
        if self.opt is not None and not self.min <= self.opt <= self.max:
            raise ValueError(
                f"dynamic dim '{self.name}': opt {self.opt} is outside [{self.min}, {self.max}]"
            )
        if not self.axes:
            raise ValueError(f"dynamic dim '{self.name}' binds no input axis")
        return self


class TorchModelAttrs(RuleAttrs):
    src: LabelAttr
    deps: LabelListAttr = Field(default_factory=list)
    factory: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
    factory_kwargs: dict[str, int | float | str | bool] = Field(default_factory=dict)
    weights: LabelAttr | None = None
    inputs: list[TensorSpec] = Field(min_length=1)
    dynamic_dims: list[DynamicDim] = Field(default_factory=list)

    @model_validator(mode="after")
    def _dims_match_inputs(self) -> Self:
        shapes = {spec.name: spec.shape for spec in self.inputs}
        for dim in self.dynamic_dims:
            for name, axis in dim.axes.items():
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
    """A model as the export rules need it; spec() is what the actions read."""

    label: str
    src: File
    deps: tuple[File, ...]
    weights: File | None
    factory: str
    factory_kwargs: dict[str, Any]
    inputs: tuple[TensorSpec, ...]
    dynamic_dims: tuple[DynamicDim, ...]

    @property
    def files(self) -> list[File]:
        return [self.src, *self.deps, *([self.weights] if self.weights else [])]

    def spec(self) -> dict[str, Any]:
        return {
            "model": {
                "src": self.src.path,
                "factory": self.factory,
                "factory_kwargs": self.factory_kwargs,
                "weights": self.weights.path if self.weights else None,
            },
            "inputs": [i.model_dump() for i in self.inputs],
            "dynamic_dims": [d.model_dump() for d in self.dynamic_dims],
        }


def implementation(ctx: RuleContext[TorchModelAttrs]) -> list[object]:
    attrs = ctx.attrs
    src = _one(ctx, "src", attrs.src)
    weights = _one(ctx, "weights", attrs.weights) if attrs.weights else None
    info = TorchModelInfo(
        label=ctx.label,
        src=src,
        deps=tuple(ctx.files(attrs.deps)),
        weights=weights,
        factory=attrs.factory,
        factory_kwargs=dict(attrs.factory_kwargs),
        inputs=tuple(attrs.inputs),
        dynamic_dims=tuple(attrs.dynamic_dims),
    )
    return [DefaultInfo(tuple(info.files)), info]


def _one(ctx: RuleContext[TorchModelAttrs], attr: str, label: str) -> File:
    files = ctx.files(label)
    if len(files) != 1:
        raise ctx.error(f"attribute '{attr}' must name exactly one file; {label} has {len(files)}")
    return files[0]


RULE = Rule(
    name="torch_model",
    attrs=TorchModelAttrs,
    doc=(
        "A model: `src` (and `deps`) define `factory` ('module:function') returning an "
        "nn.Module; optional `weights`; example `inputs` and `dynamic_dims` for torch.export."
    ),
    impl=implementation,
)
