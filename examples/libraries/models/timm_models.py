"""Two timm architectures at toy sizes, built in code: no weights downloaded (pretrained=False)."""

from __future__ import annotations

import timm
import torch
from timm.models.resnet import BasicBlock, ResNet


def vit(num_classes: int = 10) -> torch.nn.Module:
    """A Vision Transformer of 32x32 images in 8x8 patches: one block, 32 channels."""
    return timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        img_size=32,
        patch_size=8,
        embed_dim=32,
        depth=1,
        num_heads=2,
        num_classes=num_classes,
    )


def resnet(num_classes: int = 10) -> torch.nn.Module:
    """timm's ResNet with one basic block per stage and 8 to 64 channels.

    zero_init_last=False: untrained, timm's zeroed last norm of each block makes the
    block the identity, and the net gives one class to every image (the model_test of
    //models/tests needs classes that differ).
    """
    return ResNet(
        block=BasicBlock,
        layers=(1, 1, 1, 1),
        channels=(8, 16, 32, 64),
        stem_width=8,
        num_classes=num_classes,
        zero_init_last=False,
    )
