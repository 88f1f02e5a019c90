"""Bringing a tensor of a `Graph` to another parallel type by parallel ops: the one re-shard loop
(the baselines' rebuild converts operands with it, the graph splitter brings a segment's output
to its boundary type)."""

from __future__ import annotations

from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Ref


def reshard(graph: Graph, ref: Ref, want: TensorType) -> Ref:
    """Adds the parallel ops that take `ref` to type `want`: partial sums reduced, then shard
    degrees combined (all of one, or down to a divisor of the wanted degree) and partitioned dim
    by dim, then copies replicated. ValueError if copies would be dropped or `want` is not
    reached; FormError if an op does not apply."""
    t = graph.type_of(ref)
    if t == want:
        return ref
    x = ref
    if t.copy_degree > want.copy_degree or want.copy_degree % t.copy_degree:
        raise ValueError(f"cannot bring {t} to {want}: copies cannot be dropped")
    if t.sum_degree > 1:
        (x,) = graph.add("parallel.reduce", [x], degree=t.sum_degree)
    for d, (have, need) in enumerate(zip(t.shard, want.shard, strict=True)):
        if have > 1 and have != need and need % have:  # combine (all, or down to a divisor of need)
            step = have // need if have % need == 0 else have
            (x,) = graph.add("parallel.combine", [x], dim=d, degree=step)
    for d, need in enumerate(want.shard):
        have = graph.type_of(x).shard[d]
        if need > have:
            (x,) = graph.add("parallel.partition", [x], dim=d, degree=need // have)
    copies = want.copy_degree // graph.type_of(x).copy_degree
    if copies > 1:
        (x,) = graph.add("parallel.replicate", [x], degree=copies)
    if graph.type_of(x) != want:
        raise ValueError(f"cannot bring {t} to {want}")
    return x
