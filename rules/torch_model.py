"""torch_model: a PyTorch module defined in plain Python, ready to export."""

from __future__ import annotations

from typing import Literal

from kiln.analysis import LabelAttr, LabelListAttr, Rule, RuleAttrs
from pydantic import BaseModel, ConfigDict, Field

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


class TorchModelAttrs(RuleAttrs):
    src: LabelAttr
    deps: LabelListAttr = Field(default_factory=list)
    factory: str
    factory_kwargs: dict[str, int | float | str | bool] = Field(default_factory=dict)
    weights: LabelAttr | None = None
    inputs: list[TensorSpec]
    dynamic_dims: list[DynamicDim] = Field(default_factory=list)


RULE = Rule(
    name="torch_model",
    attrs=TorchModelAttrs,
    doc=(
        "A model: `src` (and `deps`) define `factory` ('module:function') returning an "
        "nn.Module; optional `weights`; example `inputs` and `dynamic_dims` for torch.export."
    ),
)
