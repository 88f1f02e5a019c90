"""Graph splitting (Unity §5.3): cut a large graph into segments searched one by one.

A *cut point* is an op every path from the graph's inputs to its outputs goes through (a
post-dominator of the inputs, ignoring weights and constants): the ops before it and after it
meet only in its result. Cuts are chosen about `size` ops apart, each where it blocks the
fewest rule matches (MetaFlow: a match blocked by a cut spans both of its sides).

*Side ops* (`graph.side_ops`: computed from inputs and constants alone, such as a causal mask
combined with the padding mask, read by every layer) count as sources here: they would
otherwise join every layer to the first and leave no cut. They belong to no segment; a segment
reads their values as inputs of their own (`SegmentGraph.sides`), and the search's plan computes
them once, unparallelized, before the segments (`segments.SegmentSearch._stitch`).

Each segment becomes a small graph of its own (`SegmentGraph`): its weights, inputs and
constants renamed by position (`@0`, `@1`, ...) so that repeated layers give equal graphs and
are searched once, and, unless it is the first, an input `@in` standing for the previous
segment's result. That input has a fixed *boundary partitioning* (shard degrees only: Unity
keeps copy and sum degrees at 1 across cuts, as a replicate on one side and a reduce on the
other would not cancel) and is combined back to the unsharded tensor the segment's ops read;
the search then moves the combine down where that pays. At the end of a segment,
`with_boundary` appends the parallel ops that bring its result to the next boundary
partitioning.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Node, Ref
from unityc.graph.reshard import reshard
from unityc.rewrites.match import CompiledRule, GraphIndex

BOUNDARY_KEY = "@in"


LIGHT_BRANCH = 2
"""Ops in a branch that starts from sources only and may follow a cut (see `cut_points`)."""


def _branch(start: int, producers: list[set[int]], consumers: list[set[int]]) -> int:
    """How many ops a branch starting at `start` has before it meets another branch."""
    count, node = 1, start
    while len(consumers[node]) == 1:
        (nxt,) = consumers[node]
        if len(producers[nxt]) != 1:
            break
        count, node = count + 1, nxt
    return count


def _ops(graph: Graph, side: Collection[int]) -> list[int]:
    """The ops segments hold, in topological order: neither sources nor side ops."""
    return [nid for nid in graph.topological() if not graph.nodes[nid].is_source and nid not in side]


def cut_points(graph: Graph, side: Collection[int] = ()) -> list[int]:
    """Ops every input-to-output path crosses, in topological order (single-result ops that
    are not the graph's outputs); `side` ops count as sources."""
    order = _ops(graph, side)
    pos = {nid: i for i, nid in enumerate(order)}
    n = len(order)
    outputs = {r[0] for r in graph.outputs}
    jumps = [0] * (n + 1)
    producers: list[set[int]] = [set() for _ in range(n)]
    consumers: list[set[int]] = [set() for _ in range(n)]
    has_consumer = [False] * n
    for nid in order:
        for ref in graph.nodes[nid].operand_refs():
            if ref[0] not in pos:
                continue
            a, b = pos[ref[0]], pos[nid]
            has_consumer[a] = True
            producers[b].add(a)
            consumers[a].add(b)
            if b > a + 1:
                jumps[a + 1] += 1
                jumps[b] -= 1
    exits = [not has_consumer[i] or order[i] in outputs for i in range(n)]  # a path ends there
    exits_before = [0] * (n + 1)
    for i in range(n):
        exits_before[i + 1] = exits_before[i] + exits[i]
    heavy = [not producers[i] and _branch(i, producers, consumers) > LIGHT_BRANCH for i in range(n)]
    heavy_after = [0] * (n + 1)
    for i in reversed(range(n)):
        heavy_after[i] = heavy_after[i + 1] + heavy[i]
    cuts: list[int] = []
    crossing = 0
    for i in range(n - 1):
        crossing += jumps[i]
        node = graph.nodes[order[i]]
        # a short branch after the cut that reads only weights, inputs and constants (an
        # embedding of constant position ids, a reshape of the labels) goes with the later
        # segment; a long one (a second tower) is a parallel branch: no cut before it
        if crossing or exits_before[i] or heavy_after[i + 1] or len(node.types) != 1 or order[i] in outputs:
            continue
        cuts.append(order[i])
    return cuts


def blocked_matches(
    graph: Graph, rules: Sequence[CompiledRule], cuts: Iterable[int], side: Collection[int] = ()
) -> dict[int, int]:
    """For each cut, how many rule matches have ops on both of its sides."""
    order = _ops(graph, side)
    pos = {nid: i for i, nid in enumerate(order)}
    spans: list[tuple[int, int]] = []
    index = GraphIndex(graph)
    for rule in rules:
        for match in rule.matches(graph, (2,), index):
            where = [pos[n] for n in match.nodes if n in pos]
            if len(where) > 1:
                spans.append((min(where), max(where)))
    return {c: sum(1 for lo, hi in spans if lo <= pos[c] < hi) for c in cuts}


def choose_cuts(
    graph: Graph, cuts: Sequence[int], size: int, blocked: dict[int, int], side: Collection[int] = ()
) -> list[int]:
    """Cuts about `size` ops apart: from the last cut, the one blocking the fewest matches among
    those between size/2 and 3*size/2 ops further (ties: nearest to `size`)."""
    order = _ops(graph, side)
    pos = {nid: i for i, nid in enumerate(order)}
    chosen: list[int] = []
    last = -1
    remaining = sorted(cuts, key=pos.__getitem__)
    while True:
        # a cut must leave at least size/2 ops to the segment after it
        room = [c for c in remaining if pos[c] > last + size / 2 and len(order) - 1 - pos[c] >= size / 2]
        if not room:
            break
        window = [c for c in room if pos[c] <= last + 1.5 * size] or room[:1]
        cut = min(window, key=lambda c: (blocked.get(c, 0), abs(pos[c] - last - size)))
        chosen.append(cut)
        last = pos[cut]
    return chosen


@dataclass
class SegmentGraph:
    graph: Graph
    boundary: int | None
    """The `@in` source's node id (None for the first segment)."""
    keys: dict[str, str]
    """Local source key -> the original graph's key."""
    keep: frozenset[int]
    """Sources whose type must not change (`@in`, and sources other segments read too)."""
    output: Ref
    """The tensor the next segment reads (the loss for the last segment)."""
    last: bool
    """Whether it is the graph's last segment (its gradients flow from the loss)."""
    sides: dict[str, Ref] = field(default_factory=dict)
    """Local input key -> the side op's value (in the original graph) that input stands for."""


def segments(graph: Graph, cuts: Sequence[int], side: Collection[int] = ()) -> list[list[int]]:
    """The ops of each segment (sources and side ops excluded), in topological order."""
    order = _ops(graph, side)
    out: list[list[int]] = [[]]
    cut_set = set(cuts)
    for nid in order:
        out[-1].append(nid)
        if nid in cut_set:
            out.append([])
    return [s for s in out if s]


def shared_sources(graph: Graph, parts: Sequence[Sequence[int]]) -> set[int]:
    """Sources read by more than one segment (tied weights)."""
    seen: dict[int, int] = {}
    shared: set[int] = set()
    for i, ops in enumerate(parts):
        for nid in ops:
            for ref in graph.nodes[nid].operand_refs():
                if graph.nodes[ref[0]].is_source and seen.setdefault(ref[0], i) != i:
                    shared.add(ref[0])
    return shared


def segment_graph(
    graph: Graph,
    ops: Sequence[int],
    boundary: Ref | None,
    partitioning: TensorType | None,
    shared: set[int],
    last: bool,
    side: Collection[int] = (),
) -> SegmentGraph:
    """The segment of `ops` as a graph of its own (see the module docstring): the values of
    `side` ops it reads are inputs (kept as they are), named by position like its sources."""
    g = Graph(function_attrs=graph.kept_function_attrs())
    refs: dict[Ref, Ref] = {}
    keys: dict[str, str] = {}
    sides: dict[str, Ref] = {}
    keep: set[int] = set()
    start: int | None = None
    if boundary is not None:
        assert partitioning is not None
        x = g.add_source("pcg.input", BOUNDARY_KEY, partitioning)
        start = x[0]
        keep.add(start)
        for d, k in enumerate(partitioning.shard):
            if k > 1:
                (x,) = g.add("parallel.combine", [x], dim=d, degree=k)
        refs[boundary] = x

    def copy_source(ref: Ref) -> None:
        source = graph.nodes[ref[0]]
        if ref in refs:
            return
        if ref[0] in side:
            local = f"@{len(keys) + len(sides)}"
            sides[local] = ref
            (refs[ref],) = g.add_node(Node("pcg.input", (), (("key", local),), (graph.type_of(ref),)))
            keep.add(refs[ref][0])
            return
        if not source.is_source:
            return
        attrs = source.attrs
        if source.attr("key") is not None:
            local = f"@{len(keys) + len(sides)}"
            keys[local] = source.attr("key")
            attrs = tuple((k, local if k == "key" else v) for k, v in attrs)
        (refs[ref],) = g.add_node(Node(source.op, (), attrs, source.types))
        if ref[0] in shared:
            keep.add(refs[ref][0])

    for nid in ops:
        node = graph.nodes[nid]
        for ref in node.operand_refs():
            copy_source(ref)
        operands = tuple(None if r is None else refs[r] for r in node.operands)
        for i, ref in enumerate(g.add_node(Node(node.op, operands, node.attrs, node.types))):
            refs[(nid, i)] = ref
    if last:
        for ref in graph.outputs:  # a constant or input returned as it is
            copy_source(ref)
        g.outputs = tuple(refs[r] for r in graph.outputs)
    else:
        g.outputs = (refs[(ops[-1], 0)],)
    return SegmentGraph(g, start, keys, frozenset(keep), g.outputs[0], last, sides)


def partitionings(t: TensorType, degrees: Sequence[int], devices: int) -> list[TensorType]:
    """Boundary partitionings of a tensor: unsharded, or sharded on one dim by an offered
    degree (copy and sum degrees 1)."""
    out = [TensorType(t.shape, t.element_type)]
    for d, size in enumerate(t.shape):
        for k in degrees:
            if k > 1 and size % k == 0 and k <= devices:
                shard = [1] * t.rank
                shard[d] = k
                out.append(TensorType(t.shape, t.element_type, shard))
    return out


def with_boundary(graph: Graph, target: TensorType) -> tuple[Graph, int] | None:
    """A copy of a segment's graph whose first output is brought to the partitioning `target`
    (reduce partial sums, then combine and partition shard by shard); also returns the node
    that produces it. None if it holds copies (they cannot be dropped)."""
    try:
        return _with_boundary(graph, target)
    except FormError:
        return None


def _with_boundary(graph: Graph, target: TensorType) -> tuple[Graph, int] | None:
    out = graph.copy()
    x = out.outputs[0]
    t = out.type_of(x)
    if t.copy_degree > 1 or target.copy_degree > 1 or t.shape != target.shape:
        return None
    if any(have < want and want % have for have, want in zip(t.shard, target.shard, strict=True)):
        return None  # boundaries partition further only by multiples (the search space as it was)
    try:
        x = reshard(out, x, target)
    except ValueError:
        return None
    out.outputs = (x, *out.outputs[1:])
    return out, x[0]
