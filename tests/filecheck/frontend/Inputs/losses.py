"""Cross-entropy factories for import_ignore_index.mlir."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    def __init__(self, ignore_index: int) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 5)
        self.ignore_index = ignore_index

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.fc(x)
        return F.cross_entropy(logits, labels, ignore_index=self.ignore_index), logits


def classifier(ignore_index: int = -100, ignored: int = 0):
    """Six samples of 5 classes; the last `ignored` labels are ignore_index."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 5, (6,), generator=generator)
    if ignored:
        labels[-ignored:] = ignore_index
    return Classifier(ignore_index), (torch.randn(6, 8, generator=generator), labels)
