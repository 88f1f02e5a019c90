"""Parallel-op identities on `Graph`: what lets sharding propagate between rewritten ops.

A parallelization rule wraps one op (`relu(x) => combine(relu(partition(x)))`); the identities
below then cancel what two neighbouring wraps leave between them, so a sharded tensor flows from
op to op without moving. They are the dialect's canonicalization patterns
(`dialects/canonicalization/parallel.py`) plus what those imply, applied to a `Graph`:

* inverse pairs: `combine[d, a](partition[d, b](x))` is `x` (a = b), `partition[d, b/a](x)`
  (a | b) or `combine[d, a/b](x)` (b | a); likewise `partition[d, a](combine[d, b](x))`;
  `batch(pipeline(x))` and `pipeline(batch(x))` on the same dim and degree;
* merges: `partition(partition)` (same dim), `combine(combine)`, `replicate(replicate)`,
  `reduce(reduce)` become one op with the product of the degrees;
* sources: a partition, combine or replicate of a weight, input or constant that nothing else
  reads becomes that source with the new type (a weight held sharded or in copies is loaded that
  way, with no communication); `keep` names sources that must keep their type;
* duplicates: equal parallel ops (same op, operand, attributes and view) are one op, so a
  weight two ops read (BERT's tied embedding) is replicated once, and then held in copies.

`fuse_collectives` rewrites the pairs that one collective does at once (the `fuse-collectives`
pass on a Graph): reduce then replicate is an all_reduce, reduce then partition a
reduce_scatter, combine then replicate an all_gather, combine then partition on another dim an
all_to_all; the first op must have no other reader.
"""

from __future__ import annotations

from collections.abc import Collection

from unityc.dialects.forms import FormError
from unityc.dialects.identities import Kind, fusion, identity
from unityc.graph import Graph, Node, Ref, canonical_attrs, infer_types, with_plan_of

FOLD_INTO_SOURCE = ("parallel.partition", "parallel.combine", "parallel.replicate")


def _rewrite(graph: Graph, node: Node, inner: Node, users: dict[int, list[int]], keep: Collection[int]) -> (
    tuple[str, Ref | Node] | None
):  # fmt: skip
    """What `node` (reading `inner`'s result) becomes: ("ref", tensor) to read another tensor
    instead, ("node", node) to be replaced by a new node; None if no identity applies."""
    (source,) = node.operand_refs()
    x = inner.operands[0] if inner.operands else None
    found = None if x is None else identity(node.op, dict(node.attrs), inner.op, dict(inner.attrs))
    if found is not None and x is not None and (found.kind is not Kind.MERGE or len(users[source[0]]) == 1):
        if found.kind is Kind.CANCEL:
            return "ref", x
        return "node", _built(graph, found.op, x, **found.attrs)
    if (
        node.op in FOLD_INTO_SOURCE
        and inner.is_source
        and source[0] not in keep
        and len(users[source[0]]) == 1
    ):
        return "node", with_plan_of(Node(inner.op, (), inner.attrs, node.types, hint=inner.hint), inner)
    return None


def _built(graph: Graph, op: str, x: Ref, **attrs: int) -> Node:
    """A node of `op` reading `x` (raises FormError if it does not apply)."""
    canonical = canonical_attrs(op, attrs)
    return Node(op, (x,), canonical, infer_types(op, canonical, (graph.type_of(x),)))


def simplify(graph: Graph, keep: Collection[int] = ()) -> Graph:
    """Applies the identities until none applies, then drops dead nodes (in place)."""
    _simplify_once(graph, keep)
    while _merge_duplicates(graph):
        _simplify_once(graph, keep)
    return graph


def _merge_duplicates(graph: Graph) -> bool:
    """Redirects readers of each parallel op equal to an earlier one to that one; True if any."""
    seen: dict[tuple[object, ...], int] = {}
    moves: dict[Ref, Ref] = {}
    for nid in graph.topological():
        node = graph.nodes[nid]
        if not node.op.startswith("parallel.") or len(node.operands) != 1:
            continue
        key = (node.op, node.operands, node.attrs, node.view)
        first = seen.setdefault(key, nid)
        if first != nid:
            moves[(nid, 0)] = (first, 0)
    if not moves:
        return False
    graph.redirect(moves)
    graph.prune()
    return True


def _simplify_once(graph: Graph, keep: Collection[int]) -> None:
    """One pass in topological order suffices: an identity changes a node and whom it reads,
    which can only enable identities at that node (tried again) or at its readers (visited
    later). Merging duplicates can enable more, hence the loop in `simplify`."""
    users = graph.users()
    for nid in graph.topological():
        while True:
            node = graph.nodes.get(nid)
            if node is None or not node.op.startswith("parallel.") or len(node.operands) != 1:
                break
            (source,) = node.operand_refs()
            try:
                outcome = _rewrite(graph, node, graph.nodes[source[0]], users, keep)
            except FormError:
                break
            if outcome is None:
                break
            kind, value = outcome
            if kind == "ref":
                assert isinstance(value, tuple)
                graph.redirect({(nid, 0): value})
                users = graph.prune().users()  # dead readers must not count as users
                break  # nid is now dead (or an output alias); its readers come later
            assert isinstance(value, Node)
            value = Node(value.op, value.operands, value.attrs, value.types, hint=node.hint)
            graph.nodes[nid] = with_plan_of(value, node)
            users = graph.prune().users()
    graph.prune()


def reduce_loss(graph: Graph) -> Graph:
    """The loss (the first output) as whole values: partial sums reduced (in place)."""
    if not graph.outputs:
        return graph
    loss = graph.outputs[0]
    t = graph.type_of(loss)
    if t.sum_degree > 1:
        (total,) = graph.add("parallel.reduce", [loss], degree=t.sum_degree)
        graph.outputs = (total, *graph.outputs[1:])
    return graph


def fuse_collectives(graph: Graph) -> Graph:
    """A copy of `graph` with pairs of parallel ops fused into collectives."""
    out = graph.copy()
    users = out.users()
    for nid in out.topological():
        node = out.nodes.get(nid)
        if node is None or node.op not in ("parallel.replicate", "parallel.partition"):
            continue
        (source,) = node.operand_refs()
        first = out.nodes[source[0]]
        if len(users[source[0]]) != 1 or source in out.outputs:
            continue
        fused = fusion(first.op, dict(first.attrs), node.op, dict(node.attrs))
        if fused is None:
            continue
        x = first.operands[0]
        assert x is not None
        new = _built(out, fused[0], x, **fused[1])
        new = Node(new.op, new.operands, new.attrs, new.types, node.plan, node.hint)
        out.nodes[nid] = with_plan_of(new, node)
        del out.nodes[source[0]]
    return out
