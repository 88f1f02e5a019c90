"""Factories that must make `unityc-import` fail with a clear message (see import_errors.mlir)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Scan(nn.Module):
    """An op the importer has no lowering for, deep inside the model."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=1)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scan = Scan()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scan(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.blocks(x)
        return F.mse_loss(out, target), out


def unsupported():
    """torch.cumsum in blocks.0.scan."""
    return Net(), (torch.rand(4, 8), torch.rand(4, 8))


def raises(**overrides):
    """A factory that fails while building the model."""
    raise RuntimeError("no such layer size")


def not_a_pair():
    """Returns the module alone, not (module, inputs)."""
    return nn.Linear(8, 4)


def not_tensors():
    """Example inputs that are not tensors."""
    return nn.Linear(8, 4), ([1.0] * 8,)


def too_many_inputs():
    """Three example inputs for a forward of one argument."""
    return nn.Linear(8, 4), (torch.rand(2, 8), torch.rand(2, 8), torch.rand(2, 8))


class Regression(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.fc(x)
        return F.mse_loss(out, target), out


def wrong_shape():
    """A Linear(8, 4) fed [2, 5]."""
    return Regression(), (torch.rand(2, 5), torch.rand(2, 4))


class FrozenNorm(nn.Module):
    """Batch norm with running statistics (eval mode), which unityc does not model."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = F.batch_norm(
            x, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias, training=False
        )
        return F.mse_loss(out, target), out


def eval_batch_norm():
    """F.batch_norm(..., training=False): the importer puts modules in train mode, but not this."""
    return FrozenNorm(), (torch.rand(2, 4, 3, 3), torch.rand(2, 4, 3, 3))
