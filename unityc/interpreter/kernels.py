"""What one task of each pcg op computes on its local pieces (the SPMD program's body).

A kernel gets the task (to know its partial-sum index or vocabulary range) and the local
operand pieces, and returns the local result pieces. Shapes of pieces follow the op's form.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from unityc.dialects import pcg
from unityc.dialects.forms import Form
from unityc.dialects.literals import stored_once
from unityc.dialects.pcg_types import FLOAT_TYPES, TORCH_NAMES, PcgOp, TensorType
from unityc.dialects.spatial import Halo, window_halo
from unityc.interpreter.pieces import Pieces, assemble
from unityc.runtime.kernels import (
    attention,
    check_classes,
    clamp,
    class_shard_losses,
    topk_indices,
    vocab_lookup,
    with_halo,
    without_padding,
)


@dataclass
class Task:
    op: Any
    form: Form
    coords: dict[str, int]
    attrs: dict[str, Any]
    float_dtype: torch.dtype | None = None
    values: Sequence[Pieces | None] = ()
    """Every piece of every operand, for kernels whose tasks reduce across shards (the
    vocabulary-parallel cross-entropy), as -t torch does with collectives."""

    def peers(self, operand: int, factor: str) -> list[torch.Tensor]:
        """This task's piece of `operand` as each task differing only in `factor` reads it."""
        layout = self.form.operands[operand]
        assert layout is not None
        value = self.values[operand]
        assert value is not None
        return [
            value[self.form.coord(layout, {**self.coords, factor: j})] for j in range(self.degree(factor))
        ]

    def index(self, factor: str) -> int:
        return self.coords.get(factor, 0)

    def degree(self, factor: str) -> int:
        return dict(self.form.factors).get(factor, 1)

    @property
    def first_partial(self) -> bool:
        """Whether this task holds partial sum 0 (where terms added once, like biases, go)."""
        return self.form.coord(self.form.results[0], self.coords)[-2] == 0

    def operand_type(self, i: int) -> TensorType:
        return self.op.typed_operands()[i]


Kernel = Callable[..., Any]


def _bias(task: Task, bias: torch.Tensor | None) -> torch.Tensor | None:
    return bias if task.first_partial else None


def _pair(v: tuple[int, ...] | None, default: int) -> tuple[int, int]:
    return (default, default) if v is None else (v[0], v[1])


def _spatial(
    task: Task, x: torch.Tensor, windows: Sequence[tuple[int, int, int, int]], fill: float
) -> tuple[torch.Tensor, tuple[int, int]]:
    """This task's input extended by the halo of each spatially sharded dim, read from the
    neighbouring tasks' pieces (height first, then width on the extended rows, so corners come
    along, as -t torch exchanges them), and the padding left to the window."""
    t = task.operand_type(0)
    layout = task.form.operands[0]
    value = task.values[0]
    assert layout is not None and value is not None
    padding = [pad for _, _, pad, _ in windows]
    sharded: list[tuple[str, int, Halo]] = []
    for i, (factor, (kernel, stride, pad, dilation)) in enumerate(zip(("h", "w"), windows, strict=True)):
        if task.degree(factor) == 1:
            continue
        halo = window_halo(t.shape[2 + i], t.shard[2 + i], kernel, stride, pad, dilation)
        assert isinstance(halo, Halo), halo  # the op's verifier accepted the form
        sharded.append((factor, 2 + i, halo))
        padding[i] = 0

    def extended(coords: dict[str, int], done: int) -> torch.Tensor | None:
        """The piece of the task at `coords` extended along the first `done` sharded dims."""
        if any(not 0 <= coords.get(f, 0) < task.degree(f) for f, _, _ in sharded):
            return None
        if done == 0:
            return value[task.form.coord(layout, coords)]
        factor, dim, halo = sharded[done - 1]
        own, prev, after = (
            extended({**coords, factor: coords.get(factor, 0) + step}, done - 1) for step in (0, -1, 1)
        )
        assert own is not None
        before = None if prev is None else prev.narrow(dim, prev.shape[dim] - halo.above, halo.above)
        after = None if after is None else after.narrow(dim, 0, max(halo.below, 0))
        return with_halo(own, dim, halo.above, halo.below, before, after, fill)

    out = extended(task.coords, len(sharded)) if sharded else x
    assert out is not None
    return out, (padding[0], padding[1])


