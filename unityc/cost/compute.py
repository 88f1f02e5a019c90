"""Compute cost of one task of a pcg op: FLOPs and bytes, priced by a roofline.

Pure functions over small values (no xDSL objects), so the search can call them directly:

    op_cost("pcg.linear", attrs, (x, w, None), (out,), device) -> OpCost

`operands` and `results` are the *pieces* one task reads and writes (`Piece(shape, dtype)`,
None for an absent optional operand). Kernel time is the roofline

    t = kernel_latency + max(FLOPs / (peak[dtype] * compute_efficiency),
                             bytes / (bandwidth * memory_efficiency))

(bandwidth: the device's `memory_bandwidth`, or its `cache_bandwidth` for a kernel whose bytes
fit in its last-level cache, `DeviceKind.stream_bandwidth`: a CPU core; GPUs set none) plus,
where the device sets them, the stalls a CPU core does not hide behind compute: a matmul-like
op's bytes at `cold_bandwidth` (its operands come from memory, not cache) and an
embedding backward's rows at `scatter_row_time` each; and nothing at all for an op that does no
work (sources, reshape: a view). Matmul-like ops (`MATMUL_LIKE`) run at the device's peak for
their dtype, every other op at its element-wise rate (`DeviceKind.vector_flops`, where set: a
CPU core's element-wise kernels run far below its GEMM rate).

Forward FLOPs (n = elements of the result piece unless said otherwise):

| op | FLOPs |
|---|---|
| linear x[..,K] w[N,K] | 2·M·K·N (M = elements of x / K), + M·N with a bias |
| matmul, batch_matmul | 2·batch·m·k·n |
| conv2d | 2·n·(C/groups)·kh·kw, + n with a bias |
| pool2d | n·kh·kw |
| attention | projections 2·B·(Sq + 2·Sk)·E·Eh + output 2·B·Sq·Eh·E + scores and context |
| | 4·B·Sq·Sk·Eh + softmax 5·B·h·Sq·Sk (h: the task's heads, Eh = E·h/heads) |
| unary element-wise | `UNARY_FLOPS[op]`·n (1 for arithmetic, 4 for transcendental, 8 for gelu) |
| dropout (p > 0) | (1 + `DROPOUT_HASH_FLOPS`)·n: the program hashes each element's index; 0 for p = 0 |
| binary element-wise | n |
| softmax | 5·n (max, subtract, exp, sum, divide) |
| layer_norm, batch_norm | 5·n, + n each for weight and bias |
| rms_norm | 4·n (square, sum, scale by rstd; rsqrt per row), + n for the weight |
| gated_activation | act's `UNARY_FLOPS` (silu: sigmoid's + 1) + 1, ·n |
| reduce | elements of the input (an add or a compare each), + n for a mean |
| embedding | 0 (a gather: bytes only) |
| embedding_bag | L·B·D (+ B·D for a mean) |
| cross_entropy logits[N,C] | 4·N·C |
| mse_loss | 3·elements of the input |
| topk | elements of the input · ⌈log2(k + 1)⌉; no backward (indices) |
| experts x[T,H] ids[T,k] gate_up[E,2I,H] | T·k·(6·H·I + (silu + 1)·I + 2·H): the routed rows only |
| | (dropless, sorted by expert); backward 2x |
| concat, split, transpose, gather, take, cast, identity, reshape | 0 |

Bytes: every operand piece read once and every result piece written once; reshape and
transpose (views, `VIEWS`) move nothing, embedding reads indices and the rows it gathers;
attention's "math" kernel (`AttentionOp.kernel`) also writes and reads back its B·h·Sq·Sk
scores, the fused "sdpa" kernel none.

Backward: contractions (linear, matmul, batch_matmul, conv2d) cost their forward FLOPs once per
operand that needs a gradient (dX and dW are each a product as large as the forward), plus n for
a bias gradient; attention ≈ 2x forward (its dropout mask saved, not hashed again; the fused
"sdpa" kernel also recomputes the scores and softmax from its logsumexp); embedding
and embedding_bag scatter-add their rows (n FLOPs, and `Work.rows` = the ids: one row added at a
time, into a zeroed table gradient whose bytes count too); dropout multiplies by its saved mask
and scale (2·n); every other op ≈ 1x its forward FLOPs. Backward bytes ≈ 2x forward bytes (read
the result's gradient and the saved operands, write the operands' gradients). An op none of
whose operands needs a gradient has no backward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from unityc.dialects.pcg import BinaryOp, family_ops
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg.attention import AttentionOp
from unityc.machine.spec import DeviceKind

DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i32": 4, "i64": 8}


@dataclass(frozen=True)
class Piece:
    """The local shape and element type (`f32`, `i64`, ...) of one piece of a tensor."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float
    vector: float = 0.0
    """Element-wise FLOPs inside a matmul-like op that run at the non-matmul rate (the dropout
    mask of attention probabilities); not in `flops`."""
    rows: float = 0.0
    """Looked-up rows whose gradients a scatter-add accumulates one by one (an embedding's
    backward), priced at `DeviceKind.scatter_row_time` each."""
    kernels: float = 1.0
    """Fixed costs (`DeviceKind.kernel_latency`) this pass pays: 1 for an op the program runs as
    one framework op, more for the runtime's multi-op kernels (`KERNELS`)."""


