"""A tiny classifier, 8 -> 16 -> 3, in plain torch; its weights are torch's seeded ones."""

from __future__ import annotations

from torch import nn


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
