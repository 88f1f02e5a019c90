"""Tiny models for the importer's lit tests, one factory per ATen op family.

Each factory `name(**overrides)` returns `(module, example inputs)`; inputs are matched to
forward's positional arguments. Every forward returns `(loss, output)`: the loss is an op the
test does not mean to check (`F.mse_loss(out, target)`) unless the factory is about losses.
Shapes are small and distinct so that each dim is recognizable in the emitted types.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

_GENERATOR = torch.Generator().manual_seed(0)  # one factory runs per process: deterministic


def _rand(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=_GENERATOR)


def _ids(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=_GENERATOR)


class _Mse(nn.Module):
    """forward(x, target) = (mse_loss(body(x), target), body(x))."""

    def body(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.body(x)
        return F.mse_loss(out, target), out


# --- contractions ---------------------------------------------------------------------------


class Linears(_Mse):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 6)  # with bias, on a 3-D input
        self.fc2 = nn.Linear(6, 4, bias=False)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x))


def linear():
    """nn.Linear with and without bias on [2, 3, 8]."""
    return Linears(), (_rand(2, 3, 8), _rand(2, 3, 4))


class Matmuls(_Mse):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.w = nn.Parameter(torch.rand(6, 4))
        self.b = nn.Parameter(torch.rand(4))
        self.v = nn.Parameter(torch.rand(4, 3))

    def body(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)  # nn.Linear on a 2-D input
        h = h + torch.addmm(self.fc.bias, x, self.fc.weight.t())  # addmm(b, x, W^T) is a linear too
        h = torch.addmm(self.b, h, self.w)  # addmm with a plain matrix: matmul + add
        return torch.mm(h, self.v) @ self.v.t()  # torch.mm and a 2-D `@`


def matmul():
    """nn.Linear on a 2-D input, torch.addmm, torch.mm and a 2-D matmul."""
    return Matmuls(), (_rand(5, 8), _rand(5, 4))


class BatchMatmuls(nn.Module):
    def forward(
        self, a: torch.Tensor, b: torch.Tensor, q: torch.Tensor, k: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        c = torch.bmm(a, b)  # [3, 4, 5] x [3, 5, 6]
        s = q @ k  # [2, 3, 4, 5] x [2, 3, 5, 6]
        out = c + s.sum(0)
        return F.mse_loss(out, target), out


def bmm():
    """torch.bmm (3-D) and a 4-D matmul."""
    return BatchMatmuls(), (
        _rand(3, 4, 5),
        _rand(3, 5, 6),
        _rand(2, 3, 4, 5),
        _rand(2, 3, 5, 6),
        _rand(3, 4, 6),
    )


# --- convolution, pooling, normalization ----------------------------------------------------


class Convs(_Mse):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4, bias=False)
        self.conv3 = nn.Conv2d(8, 4, (1, 3), stride=(1, 2))

    def body(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(self.conv2(self.conv1(x)))


def conv():
    """Conv2d with stride and padding, dilation and groups, a non-square kernel."""
    return Convs(), (_rand(2, 3, 16, 16), _rand(2, 4, 8, 3))


class Pools(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.max = nn.MaxPool2d(3, stride=2, padding=1)
        self.avg = nn.AvgPool2d(2)
        self.avg_padded = nn.AvgPool2d(3, stride=1, padding=1)
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.grid = nn.AdaptiveAvgPool2d((2, 2))

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.avg_padded(self.avg(self.max(x)))  # [2, 4, 16, 16] -> 8x8 -> 4x4 -> 4x4
        out = self.grid(h) + self.global_pool(h)  # [2, 4, 2, 2] + [2, 4, 1, 1]
        return F.mse_loss(out, target), out


def pool():
    """Max and average pooling; adaptive average pooling to 1x1 and to 2x2."""
    return Pools(), (_rand(2, 4, 16, 16), _rand(2, 4, 2, 2))


class Norms(_Mse):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(4)
        self.ln = nn.LayerNorm(6, eps=1e-6)
        self.ln2 = nn.LayerNorm([5, 6], elementwise_affine=False)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln2(self.ln(self.bn(x)))


def norms():
    """BatchNorm2d (training), LayerNorm over 1 dim and over 2 dims without affine."""
    return Norms(), (_rand(2, 4, 5, 6), _rand(2, 4, 5, 6))


class RmsNorms(_Mse):
    """nn.RMSNorm, F.rms_norm over 2 dims without weight, HF Llama's RMSNorm written out, and a
    SwiGLU and a GeGLU."""

    def __init__(self) -> None:
        super().__init__()
        self.rms = nn.RMSNorm(6, eps=1e-6)
        self.weight = nn.Parameter(torch.ones(6))
        self.gate = nn.Linear(6, 6, bias=False)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        h = F.rms_norm(self.rms(x), [5, 6])
        hf = h.to(torch.float32)
        hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-5)
        h = self.weight * hf.to(h.dtype)
        h = F.silu(self.gate(h)) * h
        return F.gelu(h, approximate="tanh") * x


def rms_norms():
    return RmsNorms(), (_rand(2, 4, 5, 6), _rand(2, 4, 5, 6))


# --- elementwise ----------------------------------------------------------------------------


class Unary(_Mse):
    def body(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x)
        h = F.gelu(h)
        h = F.gelu(h, approximate="tanh")
        h = torch.sigmoid(h)
        h = torch.tanh(h)
        h = torch.exp(h)
        h = torch.sqrt(h)
        h = torch.rsqrt(h)
        return -h


def unary():
    """relu, gelu (exact, tanh), sigmoid, tanh, exp, sqrt, rsqrt, neg."""
    return Unary(), (_rand(4, 8), _rand(4, 8))


class Binary(nn.Module):
    def forward(
        self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        t = ((x + y) * (x - y)) / y  # tensor with tensor
        s = t + 2.0  # tensor with Python scalar
        s = s * 3.0
        s = s - 0.5  # x - s
        s = 1.0 - s  # s - x
        s = 4.0 / s  # s / x
        s = s / 8.0
        s = s + 0  # no-ops vanish
        s = s * 1
        return F.mse_loss(s, target), s


def binary():
    """add, sub, mul, div between tensors and with Python scalars."""
    return Binary(), (_rand(4, 8), _rand(4, 8) + 1, _rand(4, 8))


class Broadcast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.rand(8))

    def forward(
        self, x: torch.Tensor, row: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + row.expand(4, 8)  # an explicit expand feeds the add
        h = h * self.scale  # implicit numpy broadcasting of a [8] weight
        return F.mse_loss(h, target), h


def broadcast():
    """expand into an elementwise add, and implicit broadcasting."""
    return Broadcast(), (_rand(4, 8), _rand(1, 8), _rand(4, 8))


class RepeatKv(nn.Module):
    """Grouped-query attention's K/V repeat (HF's `repeat_kv`): 2 KV heads, each read by 2 of
    the 4 query heads."""

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, heads, s, d = kv.shape
        repeated = kv[:, :, None, :, :].expand(b, heads, 2, s, d).reshape(b, heads * 2, s, d)
        out = q @ repeated.transpose(2, 3)
        return out.sum(), out


def repeat_kv():
    """expand then reshape (GQA): the broadcast is materialized, then reshaped."""
    return RepeatKv(), (_rand(2, 4, 5, 3), _rand(2, 2, 5, 3))


class ClsToken(nn.Module):
    """ViT's CLS token: a [1, 1, D] weight expanded over the batch and concatenated in front of
    the patch embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.cls = nn.Parameter(torch.rand(1, 1, 6))

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1)
        return F.mse_loss(h, target), h


