"""A router-like model whose float32 casts matter only under bf16-mixed (`frontend/widening.py`):
`logits.float()` and `softmax(dtype=torch.float)` of a linear's output (bf16 under autocast),
beside casts that change nothing there: the upcast of an fp32 input (an RMS norm's), and
`.float()` of logits a loss reads (the loss computes in fp32 anyway)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Router(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 4, bias=False)
        self.head = nn.Linear(8, 5, bias=False)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.to(torch.float32)  # fp32 under autocast too: idle
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
        logits = self.gate(h)
        other = F.softmax(logits * 2.0, dim=-1, dtype=torch.float).to(x.dtype)  # kept
        probs = torch.softmax(logits.float(), dim=-1).to(x.dtype)  # kept (the .to: idle)
        loss = F.cross_entropy(self.head(h).float(), labels).to(x.dtype)  # idle: the loss reads it
        return loss + (probs * other).sum(), probs.topk(2, dim=-1).indices


def make(batch: int = 6) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return Router(), {
        "x": torch.randn(batch, 8, generator=generator),
        "labels": torch.randint(0, 5, (batch,), generator=generator),
    }
