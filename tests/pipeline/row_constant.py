"""An MLP that adds a different constant to each row of the batch (`arange(B)` as a column): a
value folded at the whole batch's size that no micro-batch can take whole, so `gpipe` must refuse
it and name the op that reads it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RowBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        rows = torch.arange(x.shape[0], dtype=x.dtype, device=x.device)[:, None]
        h = torch.relu(self.fc1(x)) + rows
        return (F.cross_entropy(self.fc2(h), y),)


def make(batch: int = 8) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 8, generator=generator)
    y = torch.randint(0, 4, (batch,), generator=generator)
    return RowBias(), {"x": x, "y": y}
