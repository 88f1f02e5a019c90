"""The MLP of examples/mlp.mlir (32 features, hidden 64, 10 classes, cross-entropy) with more
hidden layers (5 linears: 8 sequential cuts, enough for 9 pipeline stages); it also returns its
logits, so that a pipelined program must put every micro-batch's outputs back in place."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

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


def batches(pieces: Any, start: int = 0, batch: int = 16) -> Iterator[dict[str, torch.Tensor]]:
    """Training batches for `--data`: batch k drawn from a generator seeded by k + 1 (never the
    example batch of `make`), each rank's pieces only."""
    step = start
    while True:
        generator = torch.Generator().manual_seed(step + 1)
        whole = {"x": torch.randn(batch, 32, generator=generator),
                 "label": torch.randint(0, 10, (batch,), generator=generator)}  # fmt: skip
        yield {k: v[pieces.slices(k)] for k, v in whole.items() if pieces.slices(k) is not None}
        step += 1
