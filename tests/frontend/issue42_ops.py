"""Models reading the ops issue 42 adds, for the importer's --check: `torch.log1p` (a softplus
written as log1p(exp(x)), as Mamba-style gates write it) and `Tensor.repeat` (a tiled tensor, as
Hugging Face's models repeat position tables and KV heads)."""

from __future__ import annotations

import torch
from torch import nn


class Softplus(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.log1p(torch.exp(self.fc(x)))
        return nn.functional.mse_loss(h, y), h


def make(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return Softplus(), {
        "x": torch.randn(batch, 8, generator=generator),
        "y": torch.randn(batch, 4, generator=generator),
    }


class Tiled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x).repeat(2, 3)  # [2 * batch, 12]
        h = h.repeat(2, 1, 1)  # a new leading dim: [2, 2 * batch, 12]
        return nn.functional.mse_loss(h.sum(0), y.repeat(2, 3)), h


def tiled(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return Tiled(), {
        "x": torch.randn(batch, 8, generator=generator),
        "y": torch.randn(batch, 4, generator=generator),
    }
