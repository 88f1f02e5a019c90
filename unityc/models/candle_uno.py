"""CANDLE Uno (drug-pair response regression, ECP-CANDLE Pilot 1) as benchmarked by Unity, in plain torch.

Follows FlexFlow's `examples/cpp/candle_uno/candle_uno.cc` (the Unity authors' Uno benchmark):
seven inputs of four feature types (`dose1`/`dose2`: 1 column, `cell.rnaseq`: 942,
`drug{1,2}.descriptors`: 5270, `drug{1,2}.fingerprints`: 2048). Every cell and drug input runs
through a feature encoder of eight 4192-wide dense layers with ReLU; the doses go straight through.
The encodings are concatenated in candle_uno.cc's order (its `std::map` sorts the input names), then
four 4192-wide ReLU dense layers and a 1-unit linear output regress the growth response with
mean-squared error. All dense layers have no bias, as in candle_uno.cc.

One deliberate difference: candle_uno.cc builds a separate encoder per input, whereas here (as in
CANDLE's Keras `uno_baseline_keras2.py`, which builds one feature model per feature type) inputs of
the same type share one encoder: drug1 and drug2 descriptors share weights, and so do the two
fingerprint inputs. That gives 3 encoders instead of candle_uno.cc's 5 (544,251,552 parameters
instead of 820,948,704).

Configuration keys: `dose_features`, `cell_rnaseq_features`, `drug_descriptors_features`,
`drug_fingerprints_features` (columns per feature type), `feature_layers` (encoder widths),
`dense_layers` (widths of the tower after the concatenation).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from unityc.models import Config, ZooModel

INPUT_TYPES = {
    "cell_rnaseq": "cell_rnaseq",
    "dose1": "dose",
    "dose2": "dose",
    "drug1_descriptors": "drug_descriptors",
    "drug1_fingerprints": "drug_fingerprints",
    "drug2_descriptors": "drug_descriptors",
    "drug2_fingerprints": "drug_fingerprints",
}
"""Each input's feature type, in candle_uno.cc's concatenation order (its input names, sorted)."""

ENCODED_TYPES = ("cell_rnaseq", "drug_descriptors", "drug_fingerprints")
"""Feature types that get a dense encoder (candle_uno.cc: the `cell.*` and `drug.*` types)."""


def _dense_relu(in_features: int, widths: Sequence[int]) -> nn.Sequential:
    """Bias-free dense layers, each followed by ReLU (candle_uno.cc's `build_feature_model`)."""
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Linear(in_features, width, bias=False), nn.ReLU()]
        in_features = width
    return nn.Sequential(*layers)


def _feature_widths(config: Config) -> dict[str, int]:
    """Columns of each feature type."""
    return {kind: int(config[f"{kind}_features"]) for kind in ("dose", *ENCODED_TYPES)}


class CandleUno(nn.Module):
    """Shared per-type encoders, concatenation, dense tower, linear output; returns (MSE, prediction)."""

    def __init__(
        self, feature_widths: dict[str, int], feature_layers: Sequence[int], dense_layers: Sequence[int]
    ) -> None:
        super().__init__()
        self.encoders = nn.ModuleDict(
            {kind: _dense_relu(feature_widths[kind], feature_layers) for kind in ENCODED_TYPES}
        )
        concat = sum(
            feature_layers[-1] if kind in ENCODED_TYPES else feature_widths[kind]
            for kind in INPUT_TYPES.values()
        )
        self.tower = _dense_relu(concat, dense_layers)
        self.output = nn.Linear(dense_layers[-1] if dense_layers else concat, 1, bias=False)

    def _encode(self, name: str, x: torch.Tensor) -> torch.Tensor:
        kind = INPUT_TYPES[name]
        return self.encoders[kind](x) if kind in ENCODED_TYPES else x

    def forward(
        self,
        cell_rnaseq: torch.Tensor,
        dose1: torch.Tensor,
        dose2: torch.Tensor,
        drug1_descriptors: torch.Tensor,
        drug1_fingerprints: torch.Tensor,
        drug2_descriptors: torch.Tensor,
        drug2_fingerprints: torch.Tensor,
        labels: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        features = {
            "cell_rnaseq": cell_rnaseq,
            "dose1": dose1,
            "dose2": dose2,
            "drug1_descriptors": drug1_descriptors,
            "drug1_fingerprints": drug1_fingerprints,
            "drug2_descriptors": drug2_descriptors,
            "drug2_fingerprints": drug2_fingerprints,
        }
        x = torch.cat([self._encode(name, features[name]) for name in INPUT_TYPES], dim=1)
        y = self.output(self.tower(x))
        return F.mse_loss(y, labels), y


def build(config: Config) -> nn.Module:
    """CANDLE Uno for `config`."""
    feature_layers = [int(n) for n in config["feature_layers"]]
    if not feature_layers:
        raise ValueError("candle_uno: `feature_layers` must name at least one layer")
    return CandleUno(_feature_widths(config), feature_layers, [int(n) for n in config["dense_layers"]])


def inputs(config: Config, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Uniform [0, 1) features per input and responses `[B, 1]` in [-0.5, 0.5) (as candle_uno.cc)."""
    widths = _feature_widths(config)
    out = {name: torch.rand(batch, widths[kind], generator=generator) for name, kind in INPUT_TYPES.items()}
    out["labels"] = torch.rand(batch, 1, generator=generator) - 0.5
    return out


MODEL = ZooModel(
    name="candle_uno",
    summary="CANDLE Uno: shared 8x4192 encoders per drug/cell feature type, 4x4192 tower, MSE regression",
    build=build,
    inputs=inputs,
    configs={
        "small": {
            "dose_features": 1,
            "cell_rnaseq_features": 12,
            "drug_descriptors_features": 20,
            "drug_fingerprints_features": 16,
            "feature_layers": [8] * 8,
            "dense_layers": [8] * 4,
        },
        "paper": {
            "dose_features": 1,
            "cell_rnaseq_features": 942,
            "drug_descriptors_features": 5270,
            "drug_fingerprints_features": 2048,
            "feature_layers": [4192] * 8,
            "dense_layers": [4192] * 4,
        },
    },
    batch={"small": 4, "paper": 256},
    source="FlexFlow examples/cpp/candle_uno/candle_uno.cc (Unity authors' Uno), encoders shared per type",
)