@dataclass(frozen=True)
class OpCost:
    """Roofline time and work of one task, forward and backward."""

    fwd_s: float
    bwd_s: float
    fwd: Work
    bwd: Work


Operands = Sequence[Piece | None]
Formula = Callable[[Mapping[str, Any], Operands, Sequence[Piece]], float]

UNARY_FLOPS: dict[str, int] = {
    "pcg.relu": 1,
    "pcg.gelu": 8,
    "pcg.sigmoid": 4,
    "pcg.tanh": 4,
    "pcg.exp": 4,
    "pcg.sqrt": 4,
    "pcg.log1p": 4,
    "pcg.log": 4,
    "pcg.abs": 1,
    "pcg.pow": 4,
    "pcg.clamp": 2,
    "pcg.compare": 1,
    "pcg.cumsum": 1,
    "pcg.neg": 1,
    "pcg.scalar_mul": 1,
    "pcg.scalar_add": 1,
    "pcg.dropout": 1,  # + the mask's hash, DROPOUT_HASH_FLOPS
    "pcg.identity": 0,
    "pcg.stop_gradient": 0,
    "pcg.cast": 0,
}
DROPOUT_HASH_FLOPS = 10
"""Element-wise FLOPs per element of a dropout mask: the program hashes each element's logical
index (`unityc.runtime.context`: a dozen int32 passes) so every copy drops the same elements;
a whole dropout measured 10-11 f32 adds per element (`benchmarks/measure_cpu_machine.py`,
2026-11-27 on the cpu preset's Intel core; 19-23 on the AMD core before, 67-92 with the
earlier int64 hash). Its backward multiplies by the saved mask and scale (2 per element)."""
BINARY = family_ops(BinaryOp)
NOT_DIFFERENTIABLE = family_ops(fam.NotDifferentiable)
"""Ops whose result carries no gradient back (a boolean mask)."""
SOURCES = family_ops(fam.Source)
DATA_MOVEMENT = family_ops(fam.DataMovement)
CONTRACTIONS = family_ops(fam.Contraction)
MATMUL_LIKE = family_ops(fam.MatmulRate)
"""Ops that run at the matmul rate (tf32 where the device allows it)."""


def _n(p: Piece | None) -> int:
    return 0 if p is None else p.numel


