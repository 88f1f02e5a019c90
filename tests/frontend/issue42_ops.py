"""Models reading the ops issue 42 adds, for the importer's --check: `torch.log1p` (a softplus
written as log1p(exp(x)), as Mamba-style gates write it) and `Tensor.repeat` (a tiled tensor, as
Hugging Face's models repeat position tables and KV heads)."""

from __future__ import annotations

import torch
from torch import nn


class Softplus(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.log1p(torch.exp(self.fc(x)))
        return nn.functional.mse_loss(h, y), h


def make(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return Softplus(), {
        "x": torch.randn(batch, 8, generator=generator),
        "y": torch.randn(batch, 4, generator=generator),
    }


class Tiled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x).repeat(2, 3)  # [2 * batch, 12]
        h = h.repeat(2, 1, 1)  # a new leading dim: [2, 2 * batch, 12]
        return nn.functional.mse_loss(h.sum(0), y.repeat(2, 3)), h


def tiled(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return Tiled(), {
        "x": torch.randn(batch, 8, generator=generator),
        "y": torch.randn(batch, 4, generator=generator),
    }


class FeatureEncoder(nn.Module):
    """wav2vec 2.0's first feature-encoder layer: a Conv1d, a GroupNorm (one group per channel,
    as wav2vec 2.0 has it, and two groups of four channels), GELU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 4, stride=2, bias=False)
        self.norm = nn.GroupNorm(8, 8)
        self.halves = nn.GroupNorm(2, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = nn.functional.gelu(self.halves(self.norm(self.conv(x))))
        logits = self.head(h.mean(-1))
        return nn.functional.cross_entropy(logits, y), logits


def feature_encoder(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    audio = torch.randn(batch, 1, 32, generator=generator)
    return FeatureEncoder(), {"x": audio, "y": torch.randint(0, 3, (batch,), generator=generator)}


class PositionalConv(nn.Module):
    """wav2vec 2.0's positional conv embedding: a grouped Conv1d under weight norm over every dim
    but the kernel's (`weight = g * v / ||v||`, torch's parametrization), GELU, added back."""

    def __init__(self) -> None:
        super().__init__()
        conv = nn.Conv1d(8, 8, 4, padding=2, groups=2)
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + nn.functional.gelu(self.conv(x)[..., :-1])
        logits = self.head(h.mean(-1))
        return nn.functional.cross_entropy(logits, y), logits


def positional_conv(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    frames = torch.randn(batch, 8, 12, generator=generator)
    return PositionalConv(), {"x": frames, "y": torch.randint(0, 3, (batch,), generator=generator)}


class Xielu(nn.Module):
    """xIELU's written-out form (Apertus' activation): `where(x > 0, ..., expm1(min(x, eps)) ...)`,
    and the elementwise max of two activations."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.gate = nn.Linear(8, 4)
        self.register_buffer("eps", torch.tensor(-1e-6))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x)
        negative = torch.expm1(torch.minimum(h, self.eps)) - h
        h = torch.where(h > 0, h * h, negative)
        h = torch.maximum(h, self.gate(x))
        return nn.functional.mse_loss(h, y), h


def xielu(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return Xielu(), {
        "x": torch.randn(batch, 8, generator=generator),
        "y": torch.randn(batch, 4, generator=generator),
    }


class SparseMixerGate(nn.Module):
    """PhiMoE's sparse-mixer router normalisation: |scores| (`Tensor.abs`, both signs of the
    scores reach it) clamped below by the row's largest score (`clamp` by a tensor), a relative
    distance to it; a clamp above by another tensor and a number-bounded clamp."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.cap = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x)
        top = h.amax(-1, keepdim=True)
        factor = h.abs().clamp(min=top * 0.5)
        h = (top - h).abs() / factor
        h = h.clamp(max=self.cap(x)).clamp(min=-2.0, max=2.0)
        return nn.functional.mse_loss(h, y), h


def sparse_mixer_gate(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return SparseMixerGate(), {
        "x": torch.randn(batch, 8, generator=generator),
        "y": torch.randn(batch, 4, generator=generator),
    }


class AttentionSink(nn.Module):
    """Granite-SWA's attention sink: sigmoid(logsumexp(scores) - sink), `torch.logsumexp` (its
    decomposition's `log`, and `abs` of the row maximum) over causally masked scores."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.k = nn.Linear(8, 8)
        self.sink = nn.Parameter(torch.tensor(0.3))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.q(x) @ self.k(x).transpose(-1, -2)  # [batch, seq, seq]
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, torch.finfo(scores.dtype).min)
        h = (torch.logsumexp(scores, dim=-1) - self.sink).sigmoid()
        return nn.functional.mse_loss(h, y), h


def attention_sink(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return AttentionSink(), {
        "x": torch.randn(batch, 6, 8, generator=generator),
        "y": torch.rand(batch, 6, generator=generator),
    }


class ZeroRowNorm(nn.Module):
    """Zaya's q/k L2 normalization, `q / q.norm(p=2, dim=-1, keepdim=True).clamp_min(eps)`, over
    rows one of which is all zero (a zero input row through a linear without bias)."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q(x)
        h = self.head(q / q.norm(p=2, dim=-1, keepdim=True).clamp_min(1e-6))
        return nn.functional.mse_loss(h, y), h


def zero_row_norm(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 8, generator=generator)
    x[1] = 0.0
    return ZeroRowNorm(), {"x": x, "y": torch.randn(batch, 4, generator=generator)}
