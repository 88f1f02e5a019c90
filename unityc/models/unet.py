"""U-Net (Ronneberger et al. 2015), a segmentation network for high-resolution images, in plain torch.

An encoder of `depth` stages (two 3x3 convolutions with padding 1, each followed by BatchNorm and
ReLU, then a 2x2 max pool), a bottleneck double convolution, and a decoder that mirrors it: each
stage upsamples by a 2x2 stride-2 transposed convolution written as a 1x1 convolution to four
times the channels and a pixel shuffle (the same map; the importer has no transposed
convolution), concatenates the encoder's skip features on the channels and runs a double
convolution; a 1x1 convolution gives per-pixel class scores and the loss is the per-pixel
cross-entropy. Padded convolutions keep every size a power of two, as in the common "same" U-Net
variant, so the output has the input's height and width.

Configuration keys: `image` (square side), `in_channels`, `classes`, `base_channels` (the first
stage's width; stage `i` has `base_channels * 2**i`), `depth` (pooling stages). The `paper`
config is the high-resolution workload of issue 29: 1024x1024 images, 8 of them (fewer images
than devices: data parallelism alone cannot use a 16- or 48-GPU machine), the original 64-channel,
4-stage network.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from unityc.models import Config, ZooModel


class DoubleConv(nn.Module):
    """(3x3 convolution, BatchNorm, ReLU) twice: U-Net's unit."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(x)))


class Up(nn.Module):
    """2x upsampling as a transposed 2x2/2 convolution: a 1x1 convolution to 4 sub-pixels per
    output channel, shuffled into a 2x larger image."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.proj = nn.Conv2d(in_channels, 4 * out_channels, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        y = self.proj(x).reshape(n, self.out_channels, 2, 2, h, w)
        return y.permute(0, 1, 4, 2, 5, 3).reshape(n, self.out_channels, 2 * h, 2 * w)


class UNet(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        base, depth = int(config["base_channels"]), int(config["depth"])
        widths = [base * 2**i for i in range(depth + 1)]
        self.classes = int(config["classes"])
        self.down = nn.ModuleList()
        channels = int(config["in_channels"])
        for width in widths[:-1]:
            self.down.append(DoubleConv(channels, width))
            channels = width
        self.bottom = DoubleConv(widths[-2], widths[-1])
        self.ups = nn.ModuleList(Up(widths[i + 1], widths[i]) for i in reversed(range(depth)))
        self.up_convs = nn.ModuleList(DoubleConv(2 * widths[i], widths[i]) for i in reversed(range(depth)))
        self.head = nn.Conv2d(widths[0], self.classes, kernel_size=1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, images: torch.Tensor, masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        skips = []
        x = images
        for stage in self.down:
            x = stage(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, conv, skip in zip(self.ups, self.up_convs, reversed(skips), strict=True):
            x = conv(torch.cat([up(x), skip], dim=1))
        logits = self.head(x)
        scores = logits.permute(0, 2, 3, 1).reshape(-1, self.classes)
        return F.cross_entropy(scores, masks.reshape(-1)), logits


def build(config: Config) -> nn.Module:
    return UNet(config)


def inputs(config: Config, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random images `[batch, in_channels, image, image]` and per-pixel class masks."""
    side = int(config["image"])
    images = torch.randn(batch, int(config["in_channels"]), side, side, generator=generator)
    masks = torch.randint(0, int(config["classes"]), (batch, side, side), generator=generator)
    return {"images": images, "masks": masks}


MODEL = ZooModel(
    name="unet",
    summary="U-Net segmentation network for high-resolution images (fewer images than devices)",
    build=build,
    inputs=inputs,
    configs={
        "small": {"image": 16, "in_channels": 3, "classes": 3, "base_channels": 4, "depth": 2},
        "paper": {"image": 1024, "in_channels": 3, "classes": 2, "base_channels": 64, "depth": 4},
    },
    batch={"small": 2, "paper": 8},
    source="Ronneberger et al. 2015 (U-Net), same-padded; issue 29's 1024x1024 x 8 workload",
)
