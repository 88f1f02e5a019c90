"""An Inception-style tiny classifier whose image ops all split over height and width: a strided
stem (3x3/2, padding 1), a max pool, then two Inception-A-like blocks (1x1; 1x1 -> 3x3; 1x1 ->
5x5; 3x3 average pool -> 1x1; the four branches concatenated on the channels), each convolution
followed by BatchNorm and ReLU, global average pooling and a linear classifier."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvBn(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class Block(nn.Module):
    def __init__(self, cin: int, width: int) -> None:
        super().__init__()
        self.b1 = ConvBn(cin, width, 1)
        self.b3 = nn.Sequential(ConvBn(cin, width, 1), ConvBn(width, width, 3))
        self.b5 = nn.Sequential(ConvBn(cin, width, 1), ConvBn(width, width, 5))
        self.pool = ConvBn(cin, width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.pool(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), pooled], dim=1)


class Net(nn.Module):
    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        self.stem = ConvBn(3, 2 * width, 3, stride=2)
        self.block1 = Block(2 * width, width)
        self.block2 = Block(4 * width, width)
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.max_pool2d(self.stem(images), 2)
        x = self.block2(self.block1(x))
        logits = self.fc(x.mean(dim=(2, 3)))
        return F.cross_entropy(logits, labels), logits


def make(batch: int = 2, image: int = 16, width: int = 4, classes: int = 5):
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch, 3, image, image, generator=generator)
    labels = torch.randint(0, classes, (batch,), generator=generator)
    return Net(width, classes), (images, labels)