def _conv2d(task: Task, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    a = task.attrs
    groups = (a["groups"] or 1) // task.degree("g")
    stride, pad, dilation = _pair(a["stride"], 1), _pair(a["padding"], 0), _pair(a["dilation"], 1)
    windows = [(w.shape[2 + i], stride[i], pad[i], dilation[i]) for i in (0, 1)]
    x, padding = _spatial(task, x, windows, 0.0)
    return F.conv2d(x, w, _bias(task, b), stride, padding, dilation, groups)


def _pool2d(task: Task, x: torch.Tensor) -> torch.Tensor:
    a = task.attrs
    kernel = _pair(a["kernel"], 1)
    stride = _pair(a["stride"], 0)
    stride = (stride[0] or kernel[0], stride[1] or kernel[1])
    pad = _pair(a["padding"], 0)
    maximum = a["kind"] == "max"
    x, padding = _spatial(
        task, x, [(kernel[i], stride[i], pad[i], 1) for i in (0, 1)], -math.inf if maximum else 0.0
    )
    return (F.max_pool2d if maximum else F.avg_pool2d)(x, kernel, stride, padding)


def _reduce(task: Task, x: torch.Tensor) -> torch.Tensor:
    a = task.attrs
    t = task.operand_type(0)
    dims = sorted({d % t.rank for d in a["dims"]})
    keep = bool(a["keepdim"])
    match a["kind"]:
        case "max" | "min" | "argmax" | "argmin":  # torch.max/min over one dim: values, indices
            values, indices = (x.max if a["kind"].endswith("max") else x.min)(dim=dims[0], keepdim=keep)
            return indices if a["kind"].startswith("arg") else values
        case "amax":
            return x.amax(dim=dims, keepdim=keep)
        case "amin":
            return x.amin(dim=dims, keepdim=keep)
    out = x.sum(dim=dims, keepdim=keep) if dims else x.clone()
    if a["kind"] == "mean":
        out = out / math.prod(t.shape[d] for d in dims)
    return out


def _vocab_lookup(task: Task, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Rows of the local vocabulary shard; ids outside it give zeros (exact partial sums). The
    padding row, when this shard holds it, gets no gradient from the lookup."""
    return vocab_lookup(ids, w, task.index("v") * w.shape[0], task.attrs.get("padding_idx"))


def _embedding_bag(task: Task, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = _vocab_lookup(task, ids, w).sum(dim=1)
    if task.attrs["mode"] == "mean":
        out = out / task.operand_type(0).shape[1]
    return out


def _attention(
    task: Task, q, k, v, wq, wk, wv, wo, bq, bk, bv, bo, mask, cos=None, sin=None, q_norm=None, k_norm=None
) -> torch.Tensor:
    heads = task.attrs["heads"] // task.degree("h")  # this task's heads
    norms = {"q_norm": q_norm, "k_norm": k_norm, "norm_eps": task.attrs.get("norm_eps") or 0.0}
    norms |= {"scale": task.attrs.get("scale"), "softcap": task.attrs.get("softcap")}
    bo = _bias(task, bo)
    kernel = pcg.AttentionOp.kernel(task.attrs)
    if task.degree("c") == 1:
        causal = task.coords.get("s", 0) * q.shape[1] if task.attrs.get("causal") else None
        rotary = {"cos": cos, "sin": sin, "causal": causal, "kernel": kernel}
        return attention(q, k, v, wq, wk, wv, wo, bq, bk, bv, bo, mask, heads, **rotary, **norms)
    # Context parallelism: whatever exchange the op names (ring or all-to-all), a task's rows
    # are those of the attention over the whole sequence, read from its context group's pieces.
    q, k, v, mask, cos, sin = (
        _context_whole(task, o, x) for o, x in ((0, q), (1, k), (2, v), (11, mask), (12, cos), (13, sin))
    )
    causal = 0 if task.attrs.get("causal") else None  # the whole sequence: no query offset
    rotary = {"cos": cos, "sin": sin, "causal": causal, "kernel": kernel}
    out = attention(q, k, v, wq, wk, wv, wo, bq, bk, bv, bo, mask, heads, **rotary, **norms)
    rows = out.shape[1] // task.degree("c")
    return out.narrow(1, task.index("c") * rows, rows)


def _context_whole(task: Task, operand: int, piece: torch.Tensor | None) -> torch.Tensor | None:
    """An operand of a context-parallel attention with its sequence dim whole: this task's piece
    and its context group's, concatenated where the context factor shards it."""
    layout = task.form.operands[operand]
    if piece is None or layout is None:
        return piece
    dims = [d for d, axis in enumerate(layout.shard) if "c" in axis]
    return torch.cat(task.peers(operand, "c"), dim=dims[0]) if dims else piece


def _cross_entropy(task: Task, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """As `unityc.runtime.kernels.cross_entropy`, the reductions across shards done on the
    peers' pieces: the whole rows for class shards, the whole target for the kept count."""
    ignore = task.attrs.get("ignore_index")
    real = task.attrs.get("classes")
    t = task.operand_type(0)
    check_classes(target, real or t.shape[1], ignore)
    kept = None if ignore is None else target != ignore
    start = task.index("v") * logits.shape[1]
    logits = without_padding(logits, start, real)
    if task.degree("v") == 1:
        total = F.cross_entropy(
            logits, target, reduction="sum", ignore_index=-100 if ignore is None else ignore
        )
    else:
        rows = without_padding(torch.cat(task.peers(0, "v"), dim=1), 0, real)
        peak = rows.detach().max(dim=1).values
        sumexp = (rows - peak.unsqueeze(1)).exp().sum(dim=1)
        losses = class_shard_losses(logits, target, start, task.degree("v"), peak, sumexp)
        total = (losses if kept is None else torch.where(kept, losses, torch.zeros_like(losses))).sum()
    if task.attrs["reduction"] == "sum":
        return total
    if ignore is None:
        return total / t.shape[0]
    values = task.values[1]
    assert values is not None
    whole: torch.Tensor = assemble(values, "target")
    return total / whole.ne(ignore).sum().to(total.dtype)


def _rms_norm(task: Task, x: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """The definition (HF's formulas): statistics in fp32 (float64 for a float64 x)."""
    a = task.attrs
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    dims = tuple(range(x.dim() - a["dims"], x.dim()))
    n = wide * torch.rsqrt(wide.pow(2).mean(dim=dims, keepdim=True) + a["eps"])
    if w is None:
        return n.to(x.dtype)
    if a.get("weight_after_cast"):
        return ((w + (a.get("offset") or 0.0)) * n.to(x.dtype)).to(x.dtype)
    return (n * (w.to(wide.dtype) + (a.get("offset") or 0.0))).to(x.dtype)


def _gated(task: Task, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    act = task.attrs["act"]
    if act == "silu":
        return gate * torch.sigmoid(gate) * up
    return F.gelu(gate, approximate="tanh" if act == "gelu_tanh" else "none") * up


def _mse(task: Task, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    total = ((x - target) ** 2).sum()
    return total / math.prod(task.operand_type(0).shape) if task.attrs["reduction"] == "mean" else total


def _split(task: Task, x: torch.Tensor) -> list[torch.Tensor]:
    dim = task.attrs["dim"] % x.dim()
    return [p.clone() for p in torch.split(x, list(task.attrs["sizes"]), dim=dim)]


def _topk(task: Task, x: torch.Tensor) -> torch.Tensor:
    a = task.attrs
    return topk_indices(x, a["k"], a.get("groups") or 1, a.get("group_k"), a.get("group_top") or 1)


def _experts(
    task: Task, x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor
) -> torch.Tensor:
    """The dense definition: every expert on every token, summed under gates that are the
    token's weight for the experts it chose and zero for the others (E/k times the FLOPs of the
    program's sort-based kernel, which it checks). Expert-parallel (factor "e"): the task's
    tokens meet every expert of its group, each peer's slice of gate_up and down read as the
    all-to-all brings its tokens to them."""
    if task.degree(pcg.EXPERT_FACTOR) > 1:
        gate_up = torch.cat(task.peers(3, pcg.EXPERT_FACTOR), dim=0)
        down = torch.cat(task.peers(4, pcg.EXPERT_FACTOR), dim=0)
    gates = torch.zeros(x.shape[0], gate_up.shape[0], dtype=w.dtype).scatter_add(1, ids, w)
    gate, up = torch.einsum("th,efh->tef", x, gate_up).chunk(2, dim=-1)
    each = torch.einsum("tef,ehf->teh", F.silu(gate) * up, down)
    return torch.einsum("te,teh->th", gates.to(each.dtype), each)


def _result_piece_shape(task: Task) -> tuple[int, ...]:
    return task.op.results[0].type.piece_shape


KERNELS: dict[type[PcgOp], Kernel] = {
    pcg.ReluOp: lambda t, x: F.relu(x),
    pcg.GeluOp: lambda t, x: F.gelu(x, approximate="tanh" if t.attrs["tanh"] else "none"),
    pcg.SigmoidOp: lambda t, x: torch.sigmoid(x),
    pcg.TanhOp: lambda t, x: torch.tanh(x),
    pcg.ExpOp: lambda t, x: torch.exp(x),
    pcg.SqrtOp: lambda t, x: torch.sqrt(x),
    pcg.Log1pOp: lambda t, x: torch.log1p(x),
    pcg.LogOp: lambda t, x: torch.log(x),
    pcg.AbsOp: lambda t, x: torch.abs(x),
    pcg.IdentityOp: lambda t, x: x.clone(),
    pcg.StopGradientOp: lambda t, x: x.detach().clone(),
    pcg.NegOp: lambda t, x: -x,
    pcg.ScalarMulOp: lambda t, x: x * t.attrs["scale"],
    pcg.ScalarAddOp: lambda t, x: x + t.attrs["value"],
    pcg.PowOp: lambda t, x: x ** t.attrs["exponent"],
    pcg.ClampOp: lambda t, x: clamp(x, t.attrs.get("low"), t.attrs.get("high")),
    pcg.CompareOp: lambda t, x: getattr(torch, t.attrs["kind"])(x, t.attrs["value"]),
    pcg.CumsumOp: lambda t, x: torch.cumsum(x, t.attrs["dim"], dtype=x.dtype),
    pcg.DropoutOp: lambda t, x: x.clone(),  # identity: see the op's documentation
    pcg.CastOp: lambda t, x: x.to(torch_dtype(t.attrs["dtype"], t.float_dtype)),
    pcg.AddOp: lambda t, a, b: a + b,
    pcg.SubOp: lambda t, a, b: a - b,
    pcg.MulOp: lambda t, a, b: a * b,
    pcg.GatedActivationOp: _gated,
    pcg.DivOp: lambda t, a, b: a / b,
    pcg.CompareTensorsOp: lambda t, a, b: getattr(torch, t.attrs["kind"])(a, b),  # torch.le, torch.eq, ...
    pcg.LinearOp: lambda t, x, w, b: F.linear(x, w, _bias(t, b)),
    pcg.MatmulOp: lambda t, a, b: a @ b,
    pcg.BatchMatmulOp: lambda t, a, b: a @ b,
    pcg.Conv2dOp: _conv2d,
    pcg.Pool2dOp: _pool2d,
    pcg.BatchNormOp: lambda t, x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=t.attrs["eps"]),
    pcg.LayerNormOp: lambda t, x, w, b: F.layer_norm(x, x.shape[-t.attrs["dims"] :], w, b, t.attrs["eps"]),
    pcg.RmsNormOp: _rms_norm,
    pcg.SoftmaxOp: lambda t, x: torch.softmax(x, dim=t.attrs["dim"]),
    pcg.ConcatOp: lambda t, *xs: torch.cat(xs, dim=t.attrs["dim"]),
    pcg.SplitOp: _split,
    pcg.ReshapeOp: lambda t, x: x.reshape(_result_piece_shape(t)).clone(),
    pcg.TransposeOp: lambda t, x: x.permute(*t.attrs["perm"]).contiguous(),
    pcg.ReduceOp: _reduce,
    pcg.GatherOp: lambda t, x: torch.index_select(
        x, t.attrs["dim"] % x.dim(), torch.tensor(t.attrs["indices"])
    ),
    pcg.EmbeddingOp: _vocab_lookup,
    pcg.EmbeddingBagOp: _embedding_bag,
    pcg.AttentionOp: _attention,
    pcg.CrossEntropyOp: _cross_entropy,
    pcg.MseLossOp: _mse,
    pcg.TopkOp: _topk,
    pcg.TakeOp: lambda t, x, index: torch.gather(x, t.attrs["dim"] % x.dim(), index),
    pcg.ExpertsOp: _experts,
}


def literal_tensor(literal: Any, dtype: torch.dtype) -> torch.Tensor:
    """A `pcg.constant`'s dense literal as a tensor of `dtype` (a splat stored once, filled)."""
    shape = tuple(literal.get_type().get_shape())
    if stored_once(literal):
        return torch.full(shape, literal.get_values()[0], dtype=dtype)
    return torch.tensor(list(literal.get_values()), dtype=dtype).reshape(shape)


def torch_dtype(element_type: Any, float_override: torch.dtype | None = None) -> torch.dtype:
    """The torch dtype of an element type; `float_override` replaces every float type."""
    if float_override is not None and element_type in FLOAT_TYPES:
        return float_override
    return getattr(torch, TORCH_NAMES[element_type])
