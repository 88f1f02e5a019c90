"""Rebuilding a graph op by op with chosen parallel forms (what the baselines are made of).

`rebuild(graph, propose)` walks the graph in topological order. For each op, `propose` lists
operand types in order of preference; the first the op accepts (by the dialect's inference) is
used: each operand is brought to its type by parallel ops (`graph.reshard`), and a weight, input or
constant read for the first time simply takes the type (it is loaded that way). An op none of
whose proposals applies runs on unsharded operands. Parallel ops of the input graph are dropped
(they do not change the value; readers convert from whatever their operand holds).

A transpose of a weight read only by it (a Conv1D weight read in Linear layout, GPT-2's
`transpose(c_attn.weight[:, 0:E])` as the attention's query weight) is a view of that weight:
it is placed when first read, the weight loaded sharded so that the transpose gives the type
its reader wants (its reader sees a weight), as a weight read directly would be.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache

from unityc.dialects.forms import FormError
from unityc.dialects.node import batch_size, is_batch_splat
from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Node, Ref, canonical_attrs, infer_types, with_plan_of
from unityc.graph.reshard import reshard

Proposal = tuple[TensorType | None, ...]
RESHAPING = ("parallel.pipeline", "parallel.batch", "parallel.sum_concat")
"""Parallel ops that change the logical value or shape (others leave the value as it is)."""


@dataclass(frozen=True)
class Operand:
    """What `propose` knows of one operand."""

    logical: TensorType | None
    """Its unsharded type (None: an absent optional operand)."""
    current: TensorType | None
    """Its type now (None: a source not read yet, free to take any type)."""
    source: str | None
    """The source op reading it ('pcg.weight', 'pcg.input', 'pcg.constant'), or None."""
    batched: bool = False
    """Whether its dim 0 runs over the batch (a multiple of the batch size, from an input)."""


Propose = Callable[[int, Node, Sequence[Operand]], Sequence[Proposal]]
"""(node id, node, its operands) -> operand types in order of preference."""


@lru_cache(maxsize=100_000)
def unsharded(t: TensorType) -> TensorType:
    return TensorType(t.shape, t.element_type)


def with_degrees(
    t: TensorType, shard: dict[int, int] | None = None, copy: int = 1, sum_: int = 1
) -> TensorType | None:
    """`t`'s shape with these degrees, or None if a degree does not divide its dim."""
    return _with_degrees(t, tuple(sorted((shard or {}).items())), copy, sum_)


@lru_cache(maxsize=100_000)
def _with_degrees(
    t: TensorType, shard: tuple[tuple[int, int], ...], copy: int, sum_: int
) -> TensorType | None:
    degrees = [1] * t.rank
    for d, k in shard:
        if not 0 <= d < t.rank or t.shape[d] % k:
            return None
        degrees[d] = k
    return TensorType(t.shape, t.element_type, degrees, sum_, copy)


def reachable(operand: Operand, want: TensorType | None) -> bool:
    """Whether parallel ops can bring the operand to `want` (copies cannot be dropped)."""
    have = operand.current
    if have is None or want is None:
        return True
    return want.copy_degree % have.copy_degree == 0


def result_types(node: Node, types: Proposal) -> tuple[TensorType, ...] | None:
    """The op's result types on operands of these types, or None if it does not accept them."""
    try:
        return tuple(infer_types(node.op, node.attrs, types))
    except FormError:
        return None


def accepts(node: Node, types: Proposal) -> bool:
    return result_types(node, types) is not None


