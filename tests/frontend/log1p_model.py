"""A model reading `torch.log1p` (a softplus written as log1p(exp(x)), as Hugging Face's
Mamba-style gates write it), for the importer's --check."""

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
