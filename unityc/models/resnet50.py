"""ResNet-50, as torchvision's `resnet50` (He et al. 2016): the ResNeXt-50 network of
`resnext50.py` with one group per convolution and 64 channels per group, so that the bottleneck
width is its planes (`width = planes * 64 / 64 * 1`). Config keys as in `resnext50.py`; the
workload of the heterogeneous-pipeline paper (papers/002: ResNet-50, global batch 256)."""

from __future__ import annotations

from unityc.models import ZooModel, image_inputs
from unityc.models.resnext50 import build

MODEL = ZooModel(
    name="resnet50",
    summary="ResNet-50 image classifier (bottleneck ResNet, torchvision layout)",
    build=build,
    inputs=image_inputs,
    configs={
        "small": {
            "image": 32,
            "classes": 10,
            "layers": [1, 1, 1, 1],
            "groups": 1,
            "width_per_group": 8,
            "base_channels": 8,
        },
        "paper": {
            "image": 224,
            "classes": 1000,
            "layers": [3, 4, 6, 3],
            "groups": 1,
            "width_per_group": 64,
            "base_channels": 64,
        },
    },
    batch={"small": 2, "paper": 64},
    source="torchvision resnet50 (He et al. 2016)",
)
