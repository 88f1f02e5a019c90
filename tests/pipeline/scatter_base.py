"""An MLP that writes its hidden rows into a zero buffer of the whole batch's size
(`out[:, :16] = h`, as DeepSeek-V3's rotary writes its halves into a new tensor): the importer
folds the buffer's unwritten part to a batch-sized splat constant beside the batched rows, which
a micro-batch must take with its own rows."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ScatterBase(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(24, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        out = torch.zeros(x.shape[0], 24, dtype=x.dtype, device=x.device)
        out[:, :16] = torch.relu(self.fc1(x))
        return (F.cross_entropy(self.fc2(out), y),)


def make(batch: int = 8) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 8, generator=generator)
    y = torch.randint(0, 4, (batch,), generator=generator)
    return ScatterBase(), {"x": x, "y": y}
