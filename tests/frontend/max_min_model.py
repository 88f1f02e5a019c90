"""A model reading torch.max/min over a dim (values and indices), amax and a whole-tensor max,
for the importer's --check: gradients flow through the values, the indices are an output."""

from __future__ import annotations

import torch
from torch import nn


class MaxMin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 12)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x).reshape(x.shape[0], 3, 4)
        values, indices = h.max(dim=1)  # [batch, 4]: a max-out over 3 pieces
        low = h.min(dim=-1, keepdim=True).values  # [batch, 3, 1]
        pooled = values + low.squeeze(-1).amax(dim=1, keepdim=True) - h.amin(dim=(1, 2)).unsqueeze(1)
        loss = nn.functional.mse_loss(pooled, y) + h.max() * 0.1
        return loss, indices


def make(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return MaxMin(), {
        "x": torch.randn(batch, 8, generator=generator),
        "y": torch.randn(batch, 4, generator=generator),
    }
