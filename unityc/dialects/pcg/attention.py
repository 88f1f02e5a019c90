"""Multi-head attention as one `pcg` op (grouped-query, rotary, q/k norm, soft-capping)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from xdsl.ir import Attribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    operand_def,
    opt_operand_def,
    result_def,
)

from unityc.dialects.forms import Form
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg_types import (
    PcgOp,
    TensorType,
    check_eps,
    check_probability,
    float_dtype,
    form_builder,
    op_error,
    result_type,
)
from unityc.dialects.syntax import Kind, op_definition

KERNELS = ("sdpa", "math")
"""Attention's kernel variants (`AttentionOp.kernel`): fused SDPA, and the written-out math."""


@op_definition
class AttentionOp(PcgOp, fam.Attention, fam.MatmulRate):
    """Multi-head attention as one op: softmax((q Wq^T)(k Wk^T)^T / sqrt(d) + mask)(v Wv^T) Wo^T.

    Shapes: q [B, Sq, E], key/value [B, Sk, E], wq and wo [E, E] (torch Linear layout), wk and
    wv [G·d, E] with d = E / heads, optional biases [E] (bq, bo) and [G·d] (bk, bv), optional
    additive mask [B|1, H|1, Sq|1, Sk] (per head: T5's relative position bias, split with
    the heads). `kv_heads` G (default: `heads`) is grouped-query
    attention: query head i reads key/value head i // (heads / G) (Llama's repeat_kv).
    Optional `cos`, `sin` [B|1, 1, S, r] (self-attention, Sq = Sk = S) rotate q and k after
    their projections (rotary embeddings, Llama's rotate_half: x·cos + [-x2, x1]·sin) on the
    first r dims of each head, r even, r = d by default (GPT-NeoX's rotary_pct: r < d, the
    other dims pass through).
    `scale` (default 1/sqrt(d)) multiplies the scores (Gemma-2: query_pre_attn_scalar^-1/2);
    `softcap` c caps them before the mask, c · tanh(scores / c) (Gemma-2's soft-capping).
    Optional `q_norm`, `k_norm` [d] (Qwen3) RMS-normalize each query and key head after its
    projection, before rotary: x · rsqrt(mean(x², -1) + `norm_eps`) · weight.
    Parallel forms: batch, query sequence (not with rotary embeddings), and heads (projection
    rows and wo columns sharded alike by a divisor of `kv_heads`, so that each task keeps
    whole KV groups), which gives partial sums; the output bias is added by partial-sum index 0.
    Context parallelism (factor "c", self-attention): query, key and value sharded alike on the
    sequence, with cos/sin and the mask's query rows (its key columns stay whole), only on an op
    that names its exchange, `context` (`CONTEXT_EXCHANGES`: "ring" passes K/V blocks around the
    context group and merges the partial results by their log-sum-exp; "all-to-all",
    DeepSpeed-Ulysses, trades sequence rows for heads and back, so each task's heads must divide
    by the context degree).
    `dropout` (training only) applies to the attention probabilities, as in BERT.
    `causal` masks every key after its query (query i of the whole sequence attends keys j <= i,
    top-left aligned as torch's `is_causal`): those scores become the dtype's lowest value, after
    the additive `mask` (which then holds only the rest, e.g. a padding mask [B, 1, 1, Sk]).
    `fuse-attention` recognizes the causal structure of the masks models build.

    The kernel (`kernel`): "sdpa", torch's `F.scaled_dot_product_attention` (a fused kernel that
    keeps no Sq x Sk tensor: causal as `is_causal`, grouped-query heads as `enable_gqa`), for every
    form it expresses; "math", the scores, softmax and context written out, for what it cannot:
    soft-capping, and attention dropout (whose mask the program draws itself).
    """

    name = "pcg.attention"
    AUTOCAST = "bf16"
    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    wq = operand_def(TensorType)
    wk = operand_def(TensorType)
    wv = operand_def(TensorType)
    wo = operand_def(TensorType)
    bq = opt_operand_def(TensorType)
    bk = opt_operand_def(TensorType)
    bv = opt_operand_def(TensorType)
    bo = opt_operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    cos = opt_operand_def(TensorType)
    sin = opt_operand_def(TensorType)
    q_norm = opt_operand_def(TensorType)
    k_norm = opt_operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (
        ("heads", Kind.INT, False),
        ("kv_heads", Kind.INT, True),
        ("dropout", Kind.FLOAT, True),
        ("norm_eps", Kind.FLOAT, True),
        ("scale", Kind.FLOAT, True),
        ("softcap", Kind.FLOAT, True),
        ("context", Kind.STR, True),
        ("causal", Kind.FLAG, True),
    )
    CONTEXT_EXCHANGES = ("ring", "all-to-all")
    """What the tasks of one context group exchange (the context factor "c"): read by the cost
    model (`cost/pricing.py`), the interpreter, codegen and `runtime/ring_attention.py`."""
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    NAMES = (
        "query", "key", "value", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "mask", "cos", "sin",
        "q_norm", "k_norm",
    )  # fmt: skip

    @staticmethod
    def kernel(attrs: Mapping[str, Any]) -> str:
        """The kernel the program runs for an attention with these attributes (see `KERNELS`):
        the one choice that codegen, the interpreter and the cost model read."""
        return "math" if attrs.get("softcap") or (attrs.get("dropout") or 0.0) > 0 else "sdpa"

    @classmethod
    def context_exchange(cls, attrs: dict[str, Any]) -> str | None:
        """The exchange of a context-parallel split (`context`; None: the op splits no key)."""
        exchange = attrs.get("context")
        if exchange is None:
            return None
        if exchange not in cls.CONTEXT_EXCHANGES:
            names = ", ".join(f'"{e}"' for e in cls.CONTEXT_EXCHANGES)
            raise op_error(cls, f'context exchange "{exchange}" is not one of {names}')
        return str(exchange)

    @classmethod
    def context_split(cls, attrs: Any, types: Any) -> tuple[str, int] | None:
        """(exchange, context degree) of an attention whose tasks split the key sequence; None
        if they read every key. `types`: the operand types (key second)."""
        exchange = cls.context_exchange(dict(attrs))
        key = types[1] if len(types) > 1 else None
        if exchange is None or key is None or key.shard[1] == 1:
            return None
        return exchange, int(key.shard[1])

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        operands = [*operands, *[None] * (len(cls.NAMES) - len(operands))]  # cos, sin may be left out
        q, k, v, wq, wk, wv, wo, bq, bk, bv, bo, mask, cos, sin, q_norm, k_norm = operands
        heads = attrs["heads"]
        groups = attrs.get("kv_heads") or heads
        check_probability(cls, "dropout", attrs.get("dropout"))
        if q.rank != 3 or k.shape != v.shape or k.rank != 3 or k.shape[0] != q.shape[0]:
            raise op_error(cls, "query must be [B, Sq, E] and key, value [B, Sk, E]")
        batch, sq, e = q.shape
        sk = k.shape[1]
        if k.shape[2] != e or heads < 1 or e % heads:
            raise op_error(cls, f"embedding {e} must match key/value and divide into {heads} heads")
        if groups < 1 or heads % groups:
            raise op_error(cls, f"kv_heads {groups} must divide the {heads} heads")
        width = e // heads
        kv = groups * width
        for name, t, shape in (
            ("wq", wq, (e, e)),
            ("wk", wk, (kv, e)),
            ("wv", wv, (kv, e)),
            ("wo", wo, (e, e)),
            ("bq", bq, (e,)),
            ("bk", bk, (kv,)),
            ("bv", bv, (kv,)),
            ("bo", bo, (e,)),
        ):
            if t is not None and t.shape != shape:
                raise op_error(cls, f"{name} shape {list(t.shape)} should be {list(shape)}")
        if mask is not None and (
            mask.rank != 4
            or mask.shape[0] not in (1, batch)
            or mask.shape[1] not in (1, heads)
            or mask.shape[2] not in (1, sq)
            or mask.shape[3] != sk
        ):
            raise op_error(
                cls, f"mask shape {list(mask.shape)} should be [{batch}|1, {heads}|1, {sq}|1, {sk}]"
            )
        rotary = [t for t in (cos, sin) if t is not None]
        if rotary and (len(rotary) != 2 or sq != sk):
            raise op_error(cls, "rotary embeddings need both cos and sin, and self-attention (Sq = Sk)")
        dims = rotary[0].shape[-1] if rotary else width
        for t in rotary:
            if t.rank != 4 or t.shape[0] not in (1, batch) or t.shape[1:3] != (1, sq) or t.shape[3] != dims:
                raise op_error(cls, f"cos/sin shape {list(t.shape)} should be [{batch}|1, 1, {sq}, r]")
        if rotary and (dims % 2 or not 2 <= dims <= width):
            raise op_error(cls, f"cos/sin rotate {dims} dims of each head: an even number in [2, {width}]")
        for name in ("scale", "softcap"):
            value = attrs.get(name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise op_error(cls, f"{name} must be a positive number, got {value}")
        norms = [t for t in (q_norm, k_norm) if t is not None]
        if norms and (len(norms) != 2 or attrs.get("norm_eps") is None):
            raise op_error(cls, "q/k normalization needs both q_norm and k_norm, and norm_eps")
        if norms:
            check_eps(cls, attrs["norm_eps"])
        for t in norms:
            if t.shape != (width,):
                raise op_error(cls, f"q_norm/k_norm shape {list(t.shape)} should be [{width}]")
        b = form_builder(cls, list(cls.NAMES), operands)
        for o in (14, 15):
            b.forbid(o, 0, "each head is normalized with the whole weight")
        batch_uses = [(0, 0), (1, 0), (2, 0)] + [
            (o, 0) for o, t in ((11, mask), (12, cos), (13, sin)) if t is not None and t.shape[0] == batch
        ]
        seq_uses = [(0, 1)] + ([(11, 2)] if mask is not None and mask.shape[2] == sq else [])
        for o, d in ((1, 1), (2, 1), (11, 3)):
            b.forbid(o, d, "every query attends over the whole key sequence")
        for o in (12, 13):
            for d in (2, 3):
                b.forbid(o, d, "rotary embeddings are read whole")
        for o, d in ((0, 1), (11, 2)) if rotary else ():
            b.forbid(o, d, "rotary embeddings rotate q and k at the same positions")
        exchange = cls.context_exchange(attrs)
        context = exchange is not None and (k.shard[1] > 1 or v.shard[1] > 1)
        if context and (attrs.get("dropout") or attrs.get("softcap")):
            raise op_error(cls, "context-parallel attention has no dropout or soft-capping")
        if context and sq != sk:
            raise op_error(cls, "context parallelism splits self-attention: query and key of one length")
        if context:
            uses = [(0, 1), (1, 1), (2, 1)] + [(o, 2) for o, t in ((12, cos), (13, sin)) if t is not None]
            uses += [(11, 2)] if mask is not None and mask.shape[2] == sq else []
            seq = [b.shared_dim("c", uses)]
        else:
            seq = [] if rotary else [b.shared_dim("s", seq_uses)]
        shard = [[b.shared_dim("b", batch_uses)], seq, []]
        head_uses = [(3, 0), (4, 0), (5, 0), (6, 1), (7, 0), (8, 0), (9, 0)]
        if mask is not None and mask.shape[1] == heads > 1:  # a per-head bias splits with its heads
            head_uses.append((11, 1))
        h = b.shared_dim("h", head_uses)
        if groups % b.degrees[h]:
            what = "heads" if groups == heads else "KV heads"
            raise op_error(cls, f"head shard degree {b.degrees[h]} does not divide {groups} {what}")
        b.forbid(6, 0, "the output projection's rows are the embedding, not heads")
        local, local_kv, degree = heads // b.degrees[h], groups // b.degrees[h], b.degrees.get("c", 1)
        if (
            context
            and exchange == "all-to-all"
            and (local % degree or (local_kv % degree and degree % local_kv))
        ):
            raise op_error(
                cls,
                f"all-to-all context degree {degree} does not divide a task's {local} heads, or its "
                f"{local_kv} KV heads neither divide nor are divided by it",
            )
        form = b.build([(shard, [h])])
        return form, [result_type(form, 0, q.shape, float_dtype(cls, q))]
