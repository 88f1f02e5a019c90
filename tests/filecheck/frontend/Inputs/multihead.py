"""torch's nn.MultiheadAttention (self-attention, seq-first by default) before a classifier,
for import_multihead_attention.mlir."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, batch_first: bool, bias: bool) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads, batch_first=batch_first, bias=bias)
        self.head = nn.Linear(width, 5)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        a, _ = self.attn(x, x, x, need_weights=False)
        return F.cross_entropy(self.head(a).reshape(-1, 5), labels.reshape(-1))


def make(
    batch: int = 2,
    seq: int = 6,
    width: int = 16,
    heads: int = 4,
    batch_first: bool = False,
    bias: bool = True,
):
    generator = torch.Generator().manual_seed(0)
    dims = (batch, seq) if batch_first else (seq, batch)
    x = torch.randn(*dims, width, generator=generator)
    labels = torch.randint(0, 5, dims, generator=generator)
    return SelfAttention(width, heads, batch_first, bias), (x, labels)
