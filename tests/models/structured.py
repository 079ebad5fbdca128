"""A model whose output is a registered dataclass, as Hugging Face's ModelOutput types are.

Loading its package in Python needs the type registered with torch's pytree,
i.e. this module imported: the generated Python loader does that (or returns a
plain tuple with plain_outputs=True).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils import _pytree


@dataclass
class LMOutput:
    logits: torch.Tensor
    hidden: torch.Tensor


_pytree.register_dataclass(LMOutput, serialized_type_name="structured.LMOutput")


class TinyHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.head = nn.Linear(8, 50)

    def forward(self, ids: torch.Tensor) -> LMOutput:
        hidden = self.embed(ids)
        return LMOutput(logits=self.head(hidden), hidden=hidden)


def build() -> nn.Module:
    return TinyHead()
