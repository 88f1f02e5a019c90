"""EfficientNet-B0 as torchvision builds it (`efficientnet_b0`: its stem, its 16 MBConv blocks
with depthwise convolutions, squeeze-and-excitation and SiLU, its 1280-wide head), written in
plain torch (torchvision's wheel does not load here), classifying small images.

Its gradients are badly conditioned in fp32: the serial plan of the stock model failed the
default `--check` (1.1e-4 > 1e-4 on an SE block's bias gradient) while float64 agreed to 2e-13,
so --check's fp32 tolerance must follow the model (`check.allowed_error`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# (expand ratio, kernel, stride, input channels, output channels, layers): torchvision's B0
STAGES = [
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
]
IMAGE, CLASSES = 32, 10


def conv_bn(
    cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.SiLU())
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = F.adaptive_avg_pool2d(x, 1)
        scale = torch.sigmoid(self.fc2(F.silu(self.fc1(scale))))
        return x * scale


class MBConv(nn.Module):
    def __init__(self, expand: int, kernel: int, stride: int, cin: int, cout: int) -> None:
        super().__init__()
        wide = cin * expand
        layers: list[nn.Module] = [conv_bn(cin, wide, 1)] if expand != 1 else []
        layers += [
            conv_bn(wide, wide, kernel, stride, groups=wide),
            SqueezeExcitation(wide, max(1, cin // 4)),
            conv_bn(wide, cout, 1, act=False),
        ]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class EfficientNetB0(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        blocks: list[nn.Module] = [conv_bn(3, 32, 3, 2)]
        for expand, kernel, stride, cin, cout, layers in STAGES:
            for i in range(layers):
                blocks.append(MBConv(expand, kernel, stride if i == 0 else 1, cin if i == 0 else cout, cout))
        blocks.append(conv_bn(320, 1280, 1))
        self.features = nn.Sequential(*blocks)
        self.classifier = nn.Linear(1280, CLASSES)
        for m in self.modules():  # torchvision's initialization
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                bound = 1.0 / math.sqrt(m.out_features)
                nn.init.uniform_(m.weight, -bound, bound)
                nn.init.zeros_(m.bias)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.adaptive_avg_pool2d(self.features(images), 1).flatten(1)
        logits = self.classifier(x)
        return F.cross_entropy(logits, labels), logits


def make(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    images = torch.randn(batch, 3, IMAGE, IMAGE, generator=generator)
    labels = torch.randint(0, CLASSES, (batch,), generator=generator)
    return EfficientNetB0(), {"images": images, "labels": labels}
