"""Models whose graphs do not cut into a chain of segments (issue 26): a language model over an
`nn.LSTM` (its cell unrolled over time: every step reads the previous step's hidden and cell
state, so no single op separates the steps' ops... except the state itself, through two
values), and a DenseNet-style CNN whose every layer reads the concatenation of all the block's
earlier outputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LstmLM(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, layers, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, _ = self.lstm(self.embed(ids))
        logits = self.head(hidden)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)), logits


def lstm(
    batch: int = 64, seq: int = 6, vocab: int = 256, width: int = 128, layers: int = 1
) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), generator=generator)
    labels = torch.randint(0, vocab, (batch, seq), generator=generator)
    return LstmLM(vocab, width, layers), {"ids": ids, "labels": labels}


class DenseBlock(nn.Module):
    def __init__(self, channels: int, growth: int, layers: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv2d(channels + i * growth, growth, 3, padding=1) for i in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for conv in self.convs:
            features.append(torch.relu(conv(torch.cat(features, dim=1))))
        return torch.cat(features, dim=1)


class DenseNet(nn.Module):
    def __init__(self, channels: int, growth: int, layers: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.block = DenseBlock(channels, growth, layers)
        self.head = nn.Linear(channels + layers * growth, classes)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.block(torch.relu(self.stem(images)))
        logits = self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))
        return F.cross_entropy(logits, labels), logits


def densenet(
    batch: int = 64, image: int = 16, channels: int = 16, growth: int = 16, layers: int = 4
) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    images = torch.randn(batch, 3, image, image, generator=generator)
    labels = torch.randint(0, 10, (batch,), generator=generator)
    return DenseNet(channels, growth, layers, 10), {"images": images, "labels": labels}
