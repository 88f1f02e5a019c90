"""Token-wise projections kept on the (batch, sequence) layout, so that context parallelism can
shard them on the sequence.

GPT-2's `Conv1D` (and any projection traced through `addmm`) flattens the tokens before its
matmul: `reshape([B, S, K] -> [B·S, K])`, `matmul(·, W [K, N])`, `add(·, b [N])`,
`reshape(-> [B, S, N])`. With the sequence split over a context group a rank's rows of the
flattened tensor are not one block of B·S (they are every sample's chunk), so no form carries
the split through the reshape, and the whole MLP (and every layer after it) would run gathered.
`unflatten_tokens` rewrites each such chain into the same projection on the 3-D tokens,
`linear([B, S, K], transpose(W), b)`: the same value (x @ W + b for every token), the weight
read through a transpose that the rebuild treats as a view of the weight (`rebuild.py`)."""

from __future__ import annotations

from dataclasses import replace

from unityc.dialects.registry import canonical_attrs
from unityc.graph import Graph, Ref


def unflatten_tokens(graph: Graph) -> Graph:
    """A copy of `graph` with every flattened token-wise projection (reshape, matmul by a
    weight read only there, optional bias add, reshape back) as one `pcg.linear` on the
    (batch, sequence, features) tokens."""
    out = graph.copy()
    users = out.users()
    mapping: dict[Ref, Ref] = {}
    for nid in list(out.nodes):
        chain = _chain(out, users, nid)
        if chain is None:
            continue
        x, weight, bias, last = chain
        (view,) = out.add("pcg.transpose", [weight], perm=(1, 0))
        (linear,) = out.add("pcg.linear", [x, view, bias])
        if out.type_of(linear).shape != out.type_of((last, 0)).shape:
            raise AssertionError(f"unflatten_tokens: the projection at node {nid} changed shape")
        mapping[(last, 0)] = linear
    if not mapping:
        return graph
    out.redirect(mapping)
    out.prune()
    out.nodes = {nid: out.nodes[nid] for nid in out.topological()}
    return out


def _only_user(graph: Graph, users: dict[int, list[int]], nid: int, op: str) -> int | None:
    """The one reader of node `nid`'s only result, if it is an `op`."""
    readers = users.get(nid, [])
    if len(readers) != 1 or graph.nodes[readers[0]].op != op or (nid, 0) in graph.outputs:
        return None
    return readers[0]


def _chain(graph: Graph, users: dict[int, list[int]], nid: int) -> tuple[Ref, Ref, Ref | None, int] | None:
    """(tokens, weight, bias or None, the final reshape's node) of the chain starting at the
    reshape `nid`, or None."""
    flat = graph.nodes[nid]
    if flat.op != "pcg.reshape" or flat.operands[0] is None:
        return None
    x = flat.operands[0]
    tokens, rows = graph.type_of(x), flat.types[0]
    if (
        tokens.rank != 3
        or rows.rank != 2
        or rows.shape != (tokens.shape[0] * tokens.shape[1], tokens.shape[2])
    ):
        return None
    mm = _only_user(graph, users, nid, "pcg.matmul")
    if mm is None or graph.nodes[mm].operands[0] != (nid, 0):
        return None
    weight = graph.nodes[mm].operands[1]
    if weight is None or graph.nodes[weight[0]].op != "pcg.weight" or len(users.get(weight[0], [])) != 1:
        return None
    width = graph.type_of(weight).shape[1]
    head, bias = mm, None
    added = _only_user(graph, users, mm, "pcg.add")
    if added is not None:
        a, b = graph.nodes[added].operands
        other = b if a == (mm, 0) else a
        if other is not None and graph.type_of(other).shape == (width,) and (a == (mm, 0) or b == (mm, 0)):
            head, bias = added, other
    back = _only_user(graph, users, head, "pcg.reshape")
    if back is None or graph.nodes[back].types[0].shape != (*tokens.shape[:2], width):
        return None
    return x, weight, bias, back


def context_length(graph: Graph) -> int:
    """The sequence length context parallelism splits: that of the self-attentions that may
    split it (no dropout or soft-capping, query and key of one length), 0 if none or several."""
    lengths = set()
    for node in graph.nodes.values():
        if node.op != "pcg.attention" or node.attr("dropout") or node.attr("softcap"):
            continue
        q, k = (graph.type_of(r) for r in node.operands[:2] if r is not None)
        if q.rank == 3 and q.shape[1] == k.shape[1]:
            lengths.add(q.shape[1])
    return lengths.pop() if len(lengths) == 1 else 0


def with_context(graph: Graph, exchange: str) -> Graph:
    """A copy whose attentions that may split the sequence (`context_length`) declare their
    context-parallel exchange (`pcg.attention`'s `context`: "ring" or "all-to-all"), its
    flattened token-wise projections on the sequence (`tokens.unflatten_tokens`: GPT-2's)."""
    length = context_length(graph)
    graph = unflatten_tokens(graph)
    out = graph.copy()
    for nid, node in graph.nodes.items():
        if node.op != "pcg.attention" or node.attr("dropout") or node.attr("softcap"):
            continue
        if graph.type_of(node.operands[0]).shape[1] == length:  # type: ignore[arg-type]
            attrs = canonical_attrs(node.op, {**dict(node.attrs), "context": exchange})
            out.nodes[nid] = replace(node, attrs=attrs)
    return out
