"""Inception-v3, as torchvision's `inception_v3` (Szegedy et al. 2016), in plain torch.

The network is torchvision's `Inception3` main path: a stem of five `BasicConv2d` (convolution
without bias, BatchNorm with eps 0.001, ReLU) and two 3x3/2 max pools, then Mixed_5b..5d
(`InceptionA`), Mixed_6a (`InceptionB`), Mixed_6b..6e (`InceptionC`), Mixed_7a (`InceptionD`),
Mixed_7b..7c (`InceptionE`), adaptive average pooling to 1x1, dropout 0.5 and a fully connected
classifier. Every branch, kernel, stride and padding is torchvision's; the in-block pools are
modules here rather than `F.avg_pool2d` / `F.max_pool2d` calls, which is the same computation.
Initialisation follows torchvision (truncated normal, std 0.1, in [-2, 2] for convolutions and the
classifier weight; BatchNorm weight 1, bias 0).

Left out on purpose: the auxiliary classifier (`AuxLogits`, training-only, attached to Mixed_6e)
because Unity's operator count for Inception-v3 is for the main network, and `transform_input`
(torchvision enables it only with pretrained ImageNet weights). The parameter count of the `paper`
config is therefore 23,834,568 rather than torchvision's 27,161,264 with the aux head.

Configuration keys: `image` (square input side; at least 75, the smallest side for which the three
stride-2 reductions after the stem leave a 1x1 map), `classes`, `width` (multiplier applied to
every channel count of the network), `channel_multiple` (every scaled channel count is rounded up
to a multiple of it, so no branch vanishes) and `dropout`. With `width=1` every count is
torchvision's (they are all multiples of 16).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from unityc.models import Config, ZooModel, image_inputs

Channels = Callable[[int], int]
"""Maps one of torchvision's channel counts to the configured (scaled, rounded) count."""

Size = int | tuple[int, int]


class BasicConv2d(nn.Module):
    """Convolution without bias, BatchNorm (eps 0.001) and ReLU: Inception's unit layer."""

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: Size, stride: Size = 1, padding: Size = 0
    ) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=padding, bias=False
        )
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


def _avg_pool_3x3() -> nn.AvgPool2d:
    # torchvision's F.avg_pool2d(x, kernel_size=3, stride=1, padding=1) (count_include_pad=True).
    return nn.AvgPool2d(kernel_size=3, stride=1, padding=1)


