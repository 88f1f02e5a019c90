"""A hand-set context-parallel plan of an imported model (issue 41, step 3): the token stream
split over the sequence on `n` ranks from the embedding on (norms, MLP and residuals on sequence
shards, their weights copied, so the weights' gradients are all-reduced over the context group),
every attention split over the sequence by its declared exchange (the ring or the all-to-all),
with cos/sin and the mask's rows partitioned alike; the mask chain, the labels and the loss
(after the shifted logits are gathered) on rank 0."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from plans import PlanBuilder, Strategy

from unityc.dialects.registry import canonical_attrs
from unityc.graph import Graph, Node, Ref


def with_exchange(base: Graph, exchange: str) -> Graph:
    """`base` with every attention declaring `exchange` (the context form's `context`)."""
    g = base.copy()
    for nid, node in g.nodes.items():
        if node.op == "pcg.attention":
            g.nodes[nid] = replace(
                node, attrs=canonical_attrs(node.op, {**dict(node.attrs), "context": exchange})
            )
    return g


def context_parallel(n: int) -> Strategy:
    def sources(node: Node) -> tuple[Sequence[int] | None, int]:
        if node.op == "pcg.input" and str(node.attr("key", "")) == "input_ids":
            return [1, n], 1
        if node.op == "pcg.weight":
            return None, n
        return None, 1  # the mask chain, cos/sin, labels: whole, on rank 0

    def operands(b: PlanBuilder, node: Node, refs: list[Ref | None]) -> list[Ref | None]:
        if node.op != "pcg.attention":
            return refs
        out = list(refs)
        for i in (11, 12, 13):  # mask rows, cos and sin at each shard's positions
            if i < len(out) and out[i] is not None:
                t = b.type_of(out[i])  # type: ignore[arg-type]
                if t.shape[2] > 1:
                    out[i] = b.reshard(out[i], [1, 1, n, 1])  # type: ignore[arg-type]
        return out

    return Strategy(n, sources=sources, operands=operands)
