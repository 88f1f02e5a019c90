"""Mixture-of-experts ops of the `pcg` dialect: top-k selection, gathering along a dim by run-time
indices, and the routed experts' feed-forward (dropless, static shapes).

A router is ordinary ops around `pcg.topk` (the indices: not differentiated) and `pcg.take`
(the selected scores: differentiated); `pcg.experts` then applies, to every token, the experts
its indices name, weighted by its gate values. Every shape is static: how many tokens each
expert receives is known only when the program runs, inside the experts kernel (a sort by
expert, one matmul per contiguous slice), never in the IR.
"""

from __future__ import annotations

from typing import Any

from xdsl.dialects.builtin import i64
from xdsl.ir import Attribute
from xdsl.irdl import operand_def, result_def

from unityc.dialects.forms import Form
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg_types import (
    PcgOp,
    TensorType,
    check_indices,
    float_dtype,
    form_builder,
    normalize_dim,
    op_error,
    result_type,
    same_dims,
)
from unityc.dialects.syntax import Kind, op_definition

EXPERT_FACTOR = "e"
"""The factor of `pcg.experts`'s expert-parallel form: the tasks differing only in it form one
expert-parallel group, which exchanges its tokens by all-to-all (`runtime/experts.py`)."""

EXPERT_ACTIVATIONS = ("silu",)
"""Activations of the gated experts `pcg.experts` computes: down(act(gate x) * up x)."""