class InceptionA(nn.Module):
    """Mixed_5b..5d: 1x1, 1x1->5x5, 1x1->3x3->3x3 and avgpool->1x1 branches, concatenated."""

    def __init__(self, in_channels: int, pool_features: int, ch: Channels) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, ch(64), kernel_size=1)
        self.branch5x5_1 = BasicConv2d(in_channels, ch(48), kernel_size=1)
        self.branch5x5_2 = BasicConv2d(ch(48), ch(64), kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, ch(64), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(ch(64), ch(96), kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(ch(96), ch(96), kernel_size=3, padding=1)
        self.pool = _avg_pool_3x3()
        self.branch_pool = BasicConv2d(in_channels, ch(pool_features), kernel_size=1)
        self.out_channels = ch(64) + ch(64) + ch(96) + ch(pool_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(self.pool(x))
        return torch.cat([b1, b5, b3, bp], 1)


class InceptionB(nn.Module):
    """Mixed_6a (grid reduction): 3x3/2, 1x1->3x3->3x3/2 and maxpool/2 branches, concatenated."""

    def __init__(self, in_channels: int, ch: Channels) -> None:
        super().__init__()
        self.branch3x3 = BasicConv2d(in_channels, ch(384), kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, ch(64), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(ch(64), ch(96), kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(ch(96), ch(96), kernel_size=3, stride=2)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2)
        self.out_channels = ch(384) + ch(96) + in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3(x)
        b3d = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.pool(x)
        return torch.cat([b3, b3d, bp], 1)


class InceptionC(nn.Module):
    """Mixed_6b..6e: 1x1, factorised 7x7 (1x7, 7x1), doubly factorised 7x7 and avgpool->1x1 branches."""

    def __init__(self, in_channels: int, channels_7x7: int, ch: Channels) -> None:
        super().__init__()
        c7 = ch(channels_7x7)
        self.branch1x1 = BasicConv2d(in_channels, ch(192), kernel_size=1)
        self.branch7x7_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, ch(192), kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, ch(192), kernel_size=(1, 7), padding=(0, 3))
        self.pool = _avg_pool_3x3()
        self.branch_pool = BasicConv2d(in_channels, ch(192), kernel_size=1)
        self.out_channels = 4 * ch(192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        b7d = self.branch7x7dbl_1(x)
        b7d = self.branch7x7dbl_3(self.branch7x7dbl_2(b7d))
        b7d = self.branch7x7dbl_5(self.branch7x7dbl_4(b7d))
        bp = self.branch_pool(self.pool(x))
        return torch.cat([b1, b7, b7d, bp], 1)


class InceptionD(nn.Module):
    """Mixed_7a (grid reduction): 1x1->3x3/2, 1x1->1x7->7x1->3x3/2 and maxpool/2 branches."""

    def __init__(self, in_channels: int, ch: Channels) -> None:
        super().__init__()
        self.branch3x3_1 = BasicConv2d(in_channels, ch(192), kernel_size=1)
        self.branch3x3_2 = BasicConv2d(ch(192), ch(320), kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_channels, ch(192), kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(ch(192), ch(192), kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(ch(192), ch(192), kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(ch(192), ch(192), kernel_size=3, stride=2)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2)
        self.out_channels = ch(320) + ch(192) + in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_2(self.branch7x7x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(b7))
        bp = self.pool(x)
        return torch.cat([b3, b7, bp], 1)


class InceptionE(nn.Module):
    """Mixed_7b..7c: 1x1, 1x1->(1x3 | 3x1), 1x1->3x3->(1x3 | 3x1) and avgpool->1x1 branches."""

    def __init__(self, in_channels: int, ch: Channels) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, ch(320), kernel_size=1)
        self.branch3x3_1 = BasicConv2d(in_channels, ch(384), kernel_size=1)
        self.branch3x3_2a = BasicConv2d(ch(384), ch(384), kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(ch(384), ch(384), kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(in_channels, ch(448), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(ch(448), ch(384), kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(ch(384), ch(384), kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(ch(384), ch(384), kernel_size=(3, 1), padding=(1, 0))
        self.pool = _avg_pool_3x3()
        self.branch_pool = BasicConv2d(in_channels, ch(192), kernel_size=1)
        self.out_channels = ch(320) + 4 * ch(384) + ch(192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        b3d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        b3d = torch.cat([self.branch3x3dbl_3a(b3d), self.branch3x3dbl_3b(b3d)], 1)
        bp = self.branch_pool(self.pool(x))
        return torch.cat([b1, b3, b3d, bp], 1)


class Inception3(nn.Module):
    """Stem, Mixed_5b..7c, global average pool, dropout, classifier, and the cross-entropy loss."""

    def __init__(self, classes: int, ch: Channels, dropout: float) -> None:
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, ch(32), kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(ch(32), ch(32), kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(ch(32), ch(64), kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Conv2d_3b_1x1 = BasicConv2d(ch(64), ch(80), kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(ch(80), ch(192), kernel_size=3)
        self.maxpool2 = nn.MaxPool2d(kernel_size=3, stride=2)
        # Each block's input width is the previous block's concatenated output, computed rather
        # than scaled from torchvision's literal (256, 288, 768, ...), so any `width` stays valid.
        self.Mixed_5b = InceptionA(ch(192), pool_features=32, ch=ch)
        self.Mixed_5c = InceptionA(self.Mixed_5b.out_channels, pool_features=64, ch=ch)
        self.Mixed_5d = InceptionA(self.Mixed_5c.out_channels, pool_features=64, ch=ch)
        self.Mixed_6a = InceptionB(self.Mixed_5d.out_channels, ch=ch)
        self.Mixed_6b = InceptionC(self.Mixed_6a.out_channels, channels_7x7=128, ch=ch)
        self.Mixed_6c = InceptionC(self.Mixed_6b.out_channels, channels_7x7=160, ch=ch)
        self.Mixed_6d = InceptionC(self.Mixed_6c.out_channels, channels_7x7=160, ch=ch)
        self.Mixed_6e = InceptionC(self.Mixed_6d.out_channels, channels_7x7=192, ch=ch)
        self.Mixed_7a = InceptionD(self.Mixed_6e.out_channels, ch=ch)
        self.Mixed_7b = InceptionE(self.Mixed_7a.out_channels, ch=ch)
        self.Mixed_7c = InceptionE(self.Mixed_7b.out_channels, ch=ch)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(self.Mixed_7c.out_channels, classes)
        # torchvision's initialisation (Inception3.__init__ with init_weights=True); the Linear bias
        # keeps its default init there too.
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.1, a=-2, b=2)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(images)))
        x = self.maxpool1(x)
        x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)))
        x = self.Mixed_5d(self.Mixed_5c(self.Mixed_5b(x)))
        x = self.Mixed_6a(x)
        x = self.Mixed_6e(self.Mixed_6d(self.Mixed_6c(self.Mixed_6b(x))))
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
        x = torch.flatten(self.avgpool(x), 1)
        logits = self.fc(self.dropout(x))
        return F.cross_entropy(logits, labels), logits


MIN_IMAGE = 75
"""Smallest input side: the stem and the two grid reductions need at least 75x75 (torchvision too)."""


def _channels(width: float, multiple: int) -> Channels:
    def ch(c: int) -> int:
        return max(multiple, math.ceil(c * width / multiple) * multiple)

    return ch


def build(config: Config) -> nn.Module:
    """An Inception-v3 (no aux classifier) in training mode for `config`."""
    if int(config["image"]) < MIN_IMAGE:
        raise ValueError(f"inception_v3: `image` must be at least {MIN_IMAGE}, got {config['image']}")
    ch = _channels(float(config["width"]), int(config["channel_multiple"]))
    return Inception3(int(config["classes"]), ch, float(config["dropout"]))


MODEL = ZooModel(
    name="inception_v3",
    summary="Inception-v3 image classifier (main network, no auxiliary head)",
    build=build,
    inputs=image_inputs,
    configs={
        "small": {"image": 75, "classes": 10, "width": 0.0625, "channel_multiple": 4, "dropout": 0.5},
        "paper": {"image": 299, "classes": 1000, "width": 1.0, "channel_multiple": 4, "dropout": 0.5},
    },
    batch={"small": 2, "paper": 64},
    source="torchvision inception_v3 without the aux classifier (Szegedy et al. 2016)",
)
