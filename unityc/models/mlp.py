"""The Unity paper's MLP: two towers of dense layers, summed, softmax, in plain torch.

Follows FlexFlow's `examples/cpp/MLP_Unify/mlp.cc` (the Unity authors' benchmark): two float inputs
of `in_features` (1024) columns each feed their own tower of eight 8192-wide dense layers (ReLU
after every layer but the last, no bias), the two towers' outputs are added and a softmax with a
sparse categorical cross-entropy loss closes the graph. Here the softmax lives inside
`F.cross_entropy`, so the returned output is the summed logits.

Configuration keys: `in_features` (columns of each input), `hidden_dims` (output width of every
dense layer of a tower; the last one is the number of classes).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from unityc.models import Config, ZooModel


def _tower(in_features: int, widths: Sequence[int]) -> nn.Sequential:
    """Dense layers without bias (as mlp.cc), ReLU between them, none after the last."""
    layers: list[nn.Module] = []
    for i, width in enumerate(widths):
        layers.append(nn.Linear(in_features, width, bias=False))
        if i + 1 < len(widths):
            layers.append(nn.ReLU())
        in_features = width
    return nn.Sequential(*layers)


class TwoTowerMLP(nn.Module):
    """Two dense towers whose logits are summed and scored with cross-entropy."""

    def __init__(self, in_features: int, hidden_dims: Sequence[int]) -> None:
        super().__init__()
        self.tower1 = _tower(in_features, hidden_dims)
        self.tower2 = _tower(in_features, hidden_dims)

    def forward(
        self, input1: torch.Tensor, input2: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.tower1(input1) + self.tower2(input2)
        return F.cross_entropy(logits, labels), logits


def build(config: Config) -> nn.Module:
    """The two-tower MLP for `config`."""
    hidden = [int(n) for n in config["hidden_dims"]]
    if not hidden:
        raise ValueError("mlp: `hidden_dims` must name at least one layer")
    return TwoTowerMLP(int(config["in_features"]), hidden)


def inputs(config: Config, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Two uniform `[batch, in_features]` inputs and class labels `[batch]` below the last width."""
    n_in = int(config["in_features"])
    classes = int(config["hidden_dims"][-1])
    return {
        "input1": torch.rand(batch, n_in, generator=generator),
        "input2": torch.rand(batch, n_in, generator=generator),
        "labels": torch.randint(0, classes, (batch,), generator=generator),
    }


MODEL = ZooModel(
    name="mlp",
    summary="Two towers of 8 dense layers (8192 wide, no bias), summed, softmax cross-entropy",
    build=build,
    inputs=inputs,
    configs={
        "small": {"in_features": 16, "hidden_dims": [32] * 8},
        "paper": {"in_features": 1024, "hidden_dims": [8192] * 8},
    },
    batch={"small": 4, "paper": 256},
    source="FlexFlow examples/cpp/MLP_Unify/mlp.cc (Unity authors' MLP benchmark)",
)
