"""Deliberately wrong packages: a model whose exported program is not its eager self.

`build(model="mlp", how="zeroed")` wraps models/mlp.py's model. Eagerly it is that
model; under torch.export it returns zeros ("zeroed") or its outputs reversed along
the last axis ("permuted"), or indexes an embedding past its rows ("aborts"), so
AOTInductor packages exactly that, while the goldens hold eager's true outputs.
Validation has to catch each.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn


class Wrong(nn.Module):
    def __init__(self, model: nn.Module, how: str):
        super().__init__()
        self.model = model
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "aborts" and torch.compiler.is_exporting():
            x = x + 1_000_000  # token ids far past the vocabulary
        out = self.model(x)
        if not torch.compiler.is_exporting():
            return out
        if self.how == "zeroed":
            return torch.zeros_like(out)
        if self.how == "permuted":
            return out.flip(-1)
        return out


def build(model: str, how: str) -> nn.Module:
    return Wrong(importlib.import_module(model).build(), how)
