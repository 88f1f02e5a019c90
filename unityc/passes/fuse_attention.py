"""fuse-attention: recognize multi-head attention written as separate ops and make it one
`pcg.attention`, so that head parallelism is available as a rewrite of a single op.

The recognized core (HF BERT's, GPT-2's and Llama's eager attention, SDPA, the zoo's BERT):

    p = softmax(scalar_mul(batch_matmul(Q, K^T), 1/sqrt(D)) [+ mask]*, -1) [-> dropout]
    out = proj(flatten(transpose(batch_matmul(p, V), [0, 2, 1, 3])), wo, bo)

where Q, K, V are heads [B, H, S, D] of projections of the inputs:
- a projection is `linear(x, w, b)`, or one part of a fused QKV projection in GPT-2's Conv1D
  form `split(reshape(add(matmul(reshape(x, [B·S, E]), W), b)), 2)` (W [E, 3E]): the fused op
  then reads the parts of W^T and b (`pcg.transpose`, `pcg.split` of the weights);
- heads are `transpose(reshape(P, [B, S, H, D]), [0, 2, 1, 3])`, and K^T either
  `transpose(reshape(P, [B, S, H, D]), [0, 2, 3, 1])` or a heads value transposed last-two;
- Q and K may be rotated (Llama's rotary embeddings): `x·cos + cat(-x2, x1)·sin`, with the same
  cos/sin for both (they become the op's `cos`, `sin` operands);
- K and V may be fewer KV heads repeated (Llama's repeat_kv: a [B, G, 1, S, D] view plus zeros
  [1, 1, n, 1, 1]), which is the op's `kv_heads` G;
- a batch_matmul may run on [B·H, S, ·] views of the 4-D values (eager Llama);
- the output projection is a `linear`, or a Conv1D `add(matmul(x2d, W), b)`, on [B, Sq, E] or on
  the [B·Sq, E] flattening (then reshaped back to [B, Sq, E]).

Every op the fused op replaces may only be used by other replaced ops (checked once the whole
pattern matched), so nothing else observes what disappears.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.dialects.builtin import TensorType as BuiltinTensorType
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.transforms.dead_code_elimination import region_dce

from unityc.dialects import pcg
from unityc.dialects.forms import FormError
from unityc.dialects.literals import literal_values
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import carry_plan
from unityc.passes.attention_masks import causal_masks
from unityc.passes.attention_weights import (
    _is_zero,
    _owner,
    _pairs,
    _perm,
    _shape,
    share_constants,
    split_weights,
    unpack_linears,
)


@dataclass
class _Proj:
    """A projection x·W^T + b, or part `index` of a fused (Conv1D, W^T) projection `packed`."""

    x: SSAValue
    weight: SSAValue
    bias: SSAValue | None
    packed: Any = None  # the activation split of GPT-2's fused QKV projection
    index: int = 0
    rows: int = 0  # nn.MultiheadAttention's in_proj: W [rows·E, E] stacks the parts' rows
    interleaved: int = 0  # GPT-NeoX's query_key_value: W [H·3·D, E], each head's q, k, v rows in turn


@dataclass
class _Heads:
    proj: _Proj
    heads: int  # the projection's heads
    width: int
    repeat: int = 1  # each head read by `repeat` query heads (repeat_kv)
    scale: float = 1.0  # the projection scaled before its heads are split (OPT's q · d^-1/2)
    norm: tuple[SSAValue, float] | None = None  # RMS norm of each head: weight [D], eps (Qwen3)
    rotary: tuple[SSAValue, SSAValue] | None = None
    rotary_dims: int = 0  # the head dims the rotary rotates (its first ones: GPT-NeoX's rotary_pct)
    ops: list[Operation] = field(default_factory=list)


def _conv1d(value: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue | None, list[Operation]] | None:
    """Matches reshape(add(matmul(reshape(x, [B·S, E]), W), b), [B, S, N]) (b optional)."""
    r = _owner(value, pcg.ReshapeOp)
    if r is None or len(_shape(r.output)) != 3:
        return None
    found = _matmul_bias(r.input)
    if found is None:
        return None
    mm, bias, ops = found
    flat = _owner(mm.lhs, pcg.ReshapeOp)
    if flat is None or _shape(flat.input)[:2] != _shape(r.output)[:2] or len(_shape(flat.input)) != 3:
        return None
    return flat.input, mm.rhs, bias, [r, *ops, flat]


def _matmul_bias(value: SSAValue) -> tuple[Any, SSAValue | None, list[Operation]] | None:
    """Matches matmul(x, W) [+ b] with a 1-D bias b (Conv1D's addmm): (matmul, b, ops)."""
    ops: list[Operation] = []
    bias = None
    add = _owner(value, pcg.AddOp)
    if add is not None:
        for a, b in _pairs(add):
            if _owner(a, pcg.MatmulOp) is not None and len(_shape(b)) == 1:
                value, bias = a, b
                ops.append(add)
                break
        else:
            return None
    mm = _owner(value, pcg.MatmulOp)
    return (mm, bias, [*ops, mm]) if mm is not None else None


def _projection(value: SSAValue) -> tuple[_Proj, list[Operation]] | None:
    """Matches a projection [B, S, N] of an input [B, S, E]."""
    lin = _owner(value, pcg.LinearOp)
    if lin is not None:
        if len(_shape(lin.input)) != 3:
            return None
        return _Proj(lin.input, lin.weight, lin.bias), [lin]
    split = _owner(value, pcg.SplitOp)
    if split is None or split.attrs()["dim"] % 3 != 2 or len(_shape(split.input)) != 3:
        return None
    fused = _conv1d(split.input)
    if fused is None:
        return None
    x, w, b, ops = fused
    assert isinstance(value, OpResult)
    return _Proj(x, w, b, split, value.index), [split, *ops]


def _pow(value: SSAValue, exponent: float) -> Any:
    p = _owner(value, pcg.PowOp)
    return p if p is not None and p.attrs()["exponent"] == exponent else None


def _head_norm(value: SSAValue) -> tuple[SSAValue, SSAValue, float, list[Operation]] | None:
    """Matches w · (h · rsqrt(mean(h², -1) + eps)) with w [D] on heads h [B, S, H, D] (Qwen3's
    q_norm and k_norm, RMSNorm): (h, w, eps, ops); h itself where it is a cast to f32 of f32
    heads (the norm's upcast, kept by the importer: `frontend/widening.py`), its input."""
    outer = _owner(value, pcg.MulOp)
    if outer is None or len(_shape(value)) != 4:
        return None
    for w, normed in _pairs(outer):
        inner = _owner(normed, pcg.MulOp)
        if inner is None or _shape(w) != _shape(value)[-1:]:
            continue
        for h, scale in _pairs(inner):
            rsqrt = _pow(scale, -0.5)
            eps = _owner(rsqrt.input, pcg.ScalarAddOp) if rsqrt is not None else None
            mean = _owner(eps.input, pcg.ReduceOp) if eps is not None else None
            if rsqrt is None or eps is None or mean is None or _shape(h) != _shape(value):
                continue
            a = mean.attrs()
            square = _pow(mean.input, 2.0)
            if square is None or square.input != h:
                continue
            if a["kind"] == "mean" and list(a["dims"]) == [3] and a["keepdim"]:
                ops: list[Operation] = [outer, inner, rsqrt, eps, mean, square]
                upcast = _owner(h, pcg.CastOp)  # the norm's own `h.to(float32)` of f32 heads
                if upcast is not None and upcast.input.type == h.type:
                    return upcast.input, w, eps.attrs()["value"], [*ops, upcast]
                return h, w, eps.attrs()["value"], ops
    return None


def _split_heads(value: SSAValue, perm: list[int]) -> _Heads | None:
    """Matches transpose(reshape(P, [B, S, H, D]), perm) of a projection P, or of P scaled by
    a number (OPT scales the query projection instead of the scores), the heads maybe
    RMS-normalized before the transpose (Qwen3)."""
    t = _owner(value, pcg.TransposeOp)
    if t is None or _perm(t) != perm:
        return None
    norm = _head_norm(t.input)
    r = _owner(norm[0] if norm is not None else t.input, pcg.ReshapeOp)
    if r is None:
        return None
    shape = _shape(r.output)
    if len(shape) != 4 or _shape(r.input) != (*shape[:2], shape[2] * shape[3]):
        return None
    scaled = _owner(r.input, pcg.ScalarMulOp)
    proj = _projection(scaled.input if scaled is not None else r.input)
    if proj is None:
        return None
    found = _Heads(proj[0], shape[2], shape[3], ops=[t, r, *proj[1]])
    if scaled is not None:
        found.scale = scaled.attrs()["scale"]
        found.ops.append(scaled)
    if norm is not None:
        found.norm = (norm[1], norm[2])
        found.ops += norm[3]
    return found


def _select(value: SSAValue) -> tuple[SSAValue, int, Operation] | None:
    """value = stacked[i:i+1] along dim 0 (a split's result of size 1): (stacked, i, split)."""
    split = _owner(value, pcg.SplitOp)
    if split is None or split.attrs()["dim"] != 0 or not isinstance(value, OpResult):
        return None
    sizes = list(split.attrs()["sizes"])
    if sizes[value.index] != 1:
        return None
    return split.input, sum(sizes[: value.index]), split


def _mha_heads(value: SSAValue) -> _Heads | None:
    """nn.MultiheadAttention's heads [B, H, S, D] of part i of its packed in_proj:
    reshape(transpose(reshape(P_i, [S, B·H, D]), [1, 0, 2]), [B, H, S, D]) where P_i is the
    i-th [1, S, B, E] of reshape(transpose(reshape(linear(x, W, b), [1, S, B, 3, E]),
    [3, 1, 2, 0, 4]), [3, S, B, E]) and x is [S, B, E] (seq-first)."""
    r1 = _owner(value, pcg.ReshapeOp)
    t = _owner(r1.input, pcg.TransposeOp) if r1 is not None else None
    r2 = _owner(t.input, pcg.ReshapeOp) if t is not None and _perm(t) == [1, 0, 2] else None
    if r1 is None or t is None or r2 is None or len(_shape(r1.output)) != 4:
        return None
    b, h, s, d = _shape(r1.output)
    picked = _select(r2.input)
    if picked is None or _shape(r2.input) != (1, s, b, h * d) or _shape(r2.output) != (s, b * h, d):
        return None
    stacked, index, split = picked
    r3 = _owner(stacked, pcg.ReshapeOp)
    t2 = _owner(r3.input, pcg.TransposeOp) if r3 is not None else None
    r4 = _owner(t2.input, pcg.ReshapeOp) if t2 is not None and _perm(t2) == [3, 1, 2, 0, 4] else None
    lin = _owner(r4.input, pcg.LinearOp) if r4 is not None else None
    if lin is None or r3 is None or t2 is None or r4 is None or len(_shape(lin.output)) != 3:
        return None
    parts = _shape(r3.output)[0]
    if _shape(r4.output) != (1, s, b, parts, h * d) or _shape(lin.output) != (s, b, parts * h * d):
        return None
    proj = _Proj(lin.input, lin.weight, lin.bias, index=index, rows=parts)
    return _Heads(proj, h, d, ops=[r1, t, r2, split, r3, t2, r4, lin])


def _interleaved_heads(value: SSAValue) -> _Heads | None:
    """GPT-NeoX's heads [B, H, S, D] of its packed query_key_value projection: part i of
    split(transpose(reshape(linear(x, W, b), [B, S, H, 3·D]), [0, 2, 1, 3]), 3, [D, D, D]),
    W [H·3·D, E] holding each head's query, key and value rows in turn (not [3, H, D] as Phi-3's
    qkv_proj: `_Weights.part` takes every head's rows of part i)."""
    split = _owner(value, pcg.SplitOp)
    if split is None or split.attrs()["dim"] % 4 != 3 or not isinstance(value, OpResult):
        return None
    t = _owner(split.input, pcg.TransposeOp)
    r = _owner(t.input, pcg.ReshapeOp) if t is not None and _perm(t) == [0, 2, 1, 3] else None
    lin = _owner(r.input, pcg.LinearOp) if r is not None else None
    if t is None or r is None or lin is None or len(_shape(lin.input)) != 3:
        return None
    b, s, h, packed = _shape(r.output)
    sizes = list(split.attrs()["sizes"])
    d = packed // 3
    if sizes != [d, d, d] or _shape(lin.output) != (b, s, h * packed):
        return None
    proj = _Proj(lin.input, lin.weight, lin.bias, index=value.index, interleaved=h)
    return _Heads(proj, h, d, ops=[split, t, r, lin])


def _half(value: SSAValue, x: SSAValue, index: int) -> Operation | None:
    """The split of x into two halves of its last dim, if `value` is half `index` of it."""
    split = _owner(value, pcg.SplitOp)
    if split is None or split.input != x or split.attrs()["dim"] % 4 != 3:
        return None
    half = _shape(x)[3] // 2
    if list(split.attrs()["sizes"]) != [half, half] or not isinstance(value, OpResult):
        return None
    return split if value.index == index else None


def _rotary(value: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue, list[Operation]] | None:
    """Matches x·cos + cat(-x2, x1)·sin (Llama's apply_rotary_pos_emb): (x, cos, sin, ops)."""
    add = _owner(value, pcg.AddOp)
    if add is None:
        return None
    for plain, rotated in _pairs(add):
        m1, m2 = _owner(plain, pcg.MulOp), _owner(rotated, pcg.MulOp)
        if m1 is None or m2 is None:
            continue
        for cat_value, sin in _pairs(m2):
            cat = _owner(cat_value, pcg.ConcatOp)
            if cat is None or len(cat.inputs) != 2 or cat.attrs()["dim"] % 4 != 3:
                continue
            neg = _owner(cat.inputs[0], pcg.NegOp)
            for x, cos in _pairs(m1):
                if len(_shape(x)) != 4 or neg is None:
                    continue
                hi, lo = _half(neg.input, x, 1), _half(cat.inputs[1], x, 0)
                if hi is not None and lo is not None:
                    return x, cos, sin, [add, m1, m2, cat, neg, hi, lo]
    return None


def _partial_rotary(value: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue, int, list[Operation]] | None:
    """Matches cat(rotary(x[..., :r]), x[..., r:]) (GPT-NeoX's partial rotary: the first r dims
    of each head rotated, the others passed through): (x, cos, sin, r, ops)."""
    cat = _owner(value, pcg.ConcatOp)
    if cat is None or len(cat.inputs) != 2 or cat.attrs()["dim"] % 4 != 3:
        return None
    rotated = _rotary(cat.inputs[0])
    if rotated is None:
        return None
    part, cos, sin, ops = rotated
    first, rest = _owner(part, pcg.SplitOp), _owner(cat.inputs[1], pcg.SplitOp)
    if first is None or rest is None or first.input != rest.input or len(_shape(first.input)) != 4:
        return None
    r = _shape(part)[3]
    cut = [r, _shape(first.input)[3] - r]
    for split, piece, index in ((first, part, 0), (rest, cat.inputs[1], 1)):
        a = split.attrs()
        if a["dim"] % 4 != 3 or list(a["sizes"]) != cut:
            return None
        if not isinstance(piece, OpResult) or piece.index != index:
            return None
    return first.input, cos, sin, r, [cat, *ops, first, rest]


def _repeat5(value: SSAValue) -> tuple[SSAValue, int, list[Operation]] | None:
    """Matches add(reshape(x, [B, G, 1, S, D]), zeros [1, 1, n, 1, 1]) (repeat_kv's expand)."""
    add = _owner(value, pcg.AddOp)
    if add is None or len(_shape(value)) != 5:
        return None
    for a, z in _pairs(add):
        u = _owner(a, pcg.ReshapeOp)
        if u is None or not _is_zero(z) or len(_shape(u.input)) != 4:
            continue
        b, g, s, d = _shape(u.input)
        n = _shape(z)[2] if len(_shape(z)) == 5 else 0
        if _shape(u.output) == (b, g, 1, s, d) and _shape(z) == (1, 1, n, 1, 1):
            return u.input, n, [add, u]
    return None


def _heads(value: SSAValue) -> _Heads | None:
    """Matches heads [B, H, S, D] (or repeat_kv's [B, G, n, S, D]): [repeat] [rotary] split."""
    ops: list[Operation] = []
    repeat = 1
    r = _owner(value, pcg.ReshapeOp)
    if r is not None and len(_shape(r.input)) == 5:
        ops, value = [r], r.input
    expanded = _repeat5(value)
    if expanded is not None:
        value, repeat, more = expanded
        ops += more
    elif ops:
        return None
    rotary, dims = None, 0
    rotated = _rotary(value)
    partial = _partial_rotary(value) if rotated is None else None
    if rotated is not None:
        value, cos, sin, more = rotated
        rotary, dims = (cos, sin), _shape(value)[3]
        ops += more
    elif partial is not None:
        value, cos, sin, dims, more = partial
        rotary = (cos, sin)
        ops += more
    found = _split_heads(value, [0, 2, 1, 3]) or _interleaved_heads(value)
    if found is None and not ops and rotary is None:
        return _mha_heads(value)
    if found is None:
        return None
    found.repeat, found.rotary, found.rotary_dims = repeat, rotary, dims
    found.ops = [*ops, *found.ops]
    return found


def _keys_transposed(value: SSAValue) -> _Heads | None:
    """K^T [B, H, D, S]: heads transposed last-two, or split straight into [0, 2, 3, 1]."""
    t = _owner(value, pcg.TransposeOp)
    if t is not None and _perm(t) == [0, 1, 3, 2]:
        found = _heads(t.input)
        if found is not None:
            found.ops.append(t)
            return found
    return _split_heads(value, [0, 2, 3, 1])


def _unflattened(value: SSAValue, rank: int) -> tuple[SSAValue, list[Operation]]:
    """The value of rank `rank` a reshape merged the leading dims of (B·H), or value itself."""
    r = _owner(value, pcg.ReshapeOp)
    if r is not None and len(_shape(r.input)) == rank and _shape(r.input)[-2:] == _shape(value)[-2:]:
        return r.input, [r]
    return value, []


def _batched(value: SSAValue) -> tuple[Any, SSAValue, SSAValue, list[Operation]] | None:
    """A batch_matmul on 4-D heads, or on their [B·H, ...] views reshaped back to 4-D."""
    ops: list[Operation] = []
    r = _owner(value, pcg.ReshapeOp)
    if r is not None and len(_shape(r.input)) == 3 and len(_shape(value)) == 4:
        ops, value = [r], r.input
    bmm = _owner(value, pcg.BatchMatmulOp)
    if bmm is None:
        return None
    if not ops:
        return bmm, bmm.lhs, bmm.rhs, [bmm]
    lhs, l_ops = _unflattened(bmm.lhs, 4)
    rhs, r_ops = _unflattened(bmm.rhs, 5)
    if not r_ops:
        rhs, r_ops = _unflattened(bmm.rhs, 4)
    if not l_ops or not r_ops:
        return None
    return bmm, lhs, rhs, [*ops, bmm, *l_ops, *r_ops]


def _probabilities(value: SSAValue) -> tuple[SSAValue, float | None, list[Operation]] | None:
    """Matches [dropout](softmax(s, -1)), s maybe through the model's cast to f32 of f32 scores
    (kept by the importer: `frontend/widening.py`); returns s and the dropout probability."""
    ops: list[Operation] = []
    dropout = None
    d = _owner(value, pcg.DropoutOp)
    if d is not None:
        dropout, value = d.attrs()["p"], d.input
        ops.append(d)
    s = _owner(value, pcg.SoftmaxOp)
    if s is None or s.attrs()["dim"] % 4 != 3:
        return None
    upcast = _owner(s.input, pcg.CastOp)  # `softmax(s, dtype=float32)` of f32 scores (widening.py)
    if upcast is not None and upcast.input.type == s.input.type:
        return upcast.input, dropout, [*ops, s, upcast]
    return s.input, dropout, [*ops, s]


def _softcap(value: SSAValue) -> tuple[SSAValue, float, list[Operation]] | None:
    """Matches scalar_mul(tanh(scalar_mul(s, 1/c)), c) (Gemma-2's soft-capping): (s, c, ops)."""
    outer = _owner(value, pcg.ScalarMulOp)
    tanh = _owner(outer.input, pcg.TanhOp) if outer is not None else None
    inner = _owner(tanh.input, pcg.ScalarMulOp) if tanh is not None else None
    if inner is None:
        return None
    cap = outer.attrs()["scale"]
    if cap <= 0 or not math.isclose(cap * inner.attrs()["scale"], 1.0, rel_tol=1e-6):
        return None
    return inner.input, cap, [outer, tanh, inner]


def _scores(value: SSAValue) -> tuple[Any, float, float | None, list[SSAValue], list[Operation]] | None:
    """Matches [softcap](scalar_mul*(batch_matmul(q, k))) [+ term]*: (product, the product of
    the scales, the softcap, the additive terms (masks, T5's relative position bias), ops); the
    scale is 1 without a scalar_mul (the query was scaled instead)."""
    ops: list[Operation] = []
    terms: list[SSAValue] = []
    while (add := _owner(value, pcg.AddOp)) is not None:
        found = _score_side(add)
        if found is None:
            return None
        value, term = found
        terms.append(term)
        ops.append(add)
    cap = None
    capped = _softcap(value)
    if capped is not None:
        value, cap, more = capped
        ops += more
    scale = 1.0
    while (mul := _owner(value, pcg.ScalarMulOp)) is not None:
        scale *= mul.attrs()["scale"]
        ops.append(mul)
        value = mul.input
    product = _owner(value, pcg.BatchMatmulOp)
    if product is None or len(_shape(product.output)) != 4:
        return None
    return product, scale, cap, terms[::-1], [*ops, product]


def _score_side(add: Any) -> tuple[SSAValue, SSAValue] | None:
    """(scores, term) of `scores + term`: the scores are the side a scale, product or an inner
    addition computes, a scaled or product side first (T5's decoder: (s + bias) + causal mask)."""
    for scores, term in _pairs(add):
        if _owner(scores, (pcg.ScalarMulOp, pcg.BatchMatmulOp)) is not None:
            return scores, term
    for scores, term in _pairs(add):
        if _owner(scores, pcg.AddOp) is not None and _owner(term, pcg.AddOp) is None:
            return scores, term
    return None


@dataclass
class _Output:
    context: SSAValue  # [B, Sq, E] or [B·Sq, E]
    weight: SSAValue
    bias: SSAValue | None
    conv1d: bool
    ops: list[Operation]
    seq_first: bool = False  # [Sq, B, E] (nn.MultiheadAttention's layout without batch_first)


def _output(root: Operation) -> _Output | None:
    """The output projection ending at `root`, whose result is [B, Sq, E]."""
    if isinstance(root, pcg.LinearOp) and len(_shape(root.input)) == 3:
        return _Output(root.input, root.weight, root.bias, False, [root])
    if not isinstance(root, pcg.ReshapeOp) or len(_shape(root.output)) != 3:
        return None
    lin = _owner(root.input, pcg.LinearOp)
    if lin is not None and len(_shape(lin.input)) == 2:
        return _Output(lin.input, lin.weight, lin.bias, False, [root, lin])
    found = _matmul_bias(root.input)
    if found is None:
        return None
    mm, bias, ops = found
    return _Output(mm.lhs, mm.rhs, bias, True, [root, *ops])


def _context(value: SSAValue) -> tuple[Any, SSAValue, SSAValue, list[Operation], bool] | None:
    """Matches reshape(transpose(P·V, [0, 2, 1, 3])) flattening heads (and maybe batch·seq), or
    nn.MultiheadAttention's seq-first reshape(transpose(P·V, [2, 0, 1, 3]), [Sq·B, E]); the last
    value says which."""
    flat = _owner(value, pcg.ReshapeOp)
    merged = _owner(flat.input, pcg.TransposeOp) if flat is not None else None
    if merged is None or _perm(merged) not in ([0, 2, 1, 3], [2, 0, 1, 3]):
        return None
    seq_first = _perm(merged) == [2, 0, 1, 3]
    b, s, h, d = _shape(merged.output)
    if _shape(flat.output) not in ((b, s, h * d), (b * s, h * d)) or (
        seq_first and len(_shape(flat.output)) != 2
    ):
        return None
    found = _batched(merged.input)
    if found is None:
        return None
    bmm, probs, values, ops = found
    return probs, values, bmm, [flat, merged, *ops], seq_first


def _closed(ops: list[Operation], root: Operation) -> bool:
    """Whether every result of the replaced ops is used only by replaced ops (root excepted)."""
    inside = set(ops)
    for op in inside:
        if op is root:
            continue
        for result in op.results:
            if any(use.operation not in inside for use in result.uses):
                return False
    return True


class FuseAttention(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, pcg.LinearOp | pcg.ReshapeOp):
            return
        fused = _fuse(op)
        if fused is not None:
            fused[-1].results[0].name_hint = "attention"
            carry_plan(op, *fused)  # a staged or recomputed layer stays so
            rewriter.replace(op, fused)


@dataclass
class _Weights:
    """The ops that present fused (Conv1D) weights in torch Linear layout, built once each."""

    ops: list[Operation] = field(default_factory=list)
    parts: dict[tuple[SSAValue, str], list[SSAValue]] = field(default_factory=dict)

    def transposed(self, w: SSAValue, name: str) -> SSAValue:
        return self._parts(w, "t", lambda: pcg.TransposeOp.build_inferred([w], perm=[1, 0]), [name])[0]

    def batch_first(self, x: SSAValue) -> SSAValue:
        """[B, S, E] of a seq-first [S, B, E]: the value it transposed, else a transpose of it."""
        t = _owner(x, pcg.TransposeOp)
        if t is not None and _perm(t) == [1, 0, 2]:
            return t.input
        return self._parts(x, "bf", lambda: pcg.TransposeOp.build_inferred([x], perm=[1, 0, 2]), ["x"])[0]

    def part(self, proj: _Proj, bias: bool) -> SSAValue | None:
        """The projection's weight (Linear layout) or bias."""
        value = proj.bias if bias else proj.weight
        if value is not None and proj.interleaved:
            return self._interleaved(value, proj, "b" if bias else "w")
        if value is not None and proj.rows:  # stacked rows: split dim 0 into the parts
            rows = _shape(value)[0] // proj.rows
            kind = "b" if bias else "w"
            names = [f"{kind}{part}" for part in "qkv"] if proj.rows == 3 else [kind] * proj.rows
            split = lambda: pcg.SplitOp.build_inferred([value], dim=0, sizes=[rows] * proj.rows)  # noqa: E731
            return self._parts(value, kind, split, names)[proj.index]
        if value is None or proj.packed is None:
            return value
        sizes = list(proj.packed.attrs()["sizes"])
        whole = value if bias else self.transposed(value, "wqkv")
        kind = "b" if bias else "w"
        names = [f"{kind}{part}" for part in "qkv"] if len(sizes) == 3 else [kind] * len(sizes)
        split = lambda: pcg.SplitOp.build_inferred([whole], dim=0, sizes=sizes)  # noqa: E731
        return self._parts(whole, kind, split, names)[proj.index]

    def _interleaved(self, value: SSAValue, proj: _Proj, kind: str) -> SSAValue:
        """Part i of GPT-NeoX's packed W [H·3·D, E] (or bias [H·3·D]): reshape to [H, 3·D, ...],
        split dim 1 into the three parts, reshape each back to [H·D, ...]. Every view keeps the
        heads on dim 0, so a head split of the part is a split of the stored tensor's rows
        (`search.strategies`: the Megatron layout shards the packed weight on dim 0)."""
        heads, shape = proj.interleaved, list(_shape(value))
        width = shape[0] // heads // 3
        names = [f"{kind}{part}" for part in "qkv"]

        def split() -> Operation:
            grouped = pcg.ReshapeOp.build_inferred([value], shape=[heads, 3 * width, *shape[1:]])
            grouped.output.name_hint = f"{kind}qkv"
            self.ops.append(grouped)
            return pcg.SplitOp.build_inferred([grouped.output], dim=1, sizes=[width] * 3)

        grouped = self._parts(value, f"{kind}3", split, [f"{n}_heads" for n in names])[proj.index]
        build = lambda: pcg.ReshapeOp.build_inferred([grouped], shape=[heads * width, *shape[1:]])  # noqa: E731
        return self._parts(grouped, kind, build, [names[proj.index]])[0]

    def table(self, table: SSAValue, dims: int) -> SSAValue | None:
        """A rotary table [B|1, 1, S, dims]: the table itself, or a folded table compact along
        its last dim (one frequency: GPT-NeoX's 2 rotary dims) repeated to `dims` columns (the
        op reads one column per rotated dim); None if neither."""
        shape = _shape(table)
        if shape[-1] == dims:
            return table
        constant = _owner(table, pcg.ConstantOp)
        if constant is None or shape[-1] != 1:
            return None
        return self._parts(table, "wide", lambda: _widened(constant, dims), [table.name_hint or "cos"])[0]

    def _parts(self, value: SSAValue, kind: str, build: Any, names: list[str]) -> list[SSAValue]:
        key = (value, kind)
        if key not in self.parts:
            op = build()
            for result, name in zip(op.results, names, strict=True):
                result.name_hint = name
            self.ops.append(op)
            self.parts[key] = list(op.results)
        return self.parts[key]


def _fuse(root: Operation) -> list[Operation] | None:
    """The ops replacing `root` (weight views, a mask reshape, and the attention), or None."""
    out = _output(root)
    context = _context(out.context) if out is not None else None
    if out is None or context is None or (context[4] and out.conv1d):
        return None
    probs_value, values, _, ops, seq_first = context
    probs = _probabilities(probs_value)
    scores = _scores(probs[0]) if probs is not None else None
    if probs is None or scores is None:
        return None
    product, scale, softcap, terms, score_ops = scores
    query, key, value = _heads(product.lhs), _keys_transposed(product.rhs), _heads(values)
    if query is None or key is None or value is None:
        return None
    ops = [*out.ops, *ops, *probs[2], *score_ops, *query.ops, *key.ops, *value.ops]
    heads, width = query.heads, query.width
    if query.repeat != 1 or query.heads * width != _shape(root.results[0])[2]:
        return None
    for kv in (key, value):
        if kv.width != width or kv.heads * kv.repeat != heads or (kv.rotary is not None and kv is value):
            return None
    if key.heads != value.heads or (query.rotary, query.rotary_dims) != (key.rotary, key.rotary_dims):
        return None
    norms = (query.norm, key.norm)
    if value.norm is not None or (None in norms and norms != (None, None)):
        return None
    if query.norm is not None and key.norm is not None and query.norm[1] != key.norm[1]:
        return None
    scale *= query.scale * key.scale
    if value.scale != 1.0:
        return None
    if not _closed(ops, root):
        return None
    weights = _Weights()
    new_ops: list[Operation] = []
    mask = _mask(terms, new_ops)
    if terms and mask is None:
        return None
    wo = weights.transposed(out.weight, "wo") if out.conv1d else out.weight
    projections = (query.proj, key.proj, value.proj)
    inputs = [p.x for p in projections]
    if seq_first != any(p.rows for p in projections) or (seq_first and len(_shape(root.results[0])) != 3):
        return None
    if seq_first:  # the op reads [B, S, E]: the batch-first value, else a transpose of x
        inputs = [weights.batch_first(x) for x in inputs]
    operands = inputs + [weights.part(p, False) for p in projections] + [wo]
    operands += [weights.part(p, True) for p in projections] + [out.bias, mask]
    found = [weights.table(t, query.rotary_dims) for t in query.rotary or ()]
    tables = [t for t in found if t is not None]
    if len(tables) != len(found):
        return None
    operands += tables or [None, None]
    operands += [n[0] if n is not None else None for n in norms]
    for table, name in zip(tables, ("cos", "sin"), strict=False):
        if isinstance(table.owner, pcg.ConstantOp):
            table.name_hint = name  # the folded rotary tables, shared by every layer
    attrs: dict[str, Any] = {"heads": heads, "dropout": probs[1] or None}
    if key.heads != heads:
        attrs["kv_heads"] = key.heads
    if query.norm is not None:
        attrs["norm_eps"] = query.norm[1]
    if not math.isclose(scale, 1.0 / math.sqrt(width), rel_tol=1e-6):
        attrs["scale"] = scale  # Gemma-2's query_pre_attn_scalar^-1/2
    if softcap is not None:
        attrs["softcap"] = softcap
    try:
        fused = pcg.AttentionOp.build_inferred(operands, **attrs)
    except FormError:
        return None  # e.g. a mask of a shape the op does not take
    last = [fused]
    if seq_first:
        last.append(pcg.TransposeOp.build_inferred([fused.output], perm=[1, 0, 2]))
    if last[-1].results[0].type != root.results[0].type:
        return None
    return [*weights.ops, *new_ops, *last]


def _widened(constant: pcg.ConstantOp, dims: int) -> pcg.ConstantOp:
    """A constant [..., 1] repeated along its last dim to [..., dims] (the same values)."""
    t = constant.results[0].type
    assert isinstance(t, TensorType)
    values = [v for v in literal_values(constant.attrs()["value"]) for _ in range(dims)]
    shape = [*t.shape[:-1], dims]
    literal = DenseIntOrFPElementsAttr.from_list(BuiltinTensorType[Any](t.element_type, shape), values)
    wide = TensorType(shape, t.element_type)
    return pcg.ConstantOp.build(result_types=[wide], properties={"value": literal})


def _mask(terms: list[SSAValue], new_ops: list[Operation]) -> SSAValue | None:
    """The additive terms of the scores as one [B|1, H|1, Sq|1, Sk] mask (a causal [Sq, Sk]
    mask reshaped; T5's position bias plus its mask summed), the ops appended; None if none or
    they do not broadcast so."""
    mask = None
    for term in terms:
        try:
            if len(_shape(term)) < 4:  # e.g. a causal [Sq, Sk] mask
                shape = [1] * (4 - len(_shape(term))) + list(_shape(term))
                shaped = pcg.ReshapeOp.build_inferred([term], shape=shape)
                shaped.output.name_hint = "mask"
                new_ops.append(shaped)
                term = shaped.output
            if mask is not None:
                summed = pcg.AddOp.build_inferred([mask, term])
                summed.output.name_hint = "mask"
                new_ops.append(summed)
                term = summed.output
        except FormError:
            return None
        mask = term
    return mask


@dataclass(frozen=True)
class FuseAttentionPass(ModulePass):
    """Fuses multi-head attention subgraphs into `pcg.attention`."""

    name = "fuse-attention"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        share_constants(op)
        unpack_linears(op)
        PatternRewriteWalker(FuseAttention()).rewrite_module(op)
        causal_masks(op)
        region_dce(op.body)
        split_weights(op)
        share_constants(op)  # rotary tables widened per layer (`_Weights.table`)
