"""Candidate pairs from fingerprint buckets, and the cheap prunings TASO applies to them.

Graphs with equal fingerprints go into one bucket; every pair in a bucket is a candidate
(a rule from one side to the other). Before any rule is known, pairs are dropped when:
- they read *different input variables* (a rule must bind the same tensors on both sides);
- they are *trivial* (the same graph);
- they share a *common subgraph*: an identical op on identical inputs on both sides (TASO's
  common-subgraph pruning: the pair follows from a smaller one with that op as an input),
  unless it is an output of one side only;
- *identity in context*: a side wraps a tensor in ops that are the identity together
  (`add(combine(partition(y)), x)`, `combine(partition(relu(x)))`): the pair is an instance of
  a rule with a bare variable side (`combine(partition(p)) => p`) in context, unless it is that
  rule itself;
- they are *congruent*: every output is made by the same op with the same attributes on both
  sides from operands that are equal (equal fingerprints), so the pair follows from the smaller
  pairs of operands (the outer op is context; smaller pairs are decided first);
- a side reads an op's result twice (a *shared subterm*, `add(relu(x), relu(x))`): such a rule
  is a special case of one with distinct operands, which needs more ops than the enumeration
  has, and it matches only graphs shared just so (our heuristic, not TASO's).
What is left is pruned by the rules it is implied by (`prune.py`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from unityc.graph import Graph, Ref
from unityc.graph.evaluate import evaluate, random_pieces
from unityc.interpreter.pieces import CopiesDiffer, assemble
from unityc.rewrites.enumeration import Enumerated


@dataclass
class PairCounts:
    buckets: int = 0
    multi_buckets: int = 0
    graphs_in_multi: int = 0
    pairs: int = 0
    different_inputs: int = 0
    trivial: int = 0
    common_subgraph: int = 0
    identity_in_context: int = 0
    shared_subterm: int = 0
    congruent: int = 0
    kept: int = 0


@dataclass(frozen=True)
class Pair:
    a: int
    b: int
    """Indices into the bucketed graph list; a's graph is no larger than b's."""


@dataclass
class Buckets:
    graphs: list[Enumerated]
    """Every graph in a bucket of two or more."""
    bucket_of: list[int]
    counts: PairCounts = field(default_factory=PairCounts)
    op_hashes: list[frozenset[int]] = field(default_factory=list)
    output_hashes: list[frozenset[int]] = field(default_factory=list)
    shared: list[bool] = field(default_factory=list)
    wrapped: list[Ref | None] = field(default_factory=list)
    """A tensor each graph wraps in an identity (see `identity_wrapper`), or None."""
    """Whether the graph reads an op's result twice (counting its outputs as reads)."""
    shapes: list[int] = field(default_factory=list)
    """Structural hash of each graph (its outputs in fingerprint order)."""


def bucket(graphs: Sequence[Enumerated]) -> Buckets:
    """Graphs grouped by fingerprint; only buckets with at least two graphs are kept."""
    by_print: dict[tuple, list[Enumerated]] = defaultdict(list)
    for g in graphs:
        by_print[g.fingerprint].append(g)
    kept: list[Enumerated] = []
    bucket_of: list[int] = []
    counts = PairCounts(buckets=len(by_print))
    for members in by_print.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda g: g.n_ops)
        for g in members:
            kept.append(g)
            bucket_of.append(counts.multi_buckets)
        counts.multi_buckets += 1
        counts.graphs_in_multi += len(members)
    result = Buckets(kept, bucket_of, counts)
    for g in kept:
        hashes = g.graph.node_hashes()
        result.op_hashes.append(frozenset(h for nid, h in hashes.items() if not g.graph.nodes[nid].is_source))
        result.output_hashes.append(frozenset(hashes[r[0]] for r in g.graph.outputs))
        result.shared.append(_reads_twice(g))
        result.wrapped.append(identity_wrapper(g))
        result.shapes.append(g.graph.structural_hash())
    return result


def members(buckets: Buckets) -> Iterator[list[int]]:
    """The graph indices of each bucket."""
    start = 0
    for i in range(1, len(buckets.graphs) + 1):
        if i == len(buckets.graphs) or buckets.bucket_of[i] != buckets.bucket_of[start]:
            yield list(range(start, i))
            start = i


def candidate_pairs(buckets: Buckets) -> tuple[list[Pair], list[Pair]]:
    """The pairs within buckets that survive the cheap prunings, and the congruent ones (they
    connect their graphs for `prune.py`). Common-subgraph pairs connect nothing: the smaller
    pair they follow from may be the very rule to be found (add(p, y) vs add(y, p) with a
    common p is commutativity). Counted in `buckets.counts`."""
    counts = buckets.counts
    kept: list[Pair] = []
    implied: list[Pair] = []
    for group in members(buckets):
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                counts.pairs += 1
                reason = _pruned(buckets, a, b)
                if reason is None:
                    kept.append(Pair(a, b))
                    continue
                setattr(counts, reason, getattr(counts, reason) + 1)
                if reason == "congruent" and _invertible_congruence(buckets.graphs[a], buckets.graphs[b]):
                    implied.append(Pair(a, b))
    counts.kept = len(kept)
    return kept, implied


