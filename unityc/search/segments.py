"""The segment search of Unity's joint search (§5, steps 2 to 4; see `unity.py`): a
best-first substitution search per segment, a dynamic program over the chain of segments
choosing each cut's partitioning, and the chosen candidates stitched into one plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Node, Ref, side_ops
from unityc.graph.simplify import fuse_collectives, reduce_loss, simplify
from unityc.machine.spec import Machine
from unityc.rewrites.match import CompiledRule
from unityc.rewrites.terms import App, subterms
from unityc.search.bounds import Bound
from unityc.search.experts import with_experts
from unityc.search.layout import tilings
from unityc.search.mapping import Mapped, Mapper
from unityc.search.options import Progress, SearchReport, UnityOptions, default_degrees
from unityc.search.spatial_layout import spatial_graph, spatial_layouts
from unityc.search.split import (
    SegmentGraph,
    blocked_matches,
    choose_cuts,
    cut_points,
    partitionings,
    segment_graph,
    segments,
    shared_sources,
    with_boundary,
)
from unityc.search.strategies import (
    data_parallel_graph,
    megatron_layouts,
    tensor_degrees,
)
from unityc.search.substitution import Candidate, SearchStats, SubstitutionOptions, best_first
from unityc.search.views import canonical_view, to_attr

WORK_PER_EXPANSION = 16
"""Neighbours looked at per expansion of the budget, per parallel degree offered (and one more)."""


def work_budget(budget: int | None, degrees: int, ops: int, split_size: int) -> int | None:
    """Neighbours a segment search may look at (each is rewritten, simplified, hashed, bounded
    and mostly priced, at a cost that grows with the segment's ops): `budget` expansions of
    `WORK_PER_EXPANSION` per degree for a segment of `split_size` ops, proportionally fewer for
    a bigger one (a graph with no cut points is one segment), at least a few. A machine offering
    few degrees gets a small budget: a segment of many ops has hundreds of neighbours per
    expansion, most of them rewrites that change nothing the cost model sees. None: no limit."""
    if budget is None:
        return None
    full = budget * WORK_PER_EXPANSION * (degrees + 1)
    return max(4 * (degrees + 1), full * split_size // max(ops, split_size))


def is_algebraic(rule: CompiledRule) -> bool:
    """Whether a rule's target has no parallel op (an algebraic rewrite)."""
    return not any(
        isinstance(t, App) and t.op.startswith("parallel.") for term in rule.target for t in subterms(term)
    )


@dataclass
class _Choice:
    objective: float
    graph: Graph
    mapped: Mapped
    segment: SegmentGraph


class SegmentSearch:
    """One search at one memory weight."""

    def __init__(
        self,
        graph: Graph,
        machine: Machine,
        rules: Sequence[CompiledRule],
        options: UnityOptions,
        mapper: Mapper,
        deadline: float | None,
        report: SearchReport,
        progress: Progress | None,
        bound: Bound,
    ):
        self.graph = graph
        self.machine = machine
        self.rules = rules
        self.options = options
        self.mapper = mapper
        self.deadline = deadline
        self.report = report
        self.progress = progress
        self.bound = bound
        self.degrees = options.degrees or default_degrees(machine)
        self.searched: dict[Any, list[Candidate]] = {}
        self.side = side_ops(graph)
        """Ops computed from inputs and constants alone: in no segment (`split.py`)."""
        self.converted: dict[Any, _Choice | None] = {}
        self.at = (0, 1)
        """(segment, segments): where the search is, for its progress."""
        self.priced = 0

    def run(self) -> tuple[Graph, Mapped]:
        side = self.side
        points = cut_points(self.graph, side)
        cuts = choose_cuts(
            self.graph, points, self.options.split_size,
            blocked_matches(self.graph, self.rules, points, side), side,
        )  # fmt: skip
        parts = segments(self.graph, cuts, side)
        shared = shared_sources(self.graph, parts) | {
            r[0] for nid in self.side for r in self.graph.nodes[nid].operand_refs() if r[0] not in self.side
        }  # sources the side ops read too keep their type
        self.report.segments = len(parts)
        boundaries: list[Ref] = [(ops[-1], 0) for ops in parts[:-1]]
        # best[i][p]: the cheapest way to run the segments before i with cut i-1 partitioned as p
        best: list[dict[TensorType | None, tuple[float, list[_Choice]]]] = [{None: (0.0, [])}]
        for i, ops in enumerate(parts):
            last = i == len(parts) - 1
            cheapest = min(cost for cost, _ in best[i].values())
            searched: list[tuple[float, list[_Choice], SegmentGraph, list[Candidate]]] = []
            for p_in, (before, chosen) in best[i].items():
                if before > self.options.beam * cheapest:
                    continue
                before_cut = boundaries[i - 1] if i else None
                seg = segment_graph(self.graph, ops, before_cut, p_in, shared, last, side)
                self.at = (i, len(parts))
                searched.append((before, chosen, seg, self._search(seg)))
                if self.progress is not None:
                    self.progress(f"segment {i + 1}/{len(parts)}", i + 1, len(parts))
            found = [c for *_, candidates in searched for c in candidates]
            outs: list[TensorType | None] = [None] if last else self._boundaries(boundaries[i], found)
            layer: dict[TensorType | None, tuple[float, list[_Choice]]] = {}
            for before, chosen, seg, candidates in searched:
                for p_out in outs:
                    choice = self._convert(seg, candidates, p_out)
                    if choice is None:
                        continue
                    cost = before + choice.objective
                    if p_out not in layer or cost < layer[p_out][0]:
                        layer[p_out] = (cost, [*chosen, choice])
            if not layer:
                raise ValueError(f"no candidate of segment {i + 1} reaches any partitioning of its boundary")
            best.append(layer)
        _, chain = min(best[-1].values(), key=lambda v: v[0])
        plan = self._stitch(chain)
        mapped = self.mapper.map(plan)
        if not mapped.feasible:
            raise ValueError("the stitched plan has no feasible mapping")
        for nid, view in mapped.views.items():
            plan.with_view(nid, to_attr(view, self.machine))
        return plan, mapped

    # --- segments ------------------------------------------------------------------------------

    def _fixed(self, seg: SegmentGraph, graph: Graph, last: int | None) -> dict[int, Any]:
        fixed: dict[int, Any] = {}
        if seg.boundary is not None:
            fixed[seg.boundary] = canonical_view(graph.type_of((seg.boundary, 0)).task_degrees())
        if last is not None:
            fixed[last] = canonical_view(graph.nodes[last].types[0].task_degrees())
        return fixed

    def _price(self, seg: SegmentGraph, graph: Graph, last: int | None) -> Mapped:
        requires = [(seg.boundary, 0)] if seg.boundary is not None else []
        roots = None if seg.last else graph.outputs[:1]
        return self.mapper.map(graph, self._fixed(seg, graph, last), requires, roots)

    def _key(self, seg: SegmentGraph) -> Any:
        return (seg.graph.structural_hash(), tuple(sorted(seg.keep)), seg.last)

    def _search(self, seg: SegmentGraph) -> list[Candidate]:
        key = self._key(seg)
        hit = self.searched.get(key)
        if hit is not None:
            self.report.reused += 1
            return hit
        self.report.searches += 1

        def price(g: Graph) -> Mapped:
            self.priced += 1
            if self.progress is not None:  # a segment of many ops takes a while: show it moving
                i, n = self.at
                self.progress(f"segment {i + 1}/{n}, {self.priced} candidates priced", i, n)
            return self._price(seg, fuse_collectives(g), None)

        requires = [(seg.boundary, 0)] if seg.boundary is not None else []

        def bound(g: Graph) -> float:
            return self.bound(g, requires, None if seg.last else g.outputs[:1])

        work = work_budget(
            self.options.budget, len(self.degrees), len(seg.graph.nodes), self.options.split_size
        )
        options = SubstitutionOptions(
            self.options.alpha, self.options.budget, self.deadline, work, self.options.per_output
        )
        starts = [seg.graph, *self._seeds(seg)]
        devices = self.machine.num_devices
        outcome = best_first(
            starts, price, self.rules, self.degrees, options, tuple(seg.keep), devices, bound
        )
        self._count(outcome.stats)
        kept = self._keep(outcome.candidates)
        self.searched[key] = kept
        return kept

    def _seeds(self, seg: SegmentGraph) -> list[Graph]:
        """The segment data parallel and Megatron-style (each tensor degree dividing a node):
        where the search starts besides the segment as it is."""
        if not self.options.seeds:
            return []
        n = self.machine.num_devices
        seeds = [data_parallel_graph(seg.graph, n, seg.keep)]
        seeds += [
            spatial_graph(seg.graph, n, b, seg.keep)
            for _, b in spatial_layouts(seg.graph, n, every_device=True)
        ]
        tiled = tilings(n, {"tensor": tensor_degrees(self.machine)})
        for layout in with_experts(tiled, seg.graph, self.machine):
            seeds += [laid.graph for laid in megatron_layouts(seg.graph, layout, seg.keep, pad=False)]
        return seeds

    def _count(self, stats: SearchStats) -> None:
        self.report.priced += stats.priced
        self.report.bounded += stats.bounded
        self.report.expanded += stats.expanded
        self.report.stopped[stats.stopped_by] = self.report.stopped.get(stats.stopped_by, 0) + 1

    def _keep(self, candidates: list[Candidate]) -> list[Candidate]:
        """The best few, and the best `per_output` for each type of the segment's result."""
        kept: dict[int, Candidate] = {id(c): c for c in candidates[:4]}
        per_type: dict[TensorType, int] = {}
        for c in candidates:
            t = c.graph.type_of(c.graph.outputs[0])
            if per_type.get(t, 0) < self.options.per_output:
                per_type[t] = per_type.get(t, 0) + 1
                kept[id(c)] = c
        return sorted(kept.values(), key=lambda c: c.objective)

    def _boundaries(self, ref: Ref, candidates: list[Candidate]) -> list[TensorType | None]:
        """Partitionings worth considering for a cut: unsharded, and those among its legal ones
        (one dim sharded by an offered degree) that some candidate of the segment before it
        produces as it is, or once its partial sums are reduced."""
        legal = partitionings(self.graph.type_of(ref), self.degrees, self.machine.num_devices)
        produced = set()
        for c in candidates:
            t = c.graph.type_of(c.graph.outputs[0])
            produced.add(TensorType(t.shape, t.element_type, t.shard, 1, t.copy_degree))
        return [p for p in legal if p in produced or not any(k > 1 for k in p.shard)]

    def _convert(
        self, seg: SegmentGraph, candidates: list[Candidate], p_out: TensorType | None
    ) -> _Choice | None:
        key = (self._key(seg), p_out)
        if key in self.converted:
            hit = self.converted[key]
            return None if hit is None else replace(hit, segment=seg)
        best: _Choice | None = None
        for c in candidates:
            if p_out is None:
                graph = fuse_collectives(c.graph)
                mapped = self._price(seg, graph, None)
            else:
                converted = with_boundary(c.graph, p_out)
                if converted is None:
                    continue
                graph = fuse_collectives(converted[0])
                mapped = self._price(seg, graph, graph.outputs[0][0])
            if mapped.feasible and (best is None or mapped.objective < best.objective):
                best = _Choice(mapped.objective, graph, mapped, seg)
        self.converted[key] = best
        return best

    # --- stitching -----------------------------------------------------------------------------

    def _stitch(self, chain: list[_Choice]) -> Graph:
        """One graph from the chosen segment candidates: each segment's `@in` becomes the
        previous segment's result, local source names become the original ones, a constant
        several segments read is one node. The side ops come first, as in the graph (one
        device), and the segments' inputs standing for their values read them."""
        plan = Graph(
            module_attrs=dict(self.graph.module_attrs), function_attrs=self.graph.kept_function_attrs()
        )
        sources: dict[tuple[Any, ...], Ref] = {}
        side: dict[Ref, Ref] = {}
        for nid in self.graph.topological():
            if nid not in self.side:
                continue
            node = self.graph.nodes[nid]
            for ref in node.operand_refs():
                source = self.graph.nodes[ref[0]]
                if ref in side or not source.is_source:
                    continue
                key = source.attr("key")
                name = (source.op, source.attrs, source.types) if key is None else (source.op, key)
                if name not in sources:
                    (sources[name],) = plan.add_node(Node(source.op, (), source.attrs, source.types))
                side[ref] = sources[name]
            operands = tuple(None if r is None else side[r] for r in node.operands)
            for i, ref in enumerate(plan.add_node(Node(node.op, operands, node.attrs, node.types))):
                side[(nid, i)] = ref
        previous: Ref | None = None
        outputs: tuple[Ref, ...] = ()
        for choice in chain:
            g, seg = choice.graph, choice.segment
            refs: dict[Ref, Ref] = {}
            for nid in g.topological():
                node = g.nodes[nid]
                if nid == seg.boundary:
                    assert previous is not None
                    refs[(nid, 0)] = previous
                    continue
                if node.op == "pcg.constant" and nid in seg.keep:  # read by several segments: one node
                    shared = ("pcg.constant", node.attrs, node.types)
                    if shared not in sources:
                        (sources[shared],) = plan.add_node(Node(node.op, (), node.attrs, node.types))
                    refs[(nid, 0)] = sources[shared]
                    continue
                if node.op == "pcg.input" and node.attr("key") in seg.sides:
                    refs[(nid, 0)] = side[seg.sides[node.attr("key")]]
                    continue
                if node.is_source and node.attr("key") is not None:
                    key = seg.keys[node.attr("key")]
                    if nid in seg.keep and (node.op, key) in sources:  # a tied weight: one node
                        refs[(nid, 0)] = sources[(node.op, key)]
                        continue
                    attrs = tuple((k, key if k == "key" else v) for k, v in node.attrs)
                    (ref,) = plan.add_node(Node(node.op, (), attrs, node.types))
                    refs[(nid, 0)] = ref
                    sources[(node.op, key)] = ref
                    continue
                operands = tuple(None if r is None else refs[r] for r in node.operands)
                for i, ref in enumerate(plan.add_node(Node(node.op, operands, node.attrs, node.types))):
                    refs[(nid, i)] = ref
            previous = refs[g.outputs[0]]
            outputs = tuple(refs[r] for r in g.outputs)
        plan.outputs = outputs
        return fuse_collectives(reduce_loss(simplify(plan)))
