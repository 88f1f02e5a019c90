"""Memory per device and the optimizer's weight update.

Per device, the peak over one training iteration (`estimate` walks forward, then backward in
reverse, see `peaks.peaks`):

    total = reserved + weights + optimizer state + max over the iteration of
            (saved activations still live + gradients made so far + transient bytes)

* weights, gradients, optimizer state: `persistent_bytes` per weight piece, what the generated
  program holds and reports (a weight in n copies with `zero = 1|2|3` shards its optimizer
  state, then its gradient, then itself across the copies: shards of ceil(numel/n) elements,
  the last one padded); SGD (no momentum) keeps no state, Adam keeps m and v (2x);
* saved activations: the tensors the backward of some op needs (`SAVES`): an op's operands
  (matmuls, norms, most ops), its result (relu, sigmoid, tanh, exp, sqrt, softmax: their
  derivative is a function of the result), or nothing (add, reshape, parallel ops, ...), counted
  on the devices holding their pieces, once per micro-batch; attention also keeps its internal
  q, k, v projections, attention probabilities and context, and the norms their per-row fp32
  statistics (`NORM_STATS`: rms_norm its rstd, layer_norm its mean and rstd);
* communication buffers: the largest single collective buffer the device takes part in;
* transient bytes at one moment: in backward, the gradients of the op's results and operands
  on the device (activation gradients), the region's recomputed activations (`recompute`), the
  full weight a ZeRO-3 op all-gathers while it runs (forward and backward: weight minus shard),
  the full gradient of a ZeRO-2/3 weight before its reduce-scatter;
* reserved: what the framework holds whatever the plan (the device kind's `reserved`: CUDA
  context, NCCL buffers, cuBLAS workspace; 0 for CPU processes).

Weight update (memory-bound): SGD reads w and g and writes w (3 passes, 2 FLOPs per element);
Adam reads w, g, m, v and writes w, m, v (7 passes, ~12 FLOPs per element).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xdsl.dialects.builtin import AnyFloat, bf16

from unityc.cost.compute import Work
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg import family_ops
from unityc.dialects.precision import BF16_MIXED
from unityc.graph import Graph, Ref, op_class
from unityc.graph.precision import graph_precision

OPTIMIZERS = ("sgd", "adam")

STATE_PER_WEIGHT = {"sgd": 0, "adam": 2}
_UPDATE_PASSES = {"sgd": 3, "adam": 7}
_UPDATE_FLOPS = {"sgd": 2, "adam": 12}

SAVES_RESULT = family_ops(fam.SavesResult)
"""Ops whose backward reads their result (relu, sigmoid, tanh, exp, sqrt, softmax)."""
SAVES_NOTHING = family_ops(fam.SavesNothing)
"""Ops whose backward reads neither result nor operands (dropout its bool mask:
`steps.dropout_mask`; comparisons, masks and indices: no gradient; cumsum: its backward is a
reversed cumsum of the gradient; the shape ops)."""


WEIGHT_VIEWS = family_ops(fam.RunsAsView)
"""Ops the program runs as views (`permute`, `reshape` of a contiguous tensor): of a weight, no
bytes of their own."""


def weight_view(graph: Graph, r: Ref) -> bool:
    """Whether value `r` is a weight or a view of one (`WEIGHT_VIEWS` of a weight, such as GPT-2's
    transposed Conv1D weights): a backward keeping it keeps the persistent weight, no activation
    (under bf16-mixed, autocast's bf16 copy of it, `steps.autocast_copies`)."""
    node = graph.nodes[r[0]]
    while node.op in WEIGHT_VIEWS:
        source = node.operands[0]
        if source is None:
            return False
        node = graph.nodes[source[0]]
    return node.op == "pcg.weight"


def cast_operand(graph: Graph, nid: int, r: Ref) -> bool:
    """Whether op `nid` of a priced graph (`graph.precision.priced_graph`) reads value `r` through
    autocast's cast to bf16 (a bf16 op, such as a matmul, reading an fp32 tensor): its backward
    keeps that bf16 copy, 2 bytes an element, one per reading op (`steps.autocast_copies`), not
    the fp32 tensor (which stays only if another op keeps it)."""
    node = graph.nodes[nid]
    if node.types[0].element_type != bf16 or op_class(node.op).AUTOCAST != "bf16":
        return False
    t = graph.type_of(r)
    return t.element_type != bf16 and isinstance(t.element_type, AnyFloat)


def upcast_operand(graph: Graph, nid: int, r: Ref) -> bool:
    """Whether op `nid` of a priced graph is one autocast runs in fp32 (a loss: `AUTOCAST` "f32")
    reading a bf16 value `r`: autocast casts it up, and the backward keeps that fp32 copy (the
    cross-entropy its fp32 log-softmax, the same size), 4 bytes an element
    (`steps.autocast_copies`), not the bf16 tensor."""
    if op_class(graph.nodes[nid].op).AUTOCAST != "f32" or graph_precision(graph) != BF16_MIXED:
        return False
    return graph.type_of(r).element_type == bf16


def step_weight_copy(graph: Graph, nid: int, r: Ref, users: Mapping[int, list[int]] | None = None) -> bool:
    """Whether autocast's bf16 copy of `r` that op `nid` keeps (`cast_operand`) is made once per
    step and shared by every micro-batch (`runtime.precision.step_region`): `r` is a trained
    weight read directly (autocast caches the cast of a leaf that requires grad), or a view of
    one (`WEIGHT_VIEWS`, given the graph's `users`) read, through views, only by ops that cast
    it (the program takes the view of the weight's own copy, `runtime.precision.step_cast`,
    `codegen.analysis.step_casts`); not a ZeRO-3 one (its gathered piece is a view of its
    bucket, cast per forward). Counted once per device, not per micro-batch in flight
    (`steps.autocast_copies`)."""
    node = graph.nodes[r[0]]
    if node.op in WEIGHT_VIEWS and users is not None and node.operands[0] is not None:
        if not _read_in_bf16(graph, r[0], users):
            return False
        return step_weight_copy(graph, nid, node.operands[0], users) if cast_operand(graph, nid, r) else False
    if node.op != "pcg.weight" or node.attr("frozen") or node.zero >= 3:
        return False
    return cast_operand(graph, nid, r)


def is_bf16_piece(graph: Graph, nid: int, users: Mapping[int, list[int]], wants_grad: bool) -> bool:
    """Whether the program holds weight `nid` as a bf16 piece with an fp32 master shard
    (`runtime.zero`, `Plan.bf16_pieces`): under bf16-mixed, a trained weight (not ZeRO-3, whose
    gathered piece is read as it is gathered) every reader of which (through views) runs in
    bf16, casting it (`cast_operand`); it then has no autocast copy (`bf16_read`). The
    program's side: `codegen.memory.bf16_pieces`."""
    node = graph.nodes[nid]
    if node.op != "pcg.weight" or node.zero > 2 or node.attr("frozen") or not wants_grad:
        return False
    return graph_precision(graph) == BF16_MIXED and _read_in_bf16(graph, nid, users)


def bf16_read(graph: Graph, r: Ref, users: Mapping[int, list[int]], gets_grad: Any) -> bool:
    """Whether value `r` is a bf16 piece (`is_bf16_piece`; `gets_grad` holds the refs that get a
    gradient) or a view of one: read as it is held, no autocast copy of it is made."""
    nid = r[0]
    while graph.nodes[nid].op in WEIGHT_VIEWS:
        source = graph.nodes[nid].operands[0]
        if source is None:
            return False
        nid = source[0]
    return is_bf16_piece(graph, nid, users, (nid, 0) in gets_grad)


def _read_in_bf16(graph: Graph, view: int, users: Mapping[int, list[int]]) -> bool:
    """Whether every reader of view `view`'s result, through views, is a bf16 op casting it."""
    readers = users.get(view, [])
    if not readers or any(o[0] == view for o in graph.outputs):
        return False
    for reader in readers:
        node = graph.nodes[reader]
        if node.op in WEIGHT_VIEWS:
            if not _read_in_bf16(graph, reader, users):
                return False
        elif not all(cast_operand(graph, reader, o) for o in node.operand_refs() if o[0] == view):
            return False
    return True


def autocast_copy_bytes(graph: Graph, nid: int, r: Ref) -> int:
    """Bytes an element of autocast's copy of `r` that op `nid` keeps for backward (0: none)."""
    if cast_operand(graph, nid, r):
        return 2
    return 4 if upcast_operand(graph, nid, r) else 0


REDUCE_SAVES = {"max": "result", "min": "result", "amax": "operands", "amin": "operands"}
"""What a selecting pcg.reduce keeps: torch.max/min over a dim its indices (as many elements as
its result, counted as the result), amax/amin its input and result (counted as the input)."""


def saves(kind: str, attrs: Mapping[str, Any] | None = None) -> str:
    """What the backward of `kind` (with properties `attrs`) keeps from forward: "operands",
    "result" or "nothing"."""
    if kind == "pcg.reduce" and attrs is not None:
        return REDUCE_SAVES.get(attrs.get("kind", ""), "nothing")
    if kind.startswith("parallel.") or kind in SAVES_NOTHING:
        return "nothing"
    return "result" if kind in SAVES_RESULT else "operands"


def check_optimizer(optimizer: str) -> None:
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{optimizer}' (known: {', '.join(OPTIMIZERS)})")


def optimizer_state_bytes(optimizer: str, weight_bytes: float) -> float:
    check_optimizer(optimizer)
    return STATE_PER_WEIGHT[optimizer] * weight_bytes


def shard_numel(numel: int, copies: int) -> int:
    """Elements of one ZeRO shard of a piece of `numel` elements held in `copies` copies."""
    return math.ceil(numel / copies)


def persistent_bytes(
    numel: int,
    element_bytes: int,
    copies: int,
    zero: int,
    optimizer: str,
    wants_grad: bool = True,
    bf16_piece: bool = False,
) -> DeviceMemory:
    """What one copy of a weight piece keeps on its device for the whole run: the weight (a
    shard if zero = 3), its gradient (a shard if zero >= 2) and the optimizer state (sharded if
    zero >= 1); shards hold ceil(numel / copies) elements (the last one padded). A `bf16_piece`
    (`is_bf16_piece`: a trained weight, ZeRO-0/1/2) keeps the whole piece in bf16 and its master
    in `element_bytes` (a shard under ZeRO): Megatron-LM's 2 + 4 + 12/d bytes an element under
    Adam (d = 1 without ZeRO: its bf16 parameters, fp32 gradients and main parameters)."""
    check_optimizer(optimizer)
    whole = numel * element_bytes
    shard = shard_numel(numel, copies) * element_bytes if zero else whole
    if bf16_piece and (zero > 2 or not wants_grad):
        raise ValueError(f"a bf16 piece is a trained ZeRO-0/1/2 weight, not ZeRO-{zero}")
    if not wants_grad:
        return DeviceMemory(weights=shard if zero == 3 else whole)
    held = numel * 2 + shard if bf16_piece else whole
    return DeviceMemory(
        weights=shard if zero == 3 else held,
        gradients=shard if zero >= 2 else whole,
        optimizer=STATE_PER_WEIGHT[optimizer] * (shard if zero >= 1 else whole),
    )


def update_work(optimizer: str, numel: int, element_bytes: int) -> Work:
    """Work of updating `numel` weight elements in place."""
    check_optimizer(optimizer)
    return Work(_UPDATE_FLOPS[optimizer] * numel, _UPDATE_PASSES[optimizer] * numel * element_bytes)


def attention_saved_bytes(
    batch: int,
    sq: int,
    sk: int,
    eh: int,
    heads: int,
    element_bytes: int,
    kernel: str = "math",
    ekv: int | None = None,
    mask_elements: int = 0,
    probs_bytes: int | None = None,
) -> int:
    """What one attention task keeps besides its operands, by kernel (`AttentionOp.kernel`):

    * "math": the q, k, v projections, the attention probabilities (B·H·Sq·Sk, `probs_bytes` an
      element, default `element_bytes`: see `probability_bytes`), the context, and
      `mask_elements` bytes of a causal bool mask;
    * "sdpa" (torch's fused CPU kernel, measured with a saved-tensor hook: `tests/cost/
      test_attention_saved.py`): the q, k, v heads it reads (k and v at the `ekv` key/value
      width: grouped-query heads are not copied), its output (laid out [B, Sq, H, D] as its
      query is, so the output projection reads it as a view), the fp32 logsumexp per query and
      head, and `mask_elements` of a mask it builds or casts (a causal mask combined with another
      one, or autocast's copy of a float mask); no Sq x Sk tensor otherwise.
    """
    kv = eh if ekv is None else ekv
    core = attention_core_saved_bytes(
        batch, sq, sk, eh, heads, element_bytes, kernel, kv, mask_elements, probs_bytes
    )  # fmt: skip
    if kernel == "math":  # the query, the key/value heads, the context the output projection reads
        return (batch * sq * eh + 2 * batch * sk * kv + batch * sq * eh) * element_bytes + core
    return (2 * batch * sq * eh + 2 * batch * sk * kv) * element_bytes + core


def attention_core_saved_bytes(
    batch: int,
    sq: int,
    sk: int,
    eh: int,
    heads: int,
    element_bytes: int,
    kernel: str = "math",
    ekv: int | None = None,
    mask_elements: int = 0,
    probs_bytes: int | None = None,
) -> int:
    """The part of `attention_saved_bytes` that only the attention core (scores, softmax,
    dropout, times V) keeps beyond its inputs (the q, k, v heads) and its output (the context,
    the output projection's input): what selective recomputation of the core
    (`runtime.patterns.recomputes_core`) no longer keeps, and makes again, one task at a time,
    in backward. "math": the probabilities (with dropout, its keep-mask and the dropped
    probabilities; `probability_bytes`), the grouped-query key/value heads repeated to every
    query head (`repeat_interleave`'s copies, beyond the `ekv` width) and `mask_elements` bytes
    of the causal [Sq, Sk] bool mask its masked_fill keeps; "sdpa": the logsumexp and
    `mask_elements` of a mask it builds or casts, in the element type."""
    if kernel == "math":
        probs = element_bytes if probs_bytes is None else probs_bytes
        repeated = 2 * batch * sk * (eh - (eh if ekv is None else ekv)) * element_bytes
        return batch * heads * sq * sk * probs + repeated + mask_elements  # a bool causal mask
    return mask_elements * element_bytes + batch * heads * sq * 4


def probability_bytes(element_bytes: int, bf16_mixed: bool, dropout: bool) -> int:
    """Bytes an attention probability keeps for backward in the hand-written attention: the
    softmax's output (in fp32 under bf16-mixed: autocast runs the softmax in fp32), with
    attention dropout its bool keep-mask (1 byte) and the dropped probabilities, and what
    `probs @ v` reads: under bf16-mixed autocast's bf16 copy (2 bytes), else the dropped
    probabilities (the softmax output itself without dropout)."""
    softmax = 4 if bf16_mixed else element_bytes
    mask = 1 if dropout else 0
    if bf16_mixed:
        return softmax + mask + 2
    return softmax + mask + (element_bytes if dropout else 0)


def context_attention_saved_bytes(
    batch: int, rows: int, eh: int, ekv: int, heads: int, element_bytes: int = 4
) -> int:
    """What one context-parallel attention task keeps (`runtime/ring_attention.py`): its rows'
    q, k, v projections, the merged output (in float32) and its log-sum-exp, no probabilities:
    1/C of the sequence's activations and no S² term."""
    return batch * rows * (eh + 2 * ekv) * element_bytes + batch * rows * (eh + heads) * 4


NORM_STATS = {"pcg.rms_norm": 1, "pcg.layer_norm": 2}
"""Per-row fp32 statistics the backward of a norm keeps besides its input (measured with a
saved-tensor hook, `tests/runtime/test_norm_kernels.py`): `runtime.kernels.rms_norm` keeps rstd,
`F.layer_norm` its mean and rstd."""


def norm_stats_bytes(kind: str, dims: int, shape: tuple[int, ...]) -> int:
    """The statistics (`NORM_STATS`) one task of norm `kind` over the last `dims` dims of an
    input piece of `shape` keeps for backward."""
    return NORM_STATS[kind] * 4 * math.prod(shape[: len(shape) - dims])


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes on one device, by part. Without `peak`, `total` is their sum; `estimate` sets
    `peak` (the simulated peak over the iteration, see the module docstring), since the parts
    do not all live at once: all saved activations and all gradients never coexist."""

    weights: float = 0
    gradients: float = 0
    optimizer: float = 0
    activations: float = 0
    """Saved activations at the end of forward (region inputs only where `recompute`)."""
    buffers: float = 0
    transient: float = 0
    """The transient bytes at the peak moment (activation gradients, gathered ZeRO-3 weights,
    recomputed activations, unsharded ZeRO-2/3 gradients before their reduce-scatter)."""
    reserved: float = 0
    peak: float | None = None

    @property
    def total(self) -> float:
        if self.peak is not None:
            return self.peak
        return (
            self.weights + self.gradients + self.optimizer + self.activations + self.buffers
            + self.transient + self.reserved
        )  # fmt: skip


def experts_saved_bytes(rows: int, hidden: int, ffn: int, element_bytes: int) -> int:
    """What one `pcg.experts` task keeps besides its operands, for its `rows` routed (token,
    expert) pairs (`runtime.kernels.experts`): the dispatched tokens and each expert's output
    (hidden each), its gate and up projections (2 x ffn) and their gated product (ffn), and the
    sort order (i64)."""
    return rows * ((2 * hidden + 3 * ffn) * element_bytes + 8)
