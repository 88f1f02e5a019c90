"""ResNeXt-50 (32x4d), as torchvision's `resnext50_32x4d` (Xie et al. 2017), in plain torch.

The network is torchvision's `ResNet(Bottleneck, [3, 4, 6, 3], groups=32, width_per_group=4)`: a
7x7/2 stem convolution with BatchNorm and ReLU, a 3x3/2 max pool, four stages of bottleneck blocks
(1x1 reduce, 3x3 grouped convolution carrying the stride (the "v1.5" placement), 1x1 expand, and a
1x1 strided projection on the shortcut where the shape changes), global average pooling and a fully
connected classifier. Parameter initialisation follows torchvision (Kaiming-normal fan-out
convolutions, BatchNorm weight 1 and bias 0, default `nn.Linear`), so that a built model is a
drop-in for the torchvision one; `zero_init_residual` is torchvision's default, off.

Configuration keys: `image` (square input side), `classes`, `layers` (bottleneck blocks per
stage), `groups` (cardinality), `width_per_group` (channels per group of the first stage's grouped
convolution) and `base_channels` (stem width; stage `i` has `base_channels * 2**i` planes and
`4 * base_channels * 2**i` output channels). With `base_channels=64` this is exactly torchvision's
`width = int(planes * width_per_group / 64) * groups`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from unityc.models import Config, ZooModel, image_inputs

EXPANSION = 4
"""Output channels of a bottleneck block relative to its planes (torchvision's `Bottleneck`)."""


class Bottleneck(nn.Module):
    """A ResNeXt bottleneck: 1x1 reduce, 3x3 grouped (strided) conv, 1x1 expand, plus the shortcut."""

    def __init__(
        self, in_channels: int, planes: int, stride: int, groups: int, width_per_group: int, base: int
    ) -> None:
        super().__init__()
        # torchvision computes the inner width relative to 64 planes; `base` generalises that so the
        # small config keeps `width_per_group` channels per group in its first stage.
        width = int(planes * (width_per_group / base)) * groups
        out_channels = planes * EXPANSION
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(
            width, width, kernel_size=3, stride=stride, padding=1, groups=groups, bias=False
        )
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu1 = nn.ReLU()
        self.relu2 = nn.ReLU()
        self.relu3 = nn.ReLU()
        self.downsample: nn.Sequential | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.relu2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu3(out + identity)


class ResNeXt(nn.Module):
    """Stem, four bottleneck stages, global average pool, classifier, and the cross-entropy loss."""

    def __init__(
        self, layers: Sequence[int], groups: int, width_per_group: int, base_channels: int, classes: int
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, base_channels, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(base_channels)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        stages: list[nn.Module] = []
        in_channels = base_channels
        for i, blocks in enumerate(layers):
            planes = base_channels * 2**i
            # The first stage keeps the resolution (the stem already pooled); later stages halve it.
            stride = 1 if i == 0 else 2
            stage: list[nn.Module] = []
            for b in range(blocks):
                stage.append(
                    Bottleneck(
                        in_channels,
                        planes,
                        stride if b == 0 else 1,
                        groups,
                        width_per_group,
                        base_channels,
                    )
                )
                in_channels = planes * EXPANSION
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_channels, classes)
        # torchvision's initialisation (ResNet.__init__), so parameter statistics match the original.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.maxpool(self.relu(self.bn1(self.conv1(images))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        logits = self.fc(x)
        return F.cross_entropy(logits, labels), logits


def build(config: Config) -> nn.Module:
    """A ResNeXt in training mode for `config`."""
    layers = [int(n) for n in config["layers"]]
    if len(layers) != 4:
        raise ValueError(f"resnext50: `layers` must list 4 stages, got {layers}")
    return ResNeXt(
        layers,
        int(config["groups"]),
        int(config["width_per_group"]),
        int(config["base_channels"]),
        int(config["classes"]),
    )


MODEL = ZooModel(
    name="resnext50",
    summary="ResNeXt-50 32x4d image classifier (grouped-convolution bottleneck ResNet)",
    build=build,
    inputs=image_inputs,
    configs={
        "small": {
            "image": 32,
            "classes": 10,
            "layers": [1, 1, 1, 1],
            "groups": 4,
            "width_per_group": 2,
            "base_channels": 8,
        },
        "paper": {
            "image": 224,
            "classes": 1000,
            "layers": [3, 4, 6, 3],
            "groups": 32,
            "width_per_group": 4,
            "base_channels": 64,
        },
    },
    batch={"small": 2, "paper": 64},
    source="torchvision resnext50_32x4d (Xie et al. 2017)",
)
