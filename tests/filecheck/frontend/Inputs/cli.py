"""Factories for import_cli.mlir: names MLIR cannot spell bare, a model in eval mode, a factory
that exits."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import nn


class Accented(nn.Module):
    """A submodule whose attribute name is not ASCII: its state_dict key is `couche_é.weight`."""

    def __init__(self) -> None:
        super().__init__()
        self.couche_é = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.couche_é(x), y)


def accented(batch: int = 4):
    return Accented(), (torch.rand(batch, 8), torch.randint(0, 4, (batch,)))


class Normalized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.bn(self.fc(x)), y)


def in_eval():
    """The whole model in eval mode (batch norm on running statistics)."""
    return Normalized().eval(), (torch.rand(4, 8), torch.randint(0, 4, (4,)))


def bn_in_eval():
    """Only the batch norm in eval mode."""
    model = Normalized()
    model.bn.eval()
    return model, (torch.rand(4, 8), torch.randint(0, 4, (4,)))


def exits():
    sys.exit(3)
