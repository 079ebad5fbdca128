"""A tiny GPT-style language model in plain torch: token ids in, next-token logits out.

A vocabulary of 1,000 tokens, 64 learned positions, two pre-norm transformer
blocks of width 32 with causal self-attention. It is what a Hugging Face GPT-2
looks like to kiln (integer ids with a vocabulary, a sequence dimension bounded
by the positions), small enough to package in seconds.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, width))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, positions: int, width: int, heads: int, layers: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(positions, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        where = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(where)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build(
    vocab: int = 1000, positions: int = 64, width: int = 32, heads: int = 2, layers: int = 2
) -> nn.Module:
    return TinyLM(vocab, positions, width, heads, layers)