def cls_token():
    """expand into a concat (ViT's CLS token over the batch)."""
    return ClsToken(), (_rand(4, 3, 6), _rand(4, 4, 6))


class ExpandIds(nn.Module):
    """An integer tensor expanded into a non-elementwise op stays an error."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids.expand(3, 5)).sum()


def expand_ids():
    return ExpandIds(), (_ids(10, 1, 5),)


class Reductions(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x.sum(dim=1)  # [2, 3, 4] -> [2, 4]
        b = x.mean(dim=(1, 2), keepdim=True)  # -> [2, 1, 1]
        c = x.sum(dim=-1, keepdim=True)  # -> [2, 3, 1]
        out = a.mean(-1) + b.squeeze(-1).squeeze(-1) + c.mean(dim=(1, 2))  # [2]
        return out.sum(), out  # the loss is sum over every dim


def reduce():
    """sum/mean over dims, keepdim both ways, and a full sum as the loss."""
    return Reductions(), (_rand(2, 3, 4),)


class Losses(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 5)

    def forward(
        self, x: torch.Tensor, labels: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.fc(x)
        probs = torch.softmax(logits, dim=-1)
        ce = F.cross_entropy(logits, labels)
        nll = F.nll_loss(F.log_softmax(logits, dim=1), labels, reduction="sum")
        mse = F.mse_loss(probs, target) + F.mse_loss(probs, target, reduction="sum")
        return ce + nll + mse, probs


def losses():
    """softmax; cross_entropy and log_softmax + nll_loss (sum) become pcg.cross_entropy;
    mse_loss with mean and sum reduction."""
    return Losses(), (_rand(4, 8), _ids(5, 4), _rand(4, 5))


class Dropouts(_Mse):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.25)
        self.off = nn.Dropout(0.0)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.off(self.drop(x)), p=0.5)


def dropout():
    """nn.Dropout, F.dropout, and a dropout with p=0 (which vanishes)."""
    return Dropouts(), (_rand(4, 8), _rand(4, 8))


# --- embeddings -----------------------------------------------------------------------------


class Embeddings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(10, 6)
        self.padded = nn.Embedding(10, 6, padding_idx=-1)  # row 9: no gradient from the lookup
        self.bag_sum = nn.EmbeddingBag(12, 6, mode="sum")
        self.bag_mean = nn.EmbeddingBag(12, 6, mode="mean")

    def forward(
        self, ids: torch.Tensor, bags: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        e = self.tok(ids) + self.padded(ids)  # [4, 3] -> [4, 3, 6]
        b = self.bag_sum(bags) + self.bag_mean(bags)  # [4, 5] -> [4, 6]
        out = e.sum(1) + b
        return F.mse_loss(out, target), out


def embedding():
    """nn.Embedding, with and without padding_idx; nn.EmbeddingBag on 2-D indices, sum and mean."""
    return Embeddings(), (_ids(10, 4, 3), _ids(12, 4, 5), _rand(4, 6))


# --- shapes ---------------------------------------------------------------------------------


class Shapes(nn.Module):
    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.view(2, 3, 4, 5)  # from [6, 20]
        h = h.permute(0, 2, 1, 3)  # [2, 4, 3, 5]
        h = h.contiguous().clone()  # vanish
        h = h.reshape(2, 4, 15)
        h = h.transpose(1, 2)  # [2, 15, 4]
        h = h.unsqueeze(0)  # [1, 2, 15, 4]
        h = h.flatten(2)  # [1, 2, 60]
        h = h.squeeze(0)  # [2, 60]
        return F.mse_loss(h, target), h


def shapes():
    """view, permute, contiguous, clone, reshape, transpose, unsqueeze, flatten, squeeze."""
    return Shapes(), (_rand(6, 20), _rand(2, 60))


class Plumbing(nn.Module):
    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.view(4, 2, 4).reshape(4, 8)  # back to where it started
        h = h.transpose(0, 1).t()  # two transposes that cancel
        h = h.unsqueeze(1).squeeze(1).contiguous()
        h = torch.relu(h)
        return F.mse_loss(h, target), h


def plumbing():
    """Shape ops that cancel out leave no pcg.reshape or pcg.transpose."""
    return Plumbing(), (_rand(4, 8), _rand(4, 8))


class CatSplit(nn.Module):
    def forward(
        self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.cat([x, y], dim=1)  # [4, 3] ++ [4, 5] -> [4, 8]
        a, b, c = torch.split(h, [2, 2, 4], dim=1)
        d, e = torch.chunk(h, 2, dim=-1)
        f, g = h.split(3, dim=0)  # uneven: 3 + 1 rows
        out = torch.cat([a * b, b, e], dim=1) + torch.cat([d, c], dim=1) + g.sum(0) + f.sum(0)
        return F.mse_loss(out, target), out


def cat_split():
    """torch.cat, split (sizes and uneven size), chunk."""
    return CatSplit(), (_rand(4, 3), _rand(4, 5), _rand(4, 8))


class Slicing(nn.Module):
    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        first = x[:, 0]  # select: [4, 6, 8] -> [4, 8]
        middle = x[:, 2:5].sum(1)  # slice in the middle -> [4, 3, 8]
        tail = x[:, :, -3:].sum(-1, keepdim=True)  # slice at the end -> [4, 6, 3]
        whole = x[:, 0:6]  # the whole dim: no op
        out = first + middle + tail[:, 1] + whole[:, -1]
        return F.mse_loss(out, target), out


def slicing():
    """x[:, 0] (select), slices at the start, middle and end, and a full slice."""
    return Slicing(), (_rand(4, 6, 8), _rand(4, 8))


class Gather(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        li, lj = torch.tril_indices(4, 4, offset=-1)  # the strictly lower triangle of a 4x4
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pairs = x[:, self.li, self.lj]  # [2, 4, 4] -> [2, 6]
        return F.mse_loss(pairs, target), pairs


def gather():
    """x[:, li, lj] with constant index buffers (DLRM's interaction) -> reshape + pcg.gather."""
    return Gather(), (_rand(2, 4, 4), _rand(2, 6))


class Unfold(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        windows = x.unfold(1, 3, 2)  # [2, 5] -> [2, 2, 3]: windows of 3 every 2
        return windows.sum(), windows


def unfold():
    """Tensor.unfold -> pcg.gather of each window's elements, reshape, window axis last."""
    return Unfold(), (_rand(2, 5),)


# --- attention, constants, tied weights -----------------------------------------------------


class Causal(nn.Module):
    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.mse_loss(out, target), out


def sdpa_causal():
    """F.scaled_dot_product_attention(is_causal=True) on [B, H, S, D] = [2, 2, 3, 4]."""
    return Causal(), (_rand(2, 2, 3, 4), _rand(2, 2, 3, 4), _rand(2, 2, 3, 4), _rand(2, 2, 3, 4))


class PaddingMask(nn.Module):
    """Hugging Face's additive attention mask, built as transformers builds it: the [B, Sk]
    padding mask read at broadcast arange indices, anded with a causal mask and with an all-true
    constant, then `where(allowed, 0, finfo.min)`."""

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, seq, _ = x.shape
        b = torch.arange(batch, device=x.device)[:, None, None, None]
        k = torch.arange(seq, device=x.device)[None, None, None, :]
        q = torch.arange(seq, device=x.device)[None, None, :, None]
        padding = torch.ones((), dtype=torch.bool, device=x.device) & mask.bool()[b, k]  # [B, 1, 1, S]
        allowed = (k <= q) & padding  # [B, 1, S, S]
        additive = torch.where(allowed, 0.0, torch.finfo(x.dtype).min)
        scores = (x @ x.transpose(1, 2)).unsqueeze(1) + additive
        out = scores.softmax(-1)
        return F.mse_loss(out, target), out


def padding_mask():
    """A [2, 4] padding mask (the second sequence's last token padded) over [2, 4, 3] scores."""
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    return PaddingMask(), (_rand(2, 4, 3), mask, _rand(2, 1, 4, 4))


class Positions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Embedding(5, 4)
        self.register_buffer("position_ids", torch.arange(5).unsqueeze(0), persistent=False)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = x.shape[1]
        h = x + self.pos(self.position_ids[:, :seq])  # a slice of a buffer: folded
        h = h + torch.arange(4, dtype=torch.float32, device=x.device)  # no input: folded
        return F.mse_loss(h, target), h


def positions():
    """A position-id buffer and torch.arange fold into pcg.constant."""
    return Positions(), (_rand(2, 3, 4), _rand(2, 3, 4))


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # one Parameter, two modules

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.embed(ids))
        return F.cross_entropy(logits, labels), logits


def tied():
    """An embedding and an output projection sharing one weight."""
    return Tied(), (_ids(10, 6), _ids(10, 6))


class SelfAttention(nn.Module):
    """Multi-head self-attention written out as in HuggingFace's eager BertSelfAttention, or
    (`sdpa`) with F.scaled_dot_product_attention at its core."""

    def __init__(self, hidden: int = 8, heads: int = 2, p: float = 0.1, sdpa: bool = False) -> None:
        super().__init__()
        self.heads, self.width, self.p, self.sdpa = heads, hidden // heads, p, sdpa
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(p)
        self.output = nn.Linear(hidden, hidden)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.width).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        if self.sdpa:
            context = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0)
        else:
            scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(self.width))
            probs = self.dropout(torch.softmax(scores, dim=-1))
            context = probs @ v
        context = context.permute(0, 2, 1, 3).contiguous()
        b, s = context.shape[:2]
        return self.output(context.reshape(b, s, self.heads * self.width))


