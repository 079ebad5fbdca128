"""A convnet whose outputs are of magnitude 1e-5, as random-weight EfficientNets' are.

timm's efficientnet_b0 with random weights gives logits of at most ~1.6e-5; an
absolute tolerance of 1e-4 then accepts any output at all. This stands for it in
the tests (timm need not be installed): depthwise-separable blocks, squeeze and
excitation, a classifier initialized as small.
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.norm = nn.BatchNorm2d(channels)
        self.squeeze = nn.Linear(channels, channels // 4)
        self.excite = nn.Linear(channels // 4, channels)
        self.pointwise = nn.Conv2d(channels, channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.silu(self.norm(self.depthwise(x)))
        scale = torch.sigmoid(self.excite(nn.functional.silu(self.squeeze(y.mean((2, 3))))))
        return x + self.pointwise(y * scale[:, :, None, None])


class SmallOutputs(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.blocks = nn.Sequential(Block(16), Block(16))
        self.classifier = nn.Linear(16, classes)
        nn.init.normal_(self.classifier.weight, std=1e-5)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.blocks(self.stem(image)).mean((2, 3)))


def build() -> nn.Module:
    return SmallOutputs()
