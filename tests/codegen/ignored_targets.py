"""A classifier head whose cross-entropy ignores some targets (ignore_index -100, as Hugging Face
pads labels), for the plan that shards its rows and its classes (`strategies.py`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Head(nn.Module):
    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(torch.tanh(self.fc(x))), labels, ignore_index=-100)


def make(batch: int = 8, width: int = 16, classes: int = 12, ignored: int = 3):
    """`ignored` of the labels are -100, all in the first half of the batch (so the row shards'
    kept counts differ)."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, classes, (batch,), generator=generator)
    labels[:ignored] = -100
    return Head(width, classes), (torch.randn(batch, width, generator=generator), labels)
