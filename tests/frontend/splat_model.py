"""A model that writes computed values into tensors of one value (`frontend/aten_scatter.py`'s
`slice_scatter`): half of a `new_zeros` (the other half stays zeros), the two halves of a
`new_empty` (DeepSeek-V3's keys: nothing of the base is left), and a band of a `full` of 0.5.
Each base is as large as the batch and the sequence."""

from __future__ import annotations

import torch
from torch import nn


class HalfWritten(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a = nn.Linear(width, width, bias=False)
        self.b = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        half = x.new_zeros(batch, seq, 2 * width)
        half[..., :width] = self.a(x)  # [width, 2 width) stays zero
        keys = x.new_empty(batch, seq, 2 * width)
        keys[..., :width].copy_(self.a(x))
        keys[..., width:].copy_(self.b(x))
        band = torch.full((batch, seq + 2, width), 0.5, dtype=x.dtype)
        band[:, 1 : seq + 1] = self.b(x)  # the first and last rows stay 0.5
        return (half * keys).square().mean() + band.sum(1).square().mean()


def make(batch: int = 4, seq: int = 8, width: int = 16) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    return HalfWritten(width), {"x": torch.randn(batch, seq, width)}
