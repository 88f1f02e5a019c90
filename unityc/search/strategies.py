"""Whole-graph parallelization strategies built op by op (`rebuild.py`): the baselines' plans,
and the seeds the substitution search starts from besides the unparallelized graph.

* data parallel (`data_parallel_graph`): every op that can runs on its batch (dim 0) sharded n
  ways, its weights replicated; batch norms are synchronized (spelled out so that their batch
  statistics are all-reduced, as PyTorch's SyncBatchNorm does: the dialect's batch norm is
  exact, so it cannot shard the batch itself); an op that cannot shard its batch takes the
  first other n-way form it accepts (e.g. channels), else runs unsharded;
* Megatron (`megatron_graph`): tensor parallelism t within a node, data parallelism d across:
  linears alternate column- and row-parallel (a row-parallel linear follows one whose output is
  sharded on its last dim), attention is split by heads, element-wise ops keep their input's
  sharding, everything else is data parallel and replicated in the tensor-parallel group.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Node
from unityc.machine.spec import Machine
from unityc.search.rebuild import Operand, Proposal, rebuild, with_degrees

ELEMENTWISE = (
    "pcg.relu", "pcg.gelu", "pcg.sigmoid", "pcg.tanh", "pcg.exp", "pcg.sqrt", "pcg.neg", "pcg.scalar_mul",
    "pcg.scalar_add", "pcg.pow", "pcg.dropout", "pcg.identity", "pcg.cast",
)  # fmt: skip


def _batch_forms(operands: Sequence[Operand], n: int) -> list[Proposal]:
    """Batch-sharded activations and inputs, replicated weights and constants; then, for each
    other dim, activations sharded there and weights sharded on their dim 0 or replicated."""
    proposals: list[Proposal] = []
    main = next((o.logical for o in operands if o.logical is not None and o.batched), None)
    dims = range(main.rank) if main is not None else range(1)
    for d in dims:
        for weights in ("copy", "dim0"):
            proposal: list[TensorType | None] = []
            for o in operands:
                if o.logical is None:
                    proposal.append(None)
                    continue
                activation = o.batched and o.logical.rank > d
                if activation:
                    proposal.append(with_degrees(o.logical, {d: n}))  # None (does not divide) drops it
                elif weights == "dim0" and d > 0:
                    proposal.append(with_degrees(o.logical, {0: n}))
                else:
                    proposal.append(with_degrees(o.logical, copy=n))
            if all(p is not None or o.logical is None for p, o in zip(proposal, operands, strict=True)):
                proposals.append(tuple(proposal))
            if d == 0:
                break
    return proposals


def data_parallel_graph(graph: Graph, n: int, keep: Collection[int] = ()) -> Graph:
    """Data parallel over n devices, batch norms synchronized (`sync_batch_norm`)."""
    return rebuild(sync_batch_norm(graph), lambda node, operands: _batch_forms(operands, n), keep)


def _megatron_forms(node: Node, operands: Sequence[Operand], d: int, t: int) -> list[Proposal]:
    x = operands[0] if operands else None
    sharded_last = (
        x is not None and x.current is not None and x.current.rank > 1 and x.current.shard[-1] == t and t > 1
    )

    def act(o: Operand, extra: dict[int, int] | None = None, copy: int = 1) -> TensorType | None:
        assert o.logical is not None
        if not o.batched:
            return with_degrees(o.logical, extra, copy * d)
        shard = {0: d} if d > 1 else {}
        shard.update(extra or {})
        return with_degrees(o.logical, shard, copy)

    proposals: list[Proposal] = []
    if node.op == "pcg.linear" and x is not None and x.logical is not None:
        w, bias = operands[1], operands[2] if len(operands) > 2 else Operand(None, None, None)
        assert w.logical is not None
        last = x.logical.rank - 1
        if sharded_last:  # row-parallel: partial sums, the bias added once
            proposals.append(
                (
                    act(x, {last: t}),
                    with_degrees(w.logical, {1: t}, d),
                    None if bias.logical is None else with_degrees(bias.logical, copy=d * t),
                )
            )
        proposals.append(  # column-parallel
            (
                act(x, copy=t),
                with_degrees(w.logical, {0: t}, d),
                None if bias.logical is None else with_degrees(bias.logical, {0: t}, d),
            )
        )
    elif node.op == "pcg.attention":
        heads: list[TensorType | None] = []
        for i, o in enumerate(operands):
            if o.logical is None:
                heads.append(None)
            elif i < 3:
                heads.append(act(o, copy=t))
            elif i in (3, 4, 5):
                heads.append(with_degrees(o.logical, {0: t}, d))
            elif i == 6:
                heads.append(with_degrees(o.logical, {1: t}, d))
            elif i in (7, 8, 9):
                heads.append(with_degrees(o.logical, {0: t}, d))
            elif i == 10:
                heads.append(with_degrees(o.logical, copy=d * t))
            else:  # the mask: batch-sharded if it has a batch dim, else replicated
                heads.append(
                    act(o, copy=t) if o.logical.shape[0] > 1 else with_degrees(o.logical, copy=d * t)
                )
        proposals.append(tuple(heads))
    elif node.op in ELEMENTWISE and sharded_last and x is not None:
        proposals.append((act(x, {x.current.rank - 1: t}),))  # type: ignore[union-attr]
    replicated: list[TensorType | None] = []
    for o in operands:
        if o.logical is None:
            replicated.append(None)
        elif o.batched or o.source is None:
            replicated.append(act(o, copy=t))
        else:
            replicated.append(with_degrees(o.logical, copy=d * t))
    proposals.append(tuple(replicated))
    proposals.extend(_batch_forms(operands, d * t))
    return [
        p
        for p in proposals
        if all(q is not None or o.logical is None for q, o in zip(p, operands, strict=True))
    ]


def megatron_graph(graph: Graph, d: int, t: int, keep: Collection[int] = ()) -> Graph:
    """Tensor parallel t x data parallel d, batch norms synchronized (`sync_batch_norm`)."""
    return rebuild(sync_batch_norm(graph), lambda node, operands: _megatron_forms(node, operands, d, t), keep)


def tensor_degrees(machine: Machine) -> list[int]:
    """Tensor-parallel degrees within a node (dividing both a node and the machine), largest first."""
    per_node = math.gcd(machine.nodes[0].num_devices, machine.num_devices)
    return [k for k in range(per_node, 1, -1) if per_node % k == 0]


def sync_batch_norm(graph: Graph) -> Graph:
    """A copy where every training batch norm is spelled out in ops that may shard the batch
    (PyTorch's SyncBatchNorm): mean = reduce_mean(x), d = x - mean,
    var = reduce_mean(d * d), y = d / sqrt(var + eps) * weight + bias, means over every dim but
    the channels (dim 1). A batch-sharded mean is a partial sum; its all-reduce moves only C
    values, where sharding the channels instead would move every activation twice."""
    out = graph.copy()
    for nid in graph.topological():
        node = out.nodes[nid]
        if node.op != "pcg.batch_norm":
            continue
        x, w, b = node.operands
        assert x is not None
        t = out.type_of(x)
        dims = [d for d in range(t.rank) if d != 1]
        stat_shape = [1 if d != 1 else t.shape[1] for d in range(t.rank)]
        (mean,) = out.add("pcg.reduce", [x], kind="mean", dims=dims, keepdim=True)
        (d,) = out.add("pcg.sub", [x, mean])
        (sq,) = out.add("pcg.mul", [d, d])
        (var,) = out.add("pcg.reduce", [sq], kind="mean", dims=dims, keepdim=True)
        (shifted,) = out.add("pcg.scalar_add", [var], value=node.attr("eps"))
        (std,) = out.add("pcg.sqrt", [shifted])
        (y,) = out.add("pcg.div", [d, std])
        if w is not None:
            (scale,) = out.add("pcg.reshape", [w], shape=stat_shape)
            (y,) = out.add("pcg.mul", [y, scale])
        if b is not None:
            (shift,) = out.add("pcg.reshape", [b], shape=stat_shape)
            (y,) = out.add("pcg.add", [y, shift])
        out.redirect({(nid, 0): y})
    return out.prune()
