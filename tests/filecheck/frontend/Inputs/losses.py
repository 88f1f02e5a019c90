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


def classifier(ignore_index: int = -100, ignored: int = 0, label: int | None = None):
    """Six samples of 5 classes; the last `ignored` labels are ignore_index (or `label`)."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 5, (6,), generator=generator)
    if ignored:
        labels[-ignored:] = ignore_index if label is None else label
    return Classifier(ignore_index), (torch.randn(6, 8, generator=generator), labels)


class ShiftedTokens(nn.Module):
    """Hugging Face's causal-LM loss written out: the labels padded with ignore_index (F.pad,
    aten.constant_pad_nd), shifted by one, every position scored."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 8)
        self.head = nn.Linear(8, 7)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.embed(ids))
        shifted = F.pad(labels, (0, 1), value=-100)[:, 1:]
        return F.cross_entropy(logits.reshape(-1, 7), shifted.reshape(-1), ignore_index=-100)


def shifted_tokens():
    """Two sequences of 5 tokens; the second ends in two ignored labels."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 7, (2, 5), generator=generator)
    labels = ids.clone()
    labels[1, 3:] = -100
    return ShiftedTokens(), (ids, labels)