def _pruned(buckets: Buckets, a: int, b: int) -> str | None:
    ga, gb = buckets.graphs[a], buckets.graphs[b]
    if ga.inputs != gb.inputs:
        return "different_inputs"
    if buckets.shapes[a] == buckets.shapes[b]:
        return "trivial"
    if buckets.shared[a] or buckets.shared[b]:
        return "shared_subterm"
    if _common_subgraph(buckets, a, b):
        return "common_subgraph"
    if _identity_in_context(buckets, a, b):
        return "identity_in_context"
    if congruent(ga, gb):
        return "congruent"
    return None


def _reads_twice(g: Enumerated) -> bool:
    reads = [r for n in g.graph.nodes.values() for r in n.operand_refs()] + list(g.graph.outputs)
    op_reads = [r for r in reads if not g.graph.nodes[r[0]].is_source]
    return len(op_reads) != len(set(op_reads))


def _invertible_congruence(a: Enumerated, b: Enumerated) -> bool:
    """Whether the operand pairs a congruence rests on have ops on both sides: x against
    combine(partition(x)) rests on a rule with a bare variable, which the search cannot apply
    backwards, so it connects nothing (else relu(x) => combine(relu(partition(x))) would be
    implied by relu(combine(y)) => combine(relu(y)))."""
    for ra, rb in zip(a.graph.outputs, b.graph.outputs, strict=True):
        na, nb = a.graph.nodes[ra[0]], b.graph.nodes[rb[0]]
        for oa, ob in zip(na.operands, nb.operands, strict=True):
            if oa is None or ob is None or a.prints[oa] != b.prints[ob]:
                continue
            bare_a, bare_b = a.graph.nodes[oa[0]].is_source, b.graph.nodes[ob[0]].is_source
            if bare_a != bare_b:
                return False
    return True


def _common_subgraph(buckets: Buckets, a: int, b: int) -> bool:
    """An op node on both sides, either inside both or an output of both. One that is an
    output of one side only does not count: made a fresh input it would give `f(p) = p`, not a
    smaller rule (relu(relu(x)) = relu(x) shares relu(x) and is idempotence itself)."""
    outs_a, outs_b = buckets.output_hashes[a], buckets.output_hashes[b]
    return any((h in outs_a) == (h in outs_b) for h in buckets.op_hashes[a] & buckets.op_hashes[b])


def identity_wrapper(g: Enumerated) -> Ref | None:
    """A tensor the graph wraps in ops that are the identity together (combine(partition(p)),
    transpose(transpose(p)), ...): a node with the value and type of a tensor it depends on,
    also on a fresh random value of that tensor (relu(relu(p)) = relu(p) holds only because p
    is a relu). Returns the wrapped tensor, or None."""
    graph = g.graph
    for nid in graph.topological():
        node = graph.nodes[nid]
        if node.is_source:
            continue
        for i in range(len(node.types)):
            for inner in _ancestor_refs(graph, nid):
                if g.prints.get(inner) == g.prints.get((nid, i)) and _wraps(graph, inner, (nid, i)):
                    return inner
    return None


def _ancestor_refs(graph: Graph, nid: int) -> list[Ref]:
    seen: set[int] = set()
    out: list[Ref] = []
    stack = [r for r in graph.nodes[nid].operand_refs()]
    while stack:
        ref = stack.pop()
        out.append(ref)
        if ref[0] not in seen:
            seen.add(ref[0])
            stack.extend(graph.nodes[ref[0]].operand_refs())
    return out


def _wraps(graph: Graph, inner: Ref, outer: Ref) -> bool:
    gen = torch.Generator().manual_seed(hash((inner, outer)) & 0x7FFFFFFF)
    fresh = random_pieces(graph.type_of(inner), gen)
    node = graph.nodes[inner[0]]
    given = {
        (inner[0], i): fresh if i == inner[1] else random_pieces(t, gen) for i, t in enumerate(node.types)
    }
    values = evaluate(graph, values=dict(given))
    try:
        got, want = assemble(values[outer]), assemble(fresh)
    except CopiesDiffer:
        return False
    return got.shape == want.shape and bool(torch.allclose(got, want, rtol=1e-9, atol=1e-12))


def _identity_in_context(buckets: Buckets, a: int, b: int) -> bool:
    """One side wraps a tensor in an identity, and the pair is not that identity itself (a
    wrapper around a bare input against the bare input): it is an instance of a rule with a
    bare variable side, in context (add(x, y) vs add(combine(partition(y)), x))."""
    for one, other in ((a, b), (b, a)):
        wrapped = buckets.wrapped[one]
        if wrapped is None:
            continue
        g, o = buckets.graphs[one], buckets.graphs[other]
        base = o.n_ops == 0 and g.graph.nodes[wrapped[0]].is_source and len(g.graph.outputs) == 1
        if not base:
            return True
    return False


def congruent(a: Enumerated, b: Enumerated) -> bool:
    """Whether every output pair is the same op, attributes and result index applied to
    operands with equal fingerprints (so the pair follows from its operands' pairs)."""
    for ra, rb in zip(a.graph.outputs, b.graph.outputs, strict=True):
        na, nb = a.graph.nodes[ra[0]], b.graph.nodes[rb[0]]
        if na.is_source or nb.is_source or (na.op, na.attrs, ra[1]) != (nb.op, nb.attrs, rb[1]):
            return False
        if len(na.operands) != len(nb.operands):
            return False
        for oa, ob in zip(na.operands, nb.operands, strict=True):
            if (oa is None) != (ob is None):
                return False
            if oa is not None and ob is not None and a.prints[oa] != b.prints[ob]:
                return False
    return True
