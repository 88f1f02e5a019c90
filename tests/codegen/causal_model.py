"""A tiny causal language model whose attention is torch's SDPA (is_causal=True): the importer
folds the causal mask into a constant holding -inf, which the generated program must write as
`float("-inf")` (it was written as a bare `-inf`, a NameError on every rank)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, HEADS, SEQ = 32, 16, 2, 8


class CausalLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, seq = ids.shape
        x = self.embed(ids)
        q, k, v = (
            t.reshape(batch, seq, HEADS, WIDTH // HEADS).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq, WIDTH)
        logits = self.head(x + self.out(y))
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1)), logits


def make(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (batch, SEQ), generator=generator)
    labels = torch.randint(0, VOCAB, (batch, SEQ), generator=generator)
    return CausalLM(), {"ids": ids, "labels": labels}
