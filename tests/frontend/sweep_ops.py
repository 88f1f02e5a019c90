"""Models reading what the Hugging Face sweep found missing, for the importer's --check: complex
arithmetic (Llama 4's rotary, `view_as_real(view_as_complex(x) * freqs_cis)`, with a complex sum
and a real scale besides) and a count of a boolean mask (CPM-Ant's `(segment != 0).sum(-1)`)."""

from __future__ import annotations

import torch
from torch import nn


class ComplexRotary(nn.Module):
    """Query projection rotated as complex numbers (Llama 4's `apply_rotary_emb`), then a complex
    sum with a second projection and a real scale, back to reals, a linear head."""

    def __init__(self, heads: int = 2, dim: int = 4) -> None:
        super().__init__()
        self.heads, self.dim = heads, dim
        self.q = nn.Linear(8, heads * dim)
        self.k = nn.Linear(8, heads * dim)
        self.head = nn.Linear(heads * dim, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, seq, _ = x.shape
        position = torch.arange(seq, dtype=torch.float32)
        inverse = 1.0 / (100.0 ** (torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim))
        angles = torch.outer(position, inverse)  # [seq, dim / 2]
        freqs_cis = torch.polar(torch.ones_like(angles), angles)
        q = self.q(x).view(batch, seq, self.heads, self.dim)
        k = self.k(x).view(batch, seq, self.heads, self.dim)
        zq = torch.view_as_complex(q.float().reshape(batch, seq, self.heads, -1, 2))
        zk = torch.view_as_complex(k.float().reshape(batch, seq, self.heads, -1, 2))
        rotated = zq * freqs_cis[None, :, None, :]
        mixed = (rotated + zk * zq) * 0.5 - zk
        h = torch.view_as_real(mixed).flatten(3).type_as(q).reshape(batch, seq, -1)
        logits = self.head(h).mean(1)
        return nn.functional.cross_entropy(logits, y), logits


def complex_rotary(batch: int = 2) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return ComplexRotary(), {
        "x": torch.randn(batch, 6, 8, generator=generator),
        "y": torch.randint(0, 3, (batch,), generator=generator),
    }


class CountedTokens(nn.Module):
    """CPM-Ant's input handling: int32 ids looked up, and a count of the non-pad tokens per row
    (a boolean sum) scaling the pooled states."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids = ids.to(torch.int32)
        length = (ids != 0).sum(-1).to(torch.int32)  # [batch]
        h = self.embed(ids).sum(1) / length[:, None].float()
        logits = self.head(h)
        return nn.functional.cross_entropy(logits, y), logits


def counted_tokens(batch: int = 3) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 10, (batch, 5), generator=generator)
    ids[0, 3:] = 0  # padding: rows of different lengths
    ids[1, 4:] = 0
    return CountedTokens(), {"ids": ids, "y": torch.randint(0, 3, (batch,), generator=generator)}


class ScatteredRouter(nn.Module):
    """Llama 4's router (the top-k logits scattered into a table of -inf, then a sigmoid) and
    DeepSeek-V3.2's index mask (False scattered into an all-True mask at the top-k keys)."""

    def __init__(self, experts: int = 5, k: int = 2) -> None:
        super().__init__()
        self.k = k
        self.router = nn.Linear(8, experts, bias=False)
        self.scorer = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8 + experts, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.router(x)  # [batch, experts]
        top_value, top_index = torch.topk(logits, self.k, dim=1)
        scores = torch.full_like(logits, float("-inf")).scatter_(1, top_index, top_value)
        scores = torch.sigmoid(scores)
        keys = self.scorer(x)  # [batch, 8]: keep the 3 best "keys" of each row, mask the rest
        _, chosen = torch.topk(keys, 3, dim=1)
        masked = torch.ones_like(keys, dtype=torch.bool).scatter(-1, chosen, False)
        kept = keys.masked_fill(masked, 0.0)
        logits = self.head(torch.cat([kept, scores], dim=-1))
        return nn.functional.cross_entropy(logits, y), logits


def scattered_router(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return ScatteredRouter(), {
        "x": torch.randn(batch, 8, generator=generator),
        "y": torch.randint(0, 3, (batch,), generator=generator),
    }


class InfiniteMask(nn.Module):
    """CPM-Ant's attention masking: scores filled with -inf where a computed mask (padding and
    causality) is False, a softmax, the masked weights filled with 0 after it (where `~mask`);
    and a min over the scores with +inf where masked, as a second consumer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.q = nn.Linear(8, 8)
        self.k = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.embed(ids)  # [batch, seq, 8]
        seq = ids.shape[1]
        causal = torch.arange(seq)[None, :] <= torch.arange(seq)[:, None]
        mask = (ids != 0)[:, None, :] & causal[None]  # [batch, seq, seq]
        raw = self.q(h) @ self.k(h).transpose(1, 2)
        score = torch.masked_fill(raw, mask == torch.tensor(False), float("-inf"))
        weights = torch.masked_fill(torch.softmax(score, -1), ~mask, 0.0)  # AXK1's `~mask`
        ceiling = torch.where(mask, raw, float("inf")).amin(-1, keepdim=True)  # the least seen
        logits = self.head(weights @ h + ceiling).mean(1)
        return nn.functional.cross_entropy(logits, y), logits


def infinite_mask(batch: int = 3) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 10, (batch, 5), generator=generator)
    ids[0, 3:] = 0  # padding: the first query position always sees itself
    return InfiniteMask(), {"ids": ids, "y": torch.randint(0, 3, (batch,), generator=generator)}


class Float32Variance(nn.Module):
    """CPM-Ant's RMS norm, its variance computed in float32 whatever the model's dtype
    (`x.to(torch.float32).pow(2).mean(-1)`), between linears, and a float32 softmax."""

    def __init__(self, layers: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(layers))
        self.scales = nn.ParameterList(nn.Parameter(1 + 0.1 * torch.randn(16)) for _ in range(layers))
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for layer, scale in zip(self.layers, self.scales, strict=True):
            variance = x.to(torch.float32).pow(2).mean(dim=-1, keepdim=True)
            x = x + layer((x * torch.rsqrt(variance + 1e-6)).to(x.dtype) * scale)
        logits = self.head(torch.softmax(x, -1, dtype=torch.float32).to(x.dtype) * x)
        return nn.functional.cross_entropy(logits, y), logits


def float32_variance(batch: int = 8) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return Float32Variance(), {
        "x": 3 * torch.randn(batch, 16, generator=generator),
        "y": torch.randint(0, 3, (batch,), generator=generator),
    }


class DtypeFloor(nn.Module):
    """XGLM's attention floor: the masked scores raised to at least the dtype's most negative
    number, `torch.max(w, torch.full((), torch.finfo(w.dtype).min))`, before a softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.k = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.q(x) @ self.k(x).transpose(-1, -2)
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, torch.finfo(scores.dtype).min)
        scores = torch.max(scores, torch.full((), torch.finfo(scores.dtype).min))
        h = torch.softmax(scores, -1) @ x
        return nn.functional.mse_loss(h, y), h


def dtype_floor(batch: int = 3) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return DtypeFloor(), {
        "x": torch.randn(batch, 5, 8, generator=generator),
        "y": torch.randn(batch, 5, 8, generator=generator),
    }


class AssertedLengths(nn.Module):
    """XLM's input check: the non-pad lengths, `assert lengths.max().item() <= slen` (a runtime
    assertion on a number read back from a tensor), then a length mask of the positions."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = (ids != 0).sum(dim=1).long()
        assert lengths.max().item() <= ids.shape[1]
        mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
        h = (self.embed(ids) * mask[..., None].float()).sum(1)
        logits = self.head(h)
        return nn.functional.cross_entropy(logits, y), logits


def asserted_lengths(batch: int = 3) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 10, (batch, 5), generator=generator)
    ids[0, 3:] = 0
    return AssertedLengths(), {"ids": ids, "y": torch.randint(0, 3, (batch,), generator=generator)}


class NoGradCycles(nn.Module):
    """HRM's reasoning cycles: all but the last under `torch.no_grad()`, so the gradient comes
    from the last cycle only; a router-like `detach()` of scores that then scale the output
    (Zaya's balancing biases on detached probabilities)."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(8, 8)
        self.inject = nn.Linear(8, 8)
        self.score = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.zeros_like(x)
        with torch.no_grad():
            for _ in range(2):
                z = torch.tanh(self.cell(z) + self.inject(x))
        z = torch.tanh(self.cell(z) + self.inject(x))
        gate = torch.softmax(self.score(x), -1)
        z = z * (gate.detach() + gate)
        logits = self.head(z)
        return nn.functional.cross_entropy(logits, y), logits


def no_grad_cycles(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return NoGradCycles(), {
        "x": torch.randn(batch, 8, generator=generator),
        "y": torch.randint(0, 3, (batch,), generator=generator),
    }
