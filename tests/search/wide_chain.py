"""A chain of `layers` linear + ReLU layers of `width` features (cross-entropy over 10 classes):
enough compute per layer that where each layer runs matters (pipeline search tests)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Chain(nn.Module):
    def __init__(self, layers: int, width: int) -> None:
        super().__init__()
        self.fc = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for fc in self.fc:
            x = torch.relu(fc(x))
        logits = self.head(x)
        return F.cross_entropy(logits, label), logits


def make(batch: int = 256, layers: int = 6, width: int = 1024) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, width, generator=generator)
    label = torch.randint(0, 10, (batch,), generator=generator)
    return Chain(layers, width), {"x": x, "label": label}
