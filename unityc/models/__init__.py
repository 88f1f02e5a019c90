"""The model zoo: the seven workloads of the Unity paper (OSDI'22, Table 1) in plain torch.

Every zoo model is a `ZooModel`: a `build(config)` that returns an `nn.Module` whose forward takes
the named example inputs and returns `(loss, output)` (the training loss first, so an imported
graph is the forward half of a training step), an `inputs(config, batch, generator)` that makes
example inputs, and two configs: `small` (for tests, seconds on CPU) and `paper` (the paper's
sizes, never materialized: the importer builds it with weights on the meta device).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

Config = Mapping[str, Any]


@dataclass(frozen=True)
class ZooModel:
    name: str
    summary: str
    build: Callable[[Config], nn.Module]
    inputs: Callable[[Config, int, torch.Generator], dict[str, torch.Tensor]]
    configs: Mapping[str, Config]
    batch: Mapping[str, int]
    """Default batch size per config (`paper`: the paper's per-GPU batch)."""
    source: str = ""
    """Which public configuration the `paper` config follows."""


def image_inputs(config: Config, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random images `[batch, 3, image, image]` and class labels `[batch]` (the CNNs' inputs)."""
    side = int(config["image"])
    images = torch.randn(batch, 3, side, side, generator=generator)
    labels = torch.randint(0, int(config["classes"]), (batch,), generator=generator)
    return {"images": images, "labels": labels}


def _registry() -> dict[str, ZooModel]:
    from unityc.models import bert, candle_uno, dlrm, inception_v3, mlp, resnet50, resnext50, unet, xdl

    models = [
        mlp.MODEL,
        bert.MODEL,
        dlrm.MODEL,
        xdl.MODEL,
        candle_uno.MODEL,
        resnext50.MODEL,
        resnet50.MODEL,
        inception_v3.MODEL,
        unet.MODEL,
    ]
    return {m.name: m for m in models}


def zoo() -> dict[str, ZooModel]:
    """Every zoo model by name."""
    return _registry()