def _linear(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    x, w, bias = ops
    assert x is not None and w is not None
    return 2 * _n(x) * w.shape[0] + (_n(res[0]) if bias is not None else 0)


def _matmul(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    a, b = ops
    assert a is not None and b is not None
    return 2 * _n(a) * b.shape[-1]


def _conv2d(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    _, w, bias = ops
    assert w is not None
    return 2 * _n(res[0]) * math.prod(w.shape[1:]) + (_n(res[0]) if bias is not None else 0)


def _pool2d(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    return _n(res[0]) * math.prod(attrs["kernel"])


def _norm(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    x, w, b = ops
    n = _n(x)
    return 5 * n + (n if w is not None else 0) + (n if b is not None else 0)


CONTEXT_DEGREE = "context_degree"
"""The attribute `cost/pricing.py` adds to a context-parallel attention's attributes: how many
K/V blocks (the context degree) each task attends, its own and those the exchange brings."""


def _rms_norm(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    x, w = ops
    return 4 * _n(x) + (_n(x) if w is not None else 0)


GATED_FLOPS = {
    "silu": UNARY_FLOPS["pcg.sigmoid"] + 1,
    "gelu": UNARY_FLOPS["pcg.gelu"],
    "gelu_tanh": UNARY_FLOPS["pcg.gelu"],
}
"""FLOPs per element of each activation of `pcg.gated_activation` (SiLU is x · sigmoid(x))."""


def _gated(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    return (GATED_FLOPS[attrs["act"]] + 1) * _n(res[0])


def _attention_parts(attrs: Mapping[str, Any], ops: Operands) -> tuple[int, int, int, int, int, int]:
    """(B, Sq, Sk, E, Eh, local heads) of one attention task."""
    q, k, _, wq = ops[:4]
    assert q is not None and k is not None and wq is not None
    batch, sq, e = q.shape
    eh = wq.shape[0]
    return batch, sq, k.shape[1], e, eh, attrs["heads"] * eh // e


def _attention(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    batch, sq, sk, e, eh, h = _attention_parts(attrs, ops)
    wk = ops[4]
    ekv = wk.shape[0] if wk is not None else eh  # grouped-query: fewer key/value rows
    projections = 2 * batch * sq * e * eh + 4 * batch * sk * e * ekv + 2 * batch * sq * eh * e
    sk *= int(attrs.get(CONTEXT_DEGREE, 1))  # context parallelism: this task's rows see every key
    return projections + _attention_core_flops(attrs, ops, batch, sq, sk, eh, h)


def _attention_core_flops(
    attrs: Mapping[str, Any],
    ops: Operands,
    batch: int,
    sq: int,
    sk: int,
    eh: int,
    h: int,
    context: bool = True,
) -> float:
    """The scores and context (q·kᵀ, and probs·v unless not `context`) and the softmax (with the
    mask and soft-capping)."""
    scores = (4 if context else 2) * batch * sq * sk * eh
    softmax = 5 * batch * h * sq * sk + (batch * h * sq * sk if ops[11] is not None else 0)
    softmax += 6 * batch * h * sq * sk if attrs.get("softcap") else 0  # divide, tanh, multiply
    return scores + softmax


CORE_KERNELS = {"math": 3, "sdpa": 1}
"""Framework ops of an attention's core forward as its recomputation runs it
(`attention_core_work`; `runtime.kernels._math_attention`: q·kᵀ, the scale and the softmax, +
the dropout's `KERNELS` with attention dropout; `_sdpa`: one)."""


def attention_core_work(attrs: Mapping[str, Any], operands: Operands, results: Sequence[Piece]) -> Work:
    """Forward work of one attention task's core that selective recomputation
    (`backward.core_recomputed`) runs again in backward, not the projections: the fused kernel
    whole (it keeps its output: the q, k, v heads read, the context written); the hand-written
    one up to its probabilities (q·kᵀ, the softmax, the dropout mask hashed: the q and k heads
    read, the scores written and read back), not probs·v: torch's checkpoint stops recomputing
    once every tensor the backward needs is made again, and probs·v keeps its inputs before it
    runs (`tests/cost/test_attention_saved.py` counts the matmuls). FLOPs as in the attention's
    forward (`_attention_core_flops`), bytes in the result's element type."""
    batch, sq, sk, _, eh, h = _attention_parts(attrs, operands)
    wk = operands[4]
    ekv = wk.shape[0] if wk is not None else eh
    element = DTYPE_BYTES[results[0].dtype]
    kernel = AttentionOp.kernel(attrs)
    if kernel == "sdpa":
        flops = _attention_core_flops(attrs, operands, batch, sq, sk, eh, h)
        return Work(
            flops, (2 * batch * sq * eh + 2 * batch * sk * ekv) * element, kernels=CORE_KERNELS[kernel]
        )
    flops = _attention_core_flops(attrs, operands, batch, sq, sk, eh, h, context=False)
    nbytes = (batch * sq * eh + batch * sk * ekv + 2 * batch * h * sq * sk) * element
    dropout = bool(attrs.get("dropout"))
    masked = (UNARY_FLOPS["pcg.dropout"] + DROPOUT_HASH_FLOPS) * batch * h * sq * sk if dropout else 0.0
    kernels = CORE_KERNELS[kernel] + (KERNELS["pcg.dropout"][0] if dropout else 0)
    return Work(flops, nbytes, masked, kernels=kernels)


def _reduce(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    return _n(ops[0]) + (_n(res[0]) if attrs["kind"] == "mean" else 0)  # a compare per element for max, min


def _topk(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    return _n(ops[0]) * max(1, math.ceil(math.log2(attrs["k"] + 1)))  # a heap of k per row


def _experts(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    """The routed tokens' FFNs: T·k rows, each 2·H·2I (gate and up) + 2·I·H (down) + the gated
    activation's (silu + 1)·I, then scaled by its weight and added at its token (2·H)."""
    x, ids, _, gate_up = ops[:4]
    assert x is not None and ids is not None and gate_up is not None
    rows, hidden, ffn = _n(ids), x.shape[1], gate_up.shape[1] // 2
    return rows * (6 * hidden * ffn + (GATED_FLOPS["silu"] + 1) * ffn + 2 * hidden)


def _embedding_bag(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    ids, w = ops
    assert w is not None
    return _n(ids) * w.shape[1] + (_n(res[0]) if attrs["mode"] == "mean" else 0)


def _cross_entropy(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    return 4 * _n(ops[0])


def _zero(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    return 0


def _unary(name: str) -> Formula:
    return lambda attrs, ops, res: UNARY_FLOPS[name] * _n(res[0])


def _dropout(attrs: Mapping[str, Any], ops: Operands, res: Sequence[Piece]) -> float:
    return (UNARY_FLOPS["pcg.dropout"] + DROPOUT_HASH_FLOPS) * _n(res[0]) if attrs.get("p", 0) > 0 else 0


FORWARD_FLOPS: dict[str, Formula] = {
    **{name: _zero for name in (*SOURCES, *DATA_MOVEMENT, "pcg.reshape", "pcg.embedding")},
    **{name: _unary(name) for name in UNARY_FLOPS},
    "pcg.dropout": _dropout,
    **{name: (lambda attrs, ops, res: _n(res[0])) for name in BINARY},
    "pcg.linear": _linear,
    "pcg.matmul": _matmul,
    "pcg.batch_matmul": _matmul,
    "pcg.conv2d": _conv2d,
    "pcg.pool2d": _pool2d,
    "pcg.batch_norm": _norm,
    "pcg.layer_norm": _norm,
    "pcg.rms_norm": _rms_norm,
    "pcg.gated_activation": _gated,
    "pcg.softmax": lambda attrs, ops, res: 5 * _n(res[0]),
    "pcg.reduce": _reduce,
    "pcg.embedding_bag": _embedding_bag,
    "pcg.attention": _attention,
    "pcg.cross_entropy": _cross_entropy,
    "pcg.mse_loss": lambda attrs, ops, res: 3 * _n(ops[0]),
    "pcg.topk": _topk,
    "pcg.experts": _experts,
}
"""Forward FLOPs of one task, by op name: every pcg op must have an entry (a test checks)."""


KERNELS: dict[str, tuple[float, float]] = {
    "pcg.attention": (13, 12),
    "pcg.dropout": (10, 2),
    "pcg.rms_norm": (1, 9),
    "pcg.gated_activation": (2, 4),
    "pcg.experts": (30, 60),
}
"""Fixed costs (kernel latencies) of a forward and a backward pass of ops the runtime runs as
many framework ops (other ops: 1 each), measured in generated programs on a CPU core at tiny
sizes, where a step is all fixed cost (`benchmarks/fixed_costs.py`: BERT without dropout
against MLP and DLRM, with dropout against without): attention is ~12 torch ops forward
(projections, head reshapes, scores, softmax, context, output) and ~28 backward, plus ~30 views
each way; dropout is the mask's hash (18 torch ops) and the multiply. An attention with dropout
on its probabilities adds the dropout's. RMS norm and the gated activation are counted from their
runtime kernels (`runtime.kernels.rms_norm`: one fused kernel forward, nine element-wise ops
backward; `gated_activation`: act and multiply forward, two multiplies, the act's backward and
the act again backward), not measured. The experts kernel (`runtime.kernels.experts`) is
counted for 4 experts: a sort, a bincount, a gather and 5 ops per expert, the scale and the
index_add forward, ~2x backward; not measured."""


RECOMPUTE_KERNELS = (2.0, 4.0)
"""Fixed costs (kernel latencies) a recomputed op pays beyond its work, forward and backward
(the backward also runs its forward again): `torch.utils.checkpoint` (non-reentrant) runs
Python hooks on every tensor the op saves, when the forward packs it, when the recomputation
packs it again and when the backward unpacks it, and sets up each region's recomputation.
Measured by CPU time on generated programs at tiny sizes, where a step is all fixed cost, with
every op recomputed against none (2026-11-27, cpu preset's core, kernel latency 10 us): the
MLP (16 ops in 8 regions) +0.42 ms forward and +0.73 ms backward beyond the forward again,
BERT without dropout (29 ops, 4 regions) +0.57 / +1.02 ms, with dropout (34 ops) +0.64 /
+1.22 ms: 20-26 us per op forward and 35-46 us backward."""


def recompute_overhead(kernel_latency: float, backward: bool) -> float:
    """Seconds one task of a recomputed op pays for the checkpoint in a pass (`RECOMPUTE_KERNELS`)."""
    return kernel_latency * RECOMPUTE_KERNELS[backward]


def _kernels(kind: str, attrs: Mapping[str, Any], backward: bool) -> float:
    if kind == "pcg.dropout" and not attrs.get("p", 0) > 0:
        return 1  # the identity
    count = KERNELS.get(kind, (1, 1))[backward]
    if kind == "pcg.attention" and attrs.get("dropout"):
        count += KERNELS["pcg.dropout"][backward]
    return count


VIEWS = ("pcg.reshape", "pcg.transpose")
"""Ops the program runs as views (`reshape`, `permute`; `codegen.analysis.WEIGHT_VIEWS`): no
bytes moved, forward or backward (a reader takes the strided operand; GPT-2's transposed Conv1D
weights, read by every micro-batch, are views of the step's bf16 copy)."""


def has_formula(kind: str) -> bool:
    return kind in FORWARD_FLOPS


def forward_work(kind: str, attrs: Mapping[str, Any], operands: Operands, results: Sequence[Piece]) -> Work:
    work = _forward_work(kind, attrs, operands, results)
    kernels = _kernels(kind, attrs, False)
    return work if kernels == 1 else replace(work, kernels=kernels)


def _forward_work(kind: str, attrs: Mapping[str, Any], operands: Operands, results: Sequence[Piece]) -> Work:
    formula = FORWARD_FLOPS.get(kind)
    if formula is None:
        raise ValueError(f"the cost model has no FLOP formula for '{kind}'")
    if kind in SOURCES or kind in VIEWS:
        return Work(0, 0)
    flops = formula(attrs, operands, results)
    out_bytes = sum(r.nbytes for r in results)
    if kind == "pcg.embedding":
        ids = operands[0]
        return Work(flops, (ids.nbytes if ids else 0) + 2 * out_bytes)
    if kind == "pcg.embedding_bag":
        ids, w = operands
        assert w is not None
        rows = _n(ids) * w.shape[1] * DTYPE_BYTES[w.dtype]
        return Work(flops, (ids.nbytes if ids else 0) + rows + out_bytes)
    if kind in ("pcg.gather", "pcg.take"):
        return Work(flops, 2 * out_bytes)
    if kind == "pcg.experts":  # the operands, and each routed row written and read back thrice
        x, ids = operands[:2]
        assert x is not None and ids is not None
        dispatched = _n(ids) * x.shape[1] * DTYPE_BYTES[x.dtype]
        return Work(flops, sum(p.nbytes for p in operands if p is not None) + out_bytes + 6 * dispatched)
    in_bytes = sum(p.nbytes for p in operands if p is not None)
    if kind == "pcg.attention" and attrs.get(CONTEXT_DEGREE, 1) > 1:  # fused block kernels
        blocks = int(attrs[CONTEXT_DEGREE])  # each K/V block read once more per block received
        in_bytes += (blocks - 1) * sum(p.nbytes for p in operands[1:3] if p is not None)
        return Work(flops, in_bytes + out_bytes)
    if kind == "pcg.attention" and AttentionOp.kernel(attrs) == "sdpa":  # no score matrix in memory
        return Work(flops, in_bytes + out_bytes)
    if kind == "pcg.attention":  # "math": the score matrix is written and read back
        batch, sq, sk, _, _, h = _attention_parts(attrs, operands)
        in_bytes += 2 * batch * h * sq * sk * DTYPE_BYTES[results[0].dtype]
        masked = (UNARY_FLOPS["pcg.dropout"] + DROPOUT_HASH_FLOPS) * batch * h * sq * sk
        return Work(flops, in_bytes + out_bytes, masked if attrs.get("dropout") else 0.0)
    return Work(flops, in_bytes + out_bytes)


def backward_work(
    kind: str,
    attrs: Mapping[str, Any],
    operands: Operands,
    results: Sequence[Piece],
    needs_grad: Sequence[bool] | None = None,
) -> Work:
    """Work of the backward of one task; `needs_grad[i]` says whether operand i wants a gradient
    (None: every floating-point operand does)."""
    work = _backward_work(kind, attrs, operands, results, needs_grad)
    kernels = _kernels(kind, attrs, True)
    return work if kernels == 1 or work == Work(0, 0) else replace(work, kernels=kernels)


def _backward_work(
    kind: str,
    attrs: Mapping[str, Any],
    operands: Operands,
    results: Sequence[Piece],
    needs_grad: Sequence[bool] | None,
) -> Work:
    grads = _needs_grad(operands, needs_grad)
    if kind in SOURCES or kind in NOT_DIFFERENTIABLE or not any(grads):
        return Work(0, 0)
    fwd = forward_work(kind, attrs, operands, results)
    if kind in CONTRACTIONS:
        main = FORWARD_FLOPS[kind](attrs, (*operands[:2], None)[: len(operands)], results)  # no bias
        bias = _n(results[0]) if len(grads) > 2 and grads[2] else 0
        return Work(main * (int(grads[0]) + int(grads[1])) + bias, 2 * fwd.bytes)
    if kind == "pcg.attention" and AttentionOp.kernel(attrs) == "sdpa":  # recomputes q·kᵀ, softmax
        batch, sq, sk, _, eh, h = _attention_parts(attrs, operands)
        sk *= int(attrs.get(CONTEXT_DEGREE, 1))  # a context-parallel task's blocks recompute every key's
        return Work(2 * fwd.flops + 2 * batch * sq * sk * eh + 5 * batch * h * sq * sk, 2 * fwd.bytes)
    if kind == "pcg.attention":  # the dropout mask is saved, not hashed again
        return Work(
            2 * fwd.flops, 2 * fwd.bytes, 2 * fwd.vector / (UNARY_FLOPS["pcg.dropout"] + DROPOUT_HASH_FLOPS)
        )
    if kind in ("pcg.embedding", "pcg.embedding_bag"):  # a zeroed table gradient, row by row
        ids, w = operands[:2]
        assert w is not None
        added = _n(results[0]) if kind == "pcg.embedding" else _n(ids) * w.shape[1]
        return Work(added, fwd.bytes + w.nbytes, rows=_n(ids))
    if kind == "pcg.dropout":
        return Work(2 * _n(results[0]) if fwd.flops else 0, 2 * fwd.bytes)
    if kind == "pcg.experts":  # dX and dW of each expert matmul
        return Work(2 * fwd.flops, 2 * fwd.bytes)
    return Work(fwd.flops, 2 * fwd.bytes)


def _needs_grad(operands: Operands, needs_grad: Sequence[bool] | None) -> tuple[bool, ...]:
    if needs_grad is None:
        return tuple(p is not None and p.dtype in ("f16", "bf16", "f32", "f64") for p in operands)
    return tuple(bool(g) and p is not None for g, p in zip(needs_grad, operands, strict=True))


def compute_dtype(operands: Operands, results: Sequence[Piece]) -> str:
    """The float dtype an op computes in: its first float result or operand (else f32)."""
    for p in (*results, *operands):
        if p is not None and p.dtype in ("f16", "bf16", "f32", "f64"):
            return p.dtype
    return "f32"


def kernel_time(work: Work, dtype: str, device: DeviceKind, matmul: bool = False) -> float:
    """Roofline time of one kernel on `device`; 0 for no work."""
    if work.flops <= 0 and work.bytes <= 0 and work.vector <= 0:
        return 0.0
    compute = work.flops / (device.op_flops(dtype, matmul) * device.compute_efficiency)
    compute += work.vector / (device.op_flops(dtype, False) * device.compute_efficiency)
    memory = work.bytes / (device.stream_bandwidth(work.bytes) * device.memory_efficiency)
    stalls = work.rows * device.scatter_row_time
    if matmul and device.cold_bandwidth > 0:
        stalls += work.bytes / device.cold_bandwidth
    return device.kernel_latency * work.kernels + max(compute, memory) + stalls


def op_cost(
    kind: str,
    attrs: Mapping[str, Any],
    operands: Operands,
    results: Sequence[Piece],
    device: DeviceKind,
    needs_grad: Sequence[bool] | None = None,
) -> OpCost:
    """Roofline forward and backward time and work of one task of `kind` on `device`."""
    fwd = forward_work(kind, attrs, operands, results)
    bwd = backward_work(kind, attrs, operands, results, needs_grad)
    dtype = compute_dtype(operands, results)
    matmul = kind in MATMUL_LIKE
    return OpCost(kernel_time(fwd, dtype, device, matmul), kernel_time(bwd, dtype, device, matmul), fwd, bwd)