def rebuild(graph: Graph, propose: Propose, keep: Collection[int] = ()) -> Graph:
    """`graph` with every op in the first proposed form it accepts (see the module docstring).
    Sources in `keep` keep their type (they are converted for their readers instead)."""
    out = Graph(
        module_attrs=dict(graph.module_attrs),
        next_id=graph.next_id,
        function_attrs=graph.kept_function_attrs(),
    )  # sources keep their ids
    refs: dict[Ref, Ref] = {}
    users = graph.users()
    batched = batch_tensors(graph)
    views = weight_views(graph, users, keep)
    for nid in graph.topological():
        node = graph.nodes[nid]
        if node.is_source or nid in views:  # a view: placed by its first reader
            continue
        if node.op.startswith("parallel.") and node.op not in RESHAPING:  # same value: readers convert
            (read,) = node.operand_refs()
            if read not in refs:
                source = graph.nodes[read[0]]
                again = Node(source.op, (), source.attrs, source.types, hint=source.hint)
                out.nodes[read[0]] = with_plan_of(again, source)
                refs[read] = read
            refs[(nid, 0)] = refs[read]
            continue
        operands = [_operand(graph, out, refs, r, batched, keep, views) for r in node.operands]
        chosen: Proposal | None = None
        for proposal in propose(nid, node, operands):
            if len(proposal) != len(operands) or not all(map(reachable, operands, proposal)):
                continue
            if accepts(node, proposal):
                chosen = proposal
                break
        if chosen is None:  # unsharded, as many copies as the most replicated operand has
            copies = math.lcm(*(o.current.copy_degree for o in operands if o.current is not None))
            chosen = tuple(
                None
                if o.logical is None
                else TensorType(o.logical.shape, o.logical.element_type, None, 1, copies)
                for o in operands
            )
        args: list[Ref | None] = []
        for r, want in zip(node.operands, chosen, strict=True):
            if r is None or want is None:
                args.append(None)
            elif r not in refs and r[0] in views:
                refs[r] = _place_view(graph, out, r[0], want)
                args.append(reshard(out, refs[r], want))
            elif r not in refs:  # a source read for the first time (by its only reader) takes its type
                source = graph.nodes[r[0]]
                own = want if len(users[r[0]]) == 1 and r[0] not in keep else source.types[0]
                loaded = Node(source.op, (), source.attrs, (own,), hint=source.hint)
                out.nodes[r[0]] = with_plan_of(loaded, source)  # same id
                refs[r] = r
                args.append(reshard(out, r, want))
            else:
                args.append(reshard(out, refs[r], want))
        canonical = canonical_attrs(node.op, dict(node.attrs))
        types = infer_types(node.op, canonical, tuple(None if a is None else out.type_of(a) for a in args))
        rebuilt = with_plan_of(Node(node.op, tuple(args), canonical, types), node)
        for i, ref in enumerate(out.add_node(rebuilt)):
            refs[(nid, i)] = ref
    for r in graph.outputs:
        if r not in refs:  # an output that is a source
            out.nodes[r[0]] = graph.nodes[r[0]]
            refs[r] = r
    out.outputs = tuple(refs[r] for r in graph.outputs)
    return out


def weight_views(graph: Graph, users: dict[int, list[int]], keep: Collection[int]) -> set[int]:
    """Transposes of a weight read by nothing else (see the module docstring), not outputs."""
    outputs = {r[0] for r in graph.outputs}
    found = set()
    for nid, node in graph.nodes.items():
        if node.op != "pcg.transpose" or nid in outputs or not users[nid]:
            continue
        (src,) = node.operand_refs()
        if graph.nodes[src[0]].op == "pcg.weight" and users[src[0]] == [nid] and src[0] not in keep:
            found.add(nid)
    return found


def _place_view(graph: Graph, out: Graph, nid: int, want: TensorType) -> Ref:
    """The view `nid` (a transpose of a weight) placed for a reader wanting `want`: the weight
    loaded with the degrees the transpose moves to `want`'s (partial sums are made after)."""
    node = graph.nodes[nid]
    ((src, _),) = node.operand_refs()
    source = graph.nodes[src]
    t = source.types[0]
    perm = list(node.attr("perm"))
    shard = [1] * t.rank
    if want.sum_degree == 1:
        for d, p in enumerate(perm):
            shard[p] = want.shard[d]
    own = TensorType(t.shape, t.element_type, shard, 1, want.copy_degree)
    out.nodes[src] = with_plan_of(Node(source.op, (), source.attrs, (own,), hint=source.hint), source)
    canonical = canonical_attrs(node.op, dict(node.attrs))
    types = infer_types(node.op, canonical, (own,))
    (ref,) = out.add_node(with_plan_of(Node(node.op, ((src, 0),), canonical, types), node))
    return ref


def _operand(
    graph: Graph,
    out: Graph,
    refs: dict[Ref, Ref],
    r: Ref | None,
    batched: set[Ref],
    keep: Collection[int],
    views: Collection[int] = (),
) -> Operand:
    if r is None:
        return Operand(None, None, None)
    node = graph.nodes[r[0]]
    if r[0] in views and r not in refs:  # a weight's view not placed yet: free, like the weight
        return Operand(unsharded(graph.type_of(r)), None, "pcg.weight")
    current = out.type_of(refs[r]) if r in refs else graph.type_of(r) if r[0] in keep else None
    return Operand(unsharded(graph.type_of(r)), current, node.op if node.is_source else None, r in batched)


def batch_tensors(graph: Graph) -> set[Ref]:
    """Tensors whose dim 0 runs over the batch: inputs whose dim 0 is the batch size (that of
    the first input), splat constants of that dim 0 (`is_batch_splat`: taken as replicated, ViT's
    broadcast class token made data parallelism gather the batch for the concat after it), and
    results of ops reading one whose dim 0 is a multiple of it."""
    order = graph.topological()
    batch = batch_size(graph.nodes[n] for n in order)
    if batch is None:
        return set()
    found: set[Ref] = set()
    for nid in order:
        node = graph.nodes[nid]
        if node.op in ("pcg.input", "pcg.constant"):
            t = node.types[0]
            if (node.op == "pcg.input" and t.rank and t.shape[0] == batch) or is_batch_splat(node, batch):
                found.add((nid, 0))
            continue
        if node.is_source or not any(r in found for r in node.operand_refs()):
            continue
        found.update((nid, i) for i, t in enumerate(node.types) if t.rank and t.shape[0] % batch == 0)
    return found
