"""A transformers BERT classifier from a tiny config built in code (no hub download)."""

from __future__ import annotations

import torch
from transformers import BertConfig, BertForSequenceClassification


class BertLogits(torch.nn.Module):
    """BERT returning its logits tensor: a package's outputs are tensors, not ModelOutputs."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.bert = BertForSequenceClassification(config)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, return_dict=False)[0]


def bert(num_labels: int = 3) -> torch.nn.Module:
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=num_labels,
    )
    return BertLogits(config)
