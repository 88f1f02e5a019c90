"""The MLP of examples/mlp.mlir (32 features, hidden 64, 10 classes, cross-entropy) with more
hidden layers (5 linears: 8 sequential cuts, enough for 9 pipeline stages); it also returns its
logits, so that a pipelined program must put every micro-batch's outputs back in place."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn


class DeepMLP(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        widths = [32] + [64] * (layers - 1) + [10]
        self.fc = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))

    def forward(self, x: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for i, fc in enumerate(self.fc):
            x = fc(x) if i == len(self.fc) - 1 else torch.relu(fc(x))
        return F.cross_entropy(x, label), x


def make(batch: int = 16, layers: int = 5) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 32, generator=generator)
    label = torch.randint(0, 10, (batch,), generator=generator)
    return DeepMLP(layers), {"x": x, "label": label}
