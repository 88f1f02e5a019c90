"""Plain-torch stand-ins for the torchvision-style models of issue 26 (torchvision cannot be
installed here), each `make(batch=...) -> (module, (images|signal, labels))` for
`unityc-import file.py:make`:

- `convnext`: ConvNeXt-T's layout at tiny widths (patchify stem, CNBlocks with a 7x7 depthwise
  conv, channels-last LayerNorm, inverted MLP and layer scale; LayerNorm2d + 2x2 downsampling;
  AdaptiveAvgPool2d(1), whose channels-last restride exports as `aten.as_strided`);
- `mobilenet`: MobileNet-V2's inverted residual blocks with ReLU6 (`aten.hardtanh`);
- `conv1d`: a Conv1d front-end (Conv1d, BatchNorm1d, ReLU6, MaxPool1d, AvgPool1d, a strided
  slice of the sequence) before a linear classifier.
"""

from __future__ import annotations

import torch
from torch import nn


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.layer_norm(
            x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps
        )
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    def __init__(self, dim: int, scale: float = 1e-6) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, 7, padding=3, groups=dim),
            Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6),
            nn.Linear(dim, 4 * dim),
            nn.GELU(),
            nn.Linear(4 * dim, dim),
            Permute([0, 3, 1, 2]),
        )
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_scale * self.block(x) + x


class ConvNeXt(nn.Module):
    def __init__(
        self, dims: tuple[int, ...] = (8, 16), depths: tuple[int, ...] = (1, 1), classes: int = 10
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6))
        ]
        for i, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
            layers.append(nn.Sequential(*[CNBlock(dim) for _ in range(depth)]))
            if i + 1 < len(dims):
                layers.append(
                    nn.Sequential(LayerNorm2d(dim, eps=1e-6), nn.Conv2d(dim, dims[i + 1], 2, stride=2))
                )
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            LayerNorm2d(dims[-1], eps=1e-6), nn.Flatten(1), nn.Linear(dims[-1], classes)
        )

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.classifier(self.avgpool(self.features(images)))
        return nn.functional.cross_entropy(logits, labels), logits


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.conv = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6()),
            InvertedResidual(8, 8, 1, 1),
            InvertedResidual(8, 16, 2, 4),
            InvertedResidual(16, 16, 1, 4),
            nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, classes))

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pooled = nn.functional.adaptive_avg_pool2d(self.features(images), (1, 1)).flatten(1)
        logits = self.classifier(pooled)
        return nn.functional.cross_entropy(logits, labels), logits


class Conv1dNet(nn.Module):
    def __init__(self, channels: int = 4, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.front = nn.Sequential(
            nn.Conv1d(channels, width, 5, padding=2, bias=False),  # before BatchNorm, as CNNs write it
            nn.BatchNorm1d(width),
            nn.ReLU6(),
            nn.Conv1d(width, width, 3, stride=1, padding=2, dilation=2, groups=2),
            nn.ReLU(),
        )
        self.max_pool = nn.MaxPool1d(2)
        self.avg_pool = nn.AvgPool1d(2)
        self.head = nn.Linear(width * 16, classes)

    def forward(self, signal: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.front(signal)
        h = self.max_pool(h) + self.avg_pool(h) + h[:, :, ::2].clamp(-1.0, 1.0)
        logits = self.head(h.flatten(1))
        return nn.functional.cross_entropy(logits, labels), logits


def _labelled(
    model: nn.Module, x: torch.Tensor, classes: int = 10
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(1)
    return model, (x, torch.randint(0, classes, (x.shape[0],), generator=g))


def convnext(batch: int = 4, image: int = 32) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return _labelled(
        ConvNeXt(), torch.randn(batch, 3, image, image, generator=torch.Generator().manual_seed(0))
    )


def mobilenet(batch: int = 4, image: int = 32) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return _labelled(
        MobileNetV2(), torch.randn(batch, 3, image, image, generator=torch.Generator().manual_seed(0))
    )


def conv1d(batch: int = 4, length: int = 32) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return _labelled(Conv1dNet(), torch.randn(batch, 4, length, generator=torch.Generator().manual_seed(0)))


class Signal1d(nn.Module):
    def __init__(self, channels: int, width: int, depth: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(depth):
            out = width * 2**i
            for cin in (channels, out):
                layers += [nn.Conv1d(cin, out, 3, padding=1, bias=False), nn.BatchNorm1d(out), nn.ReLU()]
            layers.append(nn.MaxPool1d(2))
            channels = out
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(channels, classes)

    def forward(self, signal: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.body(signal).mean(dim=2))
        return nn.functional.cross_entropy(logits, labels), logits


def signal1d(
    batch: int = 2, length: int = 65536, channels: int = 1, width: int = 64, depth: int = 4, classes: int = 10
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A Conv1d front-end on long signals (`benchmarks/spatial_1d.py`): `depth` stages of two
    "same" 3-tap convolutions with BatchNorm and ReLU and a 2x max pool, channels doubling, the
    mean over time, a linear classifier."""
    torch.manual_seed(0)
    return _labelled(
        Signal1d(channels, width, depth, classes),
        torch.randn(batch, channels, length, generator=torch.Generator().manual_seed(0)),
        classes,
    )
