"""XDL (Alibaba's "X-Deep Learning" CTR model as benchmarked by Unity), in plain torch.

Follows FlexFlow's `examples/cpp/XDL/xdl.cc` (the Unity authors' XDL benchmark): four sum-pooled
embedding tables of 1,000,000 rows and dimension 64 (bag size 1), their outputs concatenated into a
256-wide vector, and xdl.cc's bias-free MLP 256-256-256-2 (`mlp_top`, input width first: three
dense layers, ReLU after the first two, sigmoid after the last), trained with mean-squared error
(xdl.cc's `LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE`).

One deliberate difference: xdl.cc's last layer has 2 sigmoid units, while the zoo's XDL takes one
click label per sample (`labels` `[B, 1]`), so the last layer here has 1 unit (256 fewer weights).
The paper config has 4 * 1,000,000 * 64 + 2 * 256 * 256 + 256 = 256,131,328 parameters.

Configuration keys: `table_sizes` (rows of each table), `embedding_dim`, `bag_size` (indices per
bag), `mlp` (widths of the dense layers after the concatenation; the input width is derived).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from unityc.models import Config, ZooModel


class XDL(nn.Module):
    """Embedding bags, concatenation, bias-free MLP with a sigmoid output; returns (MSE, output)."""

    def __init__(self, table_sizes: Sequence[int], embedding_dim: int, mlp: Sequence[int]) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(n, embedding_dim, mode="sum") for n in table_sizes)
        layers: list[nn.Module] = []
        width = len(table_sizes) * embedding_dim
        for i, out in enumerate(mlp):
            # xdl.cc builds its dense layers without bias.
            layers.append(nn.Linear(width, out, bias=False))
            layers.append(nn.Sigmoid() if i + 1 == len(mlp) else nn.ReLU())
            width = out
        self.mlp = nn.Sequential(*layers)

    def forward(self, sparse: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.cat([emb(sparse[:, t, :]) for t, emb in enumerate(self.embeddings)], dim=1)
        p = self.mlp(z)
        return F.mse_loss(p, labels), p


def build(config: Config) -> nn.Module:
    """XDL for `config`."""
    mlp = [int(n) for n in config["mlp"]]
    if not mlp:
        raise ValueError("xdl: `mlp` must name at least one layer")
    return XDL([int(n) for n in config["table_sizes"]], int(config["embedding_dim"]), mlp)


def inputs(config: Config, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Per-table-bounded indices `[B, T, bag_size]` and 0/1 labels `[B, last mlp width]`."""
    bag = int(config["bag_size"])
    sizes = [int(n) for n in config["table_sizes"]]
    sparse = torch.stack([torch.randint(0, n, (batch, bag), generator=generator) for n in sizes], dim=1)
    out = int(config["mlp"][-1])
    labels = torch.randint(0, 2, (batch, out), generator=generator).to(torch.float32)
    return {"sparse": sparse, "labels": labels}


MODEL = ZooModel(
    name="xdl",
    summary="XDL: 4 embedding tables (1M x 64) concatenated into a 256-256-256-1 MLP, sigmoid, MSE",
    build=build,
    inputs=inputs,
    configs={
        "small": {"table_sizes": [10, 20, 30, 50], "embedding_dim": 4, "bag_size": 1, "mlp": [8, 8, 1]},
        "paper": {"table_sizes": [1000000] * 4, "embedding_dim": 64, "bag_size": 1, "mlp": [256, 256, 1]},
    },
    batch={"small": 4, "paper": 1024},
    source="FlexFlow examples/cpp/XDL/xdl.cc (Unity authors' XDL benchmark), last layer 1 unit",
)