@op_definition
class TopkOp(PcgOp, fam.Routing, fam.NotDifferentiable, fam.SavesNothing):
    """The indices (i64, sorted by descending value) of the `k` largest elements along the last
    dim. With `groups` G > 1 the selection is group-limited, as DeepSeek-V3 routes: the last dim
    is G equal groups, each scored by the sum of its `group_top` largest elements; only the
    `group_k` best groups are candidates. Leading dims shard; the last dim stays whole and
    partial sums are refused (a top-k is not linear)."""

    name = "pcg.topk"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (
        ("k", Kind.INT, False),
        ("groups", Kind.INT, True),
        ("group_k", Kind.INT, True),
        ("group_top", Kind.INT, True),
    )

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        float_dtype(cls, x)
        if x.rank < 1:
            raise op_error(cls, "needs at least one dimension")
        n, k = x.shape[-1], attrs["k"]
        groups = attrs.get("groups") or 1
        group_k = attrs.get("group_k") or groups
        group_top = attrs.get("group_top") or 1
        if n % groups or not 1 <= group_k <= groups:
            raise op_error(cls, f"{groups} groups of which {group_k} are kept do not divide {n} elements")
        if not 1 <= group_top <= n // groups:
            raise op_error(cls, f"group_top {group_top} is not within a group of {n // groups}")
        if not 1 <= k <= group_k * (n // groups):
            raise op_error(cls, f"k {k} is not within the {group_k * (n // groups)} candidates")
        b = form_builder(cls, ["input"], operands)
        b.forbid(0, x.rank - 1, "a top-k needs the whole dimension")
        form = b.build([(same_dims(b, 0, x.rank, skip=[x.rank - 1]), [])])
        return form, [result_type(form, 0, (*x.shape[:-1], k), i64)]


@op_definition
class TakeOp(PcgOp, fam.Routing, fam.DataMovement):
    """torch.gather: result[..., i, ...] = input[..., index[..., i, ...], ...] along `dim`, the
    indices a run-time tensor (the router's top-k). index has the input's shape but for `dim`.
    Other dims shard alike; the input's partial sums pass through (it is linear)."""

    name = "pcg.take"
    input = operand_def(TensorType)
    index = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("dim", Kind.INT, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, index = operands
        check_indices(cls, index, "index")
        dim = normalize_dim(cls, attrs["dim"], x.rank)
        if index.rank != x.rank or any(index.shape[d] != x.shape[d] for d in range(x.rank) if d != dim):
            raise op_error(
                cls, f"index {list(index.shape)} does not fit input {list(x.shape)} but for dim {dim}"
            )
        b = form_builder(cls, ["input", "index"], operands)
        b.forbid(0, dim, "gathered elements would not be shards of the result")
        b.forbid(1, dim, "each task needs the whole input row its indices pick from")
        shard = [[b.shared_dim(f"d{d}", [(0, d), (1, d)])] if d != dim else [] for d in range(x.rank)]
        form = b.build([(shard, [b.operand_sum("s", 0)])])
        return form, [result_type(form, 0, index.shape, float_dtype(cls, x))]


@op_definition
class ExpertsOp(PcgOp, fam.Routing, fam.MatmulRate):
    """The routed experts of a mixture-of-experts layer, dropless:
    result[t] = sum_j weights[t, j] * down_e(act(gate_e x[t]) * up_e x[t]), e = indices[t, j],
    over the `k` experts each token is routed to (Hugging Face's experts layout:
    gate_up [E, 2I, H] = gate rows then up rows, down [E, H, I]). Equivalently the dense
    sum over all E experts with a gate of zero for the unselected ones, which is how the
    reference interpreter computes it; the generated program sorts tokens by expert.

    x [T, H], indices [T, k] (i64), weights [T, k]. Tokens shard (data parallelism, factor "t");
    the expert weights are copied. Expert parallelism (factor "e", `EXPERT_FACTOR`): gate_up and
    down split on the expert dim E over "e", the tokens over "t" x "e" (row-major), so the e
    tasks of one token group t hold the E/e expert slices each and are its expert-parallel group
    (Megatron-Core's EP carved out of the data-parallel ranks); a weight slice's copies, over
    "t", are its expert-data-parallel group. Each task's result is still that of all E experts
    on its own tokens: its group exchanges the routed rows by all-to-all (dispatch and combine).
    `num_experts` is E."""

    name = "pcg.experts"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    weights = operand_def(TensorType)
    gate_up = operand_def(TensorType)
    down = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("activation", Kind.STR, False),)
    AUTOCAST = "bf16"

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, ids, w, gate_up, down = operands
        dtype = float_dtype(cls, x)
        check_indices(cls, ids, "indices")
        float_dtype(cls, w)
        if attrs["activation"] not in EXPERT_ACTIVATIONS:
            raise op_error(cls, f"activation must be one of {', '.join(EXPERT_ACTIVATIONS)}")
        if x.rank != 2 or ids.rank != 2 or w.shape != ids.shape or ids.shape[0] != x.shape[0]:
            raise op_error(cls, "input must be [tokens, hidden], indices and weights [tokens, k]")
        hidden = x.shape[1]
        if gate_up.rank != 3 or gate_up.shape[1] % 2 or gate_up.shape[2] != hidden:
            raise op_error(cls, f"gate_up must be [experts, 2 x ffn, {hidden}]")
        experts = gate_up.shape[0]
        if down.shape != (experts, hidden, gate_up.shape[1] // 2):
            raise op_error(cls, f"down must be [{experts}, {hidden}, {gate_up.shape[1] // 2}]")
        if ids.shape[1] > experts:
            raise op_error(cls, f"{ids.shape[1]} experts per token is more than the {experts} experts")
        b = form_builder(cls, ["input", "indices", "weights", "gate_up", "down"], operands)
        for o, rank in ((1, 2), (2, 2), (3, 3), (4, 3)):
            for d in range(rank):
                if not (o in (1, 2) and d == 0) and not (o in (3, 4) and d == 0):
                    b.forbid(o, d, "each task routes its whole tokens over every expert")
        b.forbid(0, 1, "each expert reads the whole hidden vector")
        token_uses = [(0, 0), (1, 0), (2, 0)]
        if gate_up.shard[0] == down.shard[0] == 1:
            shard = [b.shared_dim("t", token_uses)]
        else:  # expert parallelism: the experts split over "e", the tokens over "t" x "e"
            degree = gate_up.shard[0]
            if experts % degree:
                raise op_error(cls, f"expert shard degree {degree} does not divide the {experts} experts")
            shard = list(b.split_dim("t", EXPERT_FACTOR, token_uses, [(3, 0), (4, 0)]))
        form = b.build([([shard, []], [])])
        return form, [result_type(form, 0, x.shape, dtype)]

    @property
    def num_experts(self) -> int:
        t = self.operands[3].type
        assert isinstance(t, TensorType)
        return t.shape[0]

    @property
    def top_k(self) -> int:
        t = self.operands[1].type
        assert isinstance(t, TensorType)
        return t.shape[1]
