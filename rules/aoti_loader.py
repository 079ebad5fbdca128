"""The C++ loader library of an aoti_package (placeholder until the templates land)."""

from __future__ import annotations

from typing import Any

from kiln.analysis.context import RuleContext
from kiln.exec.action import File
from kiln.rules.torch_model import TorchModelInfo


def declare_loader_library(
    ctx: RuleContext[Any], *, package: File, model: TorchModelInfo, device: str, backend: str
) -> list[File]:
    del ctx, package, model, device, backend
    return []
