"""DLRM (Naumov et al. 2019) with the Criteo Kaggle configuration, in plain torch.

Follows facebookresearch/dlrm `dlrm_s_pytorch.py` run as in `bench/dlrm_s_criteo_kaggle.sh`: a
bottom MLP 13-512-256-64-16 (ReLU after every layer, bias) over the 13 dense features, one
sum-pooled `EmbeddingBag` of dimension 16 per categorical feature (the 26 Criteo Kaggle tables),
the dot interaction without self-interaction (`interact_features` with
`arch_interaction_itself=False`: pairwise dot products of the 27 feature vectors below the
diagonal, 27 * 26 / 2 = 351, concatenated after the bottom-MLP output, so the top MLP's input is
16 + 351 = 367), and a top MLP 367-512-256-1 with ReLU after all layers but the last, which is a
sigmoid. The loss is dlrm's default `--loss-function=mse` (the Kaggle script passes bce).

The 26 Kaggle table sizes (Criteo Display Advertising Challenge, no `--max-ind-range`) sum to
33,762,577 rows, i.e. 540,201,232 embedding parameters at dimension 16; with the MLPs' 475,985 the
paper config has 540,677,217 parameters.

FlexFlow's own `examples/cpp/DLRM/dlrm.cc` (with `run_criteo_kaggle.sh`) differs: it only implements
the "cat" interaction (top MLP 224-512-256-1), builds dense layers without bias, and runs on a
frequency-thresholded Kaggle preprocessing with smaller tables; the zoo follows facebookresearch's
dot-interaction reference instead.

Configuration keys: `bottom_mlp` (widths from the dense-feature count to the last, which must equal
`embedding_dim`), `top_mlp` (widths after the interaction; its input width is derived as in
dlrm), `embedding_dim`, `table_sizes` (rows of each table), `bag_size` (indices per bag).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from unityc.models import Config, ZooModel

KAGGLE_TABLE_SIZES = [
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
]  # fmt: skip
"""Rows of the 26 categorical tables of the Criteo Kaggle dataset (dlrm's `ln_emb`)."""


def _index_device() -> torch.device | None:
    """Where constant index buffers live: the CPU for a meta-device build, else the default device.

    On a meta build (how the importer builds paper configs) a meta buffer would carry no values;
    keeping the indices on the CPU lets `torch.export` record them as real constants to fold.
    """
    return torch.device("cpu") if torch.get_default_device().type == "meta" else None


def _mlp(widths: Sequence[int], sigmoid_last: bool) -> nn.Sequential:
    """dlrm's `create_mlp`: biased dense layers with ReLU, the last one sigmoid when asked."""
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        last = i == len(widths) - 2
        layers.append(nn.Sigmoid() if last and sigmoid_last else nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """Bottom MLP, embedding bags, dot interaction, top MLP; returns (MSE, click probability)."""

    li: torch.Tensor  # buffers: the interaction's lower-triangle indices
    lj: torch.Tensor

    def __init__(
        self, bottom: Sequence[int], top: Sequence[int], embedding_dim: int, table_sizes: Sequence[int]
    ) -> None:
        super().__init__()
        self.embedding_dim = embedding_dim
        self.bottom = _mlp(bottom, sigmoid_last=False)
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(n, embedding_dim, mode="sum") for n in table_sizes)
        features = len(table_sizes) + 1
        # Constant gather indices of the strictly lower triangle (dlrm's li, lj); non-persistent so
        # they are rebuilt from the config, never loaded.
        li, lj = torch.tril_indices(features, features, offset=-1, device=_index_device())
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        interactions = features * (features - 1) // 2
        self.top = _mlp([embedding_dim + interactions, *top], sigmoid_last=True)

    def forward(
        self, dense: torch.Tensor, sparse: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.bottom(dense)
        ly = [emb(sparse[:, t, :]) for t, emb in enumerate(self.embeddings)]
        B = x.shape[0]
        T = torch.cat([x, *ly], dim=1).view(B, -1, self.embedding_dim)
        Z = torch.bmm(T, T.transpose(1, 2))
        Zflat = Z[:, self.li, self.lj]
        R = torch.cat([x, Zflat], dim=1)
        p = self.top(R)
        return F.mse_loss(p, labels), p


def build(config: Config) -> nn.Module:
    """DLRM for `config`."""
    bottom = [int(n) for n in config["bottom_mlp"]]
    dim = int(config["embedding_dim"])
    if bottom[-1] != dim:
        raise ValueError(f"dlrm: bottom MLP ends at {bottom[-1]}, the dot interaction needs {dim}")
    return DLRM(bottom, [int(n) for n in config["top_mlp"]], dim, [int(n) for n in config["table_sizes"]])


def inputs(config: Config, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Dense features `[B, 13]`, per-table-bounded indices `[B, T, bag_size]`, 0/1 labels `[B, 1]`."""
    bag = int(config["bag_size"])
    sizes = [int(n) for n in config["table_sizes"]]
    sparse = torch.stack([torch.randint(0, n, (batch, bag), generator=generator) for n in sizes], dim=1)
    return {
        "dense": torch.rand(batch, int(config["bottom_mlp"][0]), generator=generator),
        "sparse": sparse,
        "labels": torch.randint(0, 2, (batch, 1), generator=generator).to(torch.float32),
    }


MODEL = ZooModel(
    name="dlrm",
    summary="DLRM on Criteo Kaggle: 26 embedding bags (dim 16), dot interaction, MLPs, sigmoid, MSE",
    build=build,
    inputs=inputs,
    configs={
        "small": {
            "bottom_mlp": [13, 8, 4],
            "top_mlp": [8, 1],
            "embedding_dim": 4,
            "table_sizes": [10, 20, 30, 50],
            "bag_size": 1,
        },
        "paper": {
            "bottom_mlp": [13, 512, 256, 64, 16],
            "top_mlp": [512, 256, 1],
            "embedding_dim": 16,
            "table_sizes": KAGGLE_TABLE_SIZES,
            "bag_size": 1,
        },
    },
    batch={"small": 4, "paper": 1024},
    source="facebookresearch/dlrm bench/dlrm_s_criteo_kaggle.sh (Criteo Kaggle, dot interaction)",
)