class Encoder(nn.Module):
    def __init__(self, hidden: int, heads: int, sdpa: bool) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads, sdpa=sdpa)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.attn(x)
        return F.mse_loss(out, target), out


def attention(hidden: int = 8, heads: int = 2, sdpa: bool = False, batch: int = 2):
    """Self-attention on [batch, 3, hidden] (eager BERT style, or SDPA): one pcg.attention."""
    return Encoder(hidden, heads, sdpa), (_rand(batch, 3, hidden), _rand(batch, 3, hidden))


# --- known bugs (the known_bug_*.mlir tests, marked XFAIL) ----------------------------------


class ZeroBroadcast(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + torch.zeros(3, 4, device=x.device)  # [4] + [3, 4] of zeros: the result is [3, 4]
        return h.sum(), h


def zero_broadcast():
    """Adding an all-zero constant that broadcasts the other operand to a larger shape."""
    return ZeroBroadcast(), (_rand(4),)


class AddmmMatrixBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.rand(6, 8))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.addmm(c, x, self.w.t())  # c is [5, 6], not a [6] bias
        return h.sum(), h


def addmm_matrix_bias():
    """torch.addmm(c, x, W^T) of a weight W, where c is a full [N, out] matrix."""
    return AddmmMatrixBias(), (_rand(5, 8), _rand(5, 6))


class ArangeDefaultDevice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x) + torch.arange(4, dtype=torch.float32)  # no device=: the default (CPU)
        return h.sum(), h


def arange_default_device():
    """A tensor made in forward without device=, as plenty of eager code does."""
    return ArangeDefaultDevice(), (_rand(2, 4),)


class TorchMha(_Mse):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(hidden, heads, dropout=0.1, batch_first=True)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def mha(hidden: int = 8, heads: int = 2, batch: int = 2):
    """torch's own nn.MultiheadAttention (packed in_proj_weight) on [batch, 3, hidden]."""
    return TorchMha(hidden, heads), (_rand(batch, 3, hidden), _rand(batch, 3, hidden))
