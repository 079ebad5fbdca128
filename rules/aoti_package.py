"""aoti_package: an AOTInductor .pt2 package (optionally with TensorRT engines)."""

from __future__ import annotations

from typing import Any, Literal

from kiln.analysis import LabelAttr, Rule, RuleAttrs
from pydantic import Field


class AotiPackageAttrs(RuleAttrs):
    model: LabelAttr
    device: Literal["cpu", "cuda"] = "cpu"
    backend: Literal["inductor", "tensorrt"] = "inductor"
    cpu_target: str = "native"
    inductor_configs: dict[str, Any] = Field(default_factory=dict)
    validate_: bool = Field(default=True, alias="validate")
    rtol: float = 1e-4
    atol: float = 1e-4
    # Torch-TensorRT settings (backend = "tensorrt")
    min_block_size: int = 1
    workspace_size: int = 0
    optimization_level: int | None = None
    hardware_compatible: bool = False
    use_explicit_typing: bool | None = None


RULE = Rule(
    name="aoti_package",
    attrs=AotiPackageAttrs,
    doc=(
        "Exports `model` with torch.export and packages it with AOTInductor "
        "(or Torch-TensorRT when backend = 'tensorrt'); validates it against eager; "
        "emits a C++ loader library."
    ),
)
