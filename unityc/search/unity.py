"""Unity's joint search (§5): splitting, substitution search per segment, machine mapping.

1. The graph is cut into segments of about `split_size` ops (`split.py`).
2. For every segment and every partitioning of the tensor entering it, a best-first
   substitution search (`substitution.py`) explores rewritten versions of the segment, each
   priced by the machine-mapping DP (`mapping.py`). It starts from the segment as it is and,
   as seeds, from the segment made data parallel and Megatron-style (`strategies.py`).
   Segments equal up to weight names are searched once.
3. For every partitioning of the tensor leaving the segment, the best explored candidates are
   brought to it (`split.with_boundary`) with the boundary's view fixed; a dynamic program over
   the chain of segments picks the partitioning of every cut. Partitionings reached at more
   than `beam` x the cheapest way to reach their cut are not searched onwards.
4. The chosen candidates are stitched together, simplified across the cuts, collectives are
   fused, and the DP maps the whole plan; `estimate` prices it (what the report shows). The
   result is compared with whole-graph data-parallel and Megatron plans (cuts hold no copies,
   so those are not always reachable segment by segment) and the better plan is returned,
   named in `UnityResult.source`.

Memory: an op whose own footprint overflows its devices is priced out by the DP. If the plan
still does not fit (by `estimate`), the search runs again with the DP charging `memory_weight`
seconds per byte of its per-device memory bound, growing tenfold per round. A plan that does
not fit is never returned as fitting: the result says whether it fits, and when none does it is
the smallest footprint found.

Memory levers: every plan that does not fit (each round's, and each whole-graph plan) gets ZeRO
stages and recomputation, the better of two ways (`levered_plan`): per weight and per op,
greedily by bytes saved per second added (`levers.py`), and per layer by Galvatron-BMW's dynamic
program over layers x memory (`galvatron.per_layer`), its budget calibrated against the estimate
(the baseline's DP leaves memory unused where its model overestimates). The plans compared with
the search's also hold the `zero` baseline's (data parallelism with ZeRO-1/2/3, with and without
recomputation) and the `galvatron` baseline's (its DP over each tensor degree's whole-graph
plan), and that DP calibrated, so the result is never slower than either on the same model,
machine and memory budget. A levered plan
is priced only if a lower bound of its time (`bounds.levers_bound`: the compute and the
gradients' traffic its levers leave) could beat the fastest plan at hand that fits; where
data parallelism fits, the zero plans mostly cannot (their per-weight collectives after the
backward).

The plans compared are made beside the segment search (`background.py`): the graph on one
device first (here), then data parallelism (the worker's first plan; priced here before the
search where no worker runs), so a time limit the segment search overruns still returns the
better of the two. The worker sends each plan's summary (the report's baseline row) and the
plan itself only where it can still be chosen (`_sent`).
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from unityc.cost.estimate import Estimate, compute_model, estimate_graph
from unityc.cost.profile import ProfileCache
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import GRAPH_PLAN_ATTRS, ZERO_STAGES
from unityc.graph import Graph, Node, Ref, side_ops, to_module
from unityc.graph.simplify import fuse_collectives, reduce_loss, simplify
from unityc.machine.spec import Machine
from unityc.rewrites.match import CompiledRule
from unityc.rewrites.terms import App, subterms
from unityc.search.background import Background
from unityc.search.bounds import Bound, levers_bound, pipeline_bound
from unityc.search.galvatron import Memo, base_plans, galvatron_plan, per_layer
from unityc.search.levers import with_accumulation, with_memory_levers
from unityc.search.mapping import Mapped, Mapper, MappingOptions
from unityc.search.opcost import SYNC_WEIGHT
from unityc.search.plans import (
    PlanSummary,
    PricedPlan,
    Pricing,
    data_parallel_plan,
    fastest_kind_plan,
    megatron_plans,
    one_device_plan,
    spatial_plans,
    zero_version,
)
from unityc.search.split import (
    BOUNDARY_KEY,
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
    spatial_graph,
    spatial_layouts,
    tensor_degrees,
)
from unityc.search.substitution import Candidate, SearchStats, SubstitutionOptions, best_first
from unityc.search.views import big_degrees, canonical_view, task_degrees, to_attr

if TYPE_CHECKING:
    from unityc.search.pipeline import PipelinePlan

MEMORY_WEIGHTS = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5)
"""Memory rounds after the first: multiples of (iteration time / device capacity) per byte."""


@dataclass(frozen=True)
class UnityOptions:
    alpha: float = 1.05
    budget: int | None = 12
    """Expansions per segment search, and the scale of its work budget (`work_budget`); None:
    until the queue empties."""
    split_size: int = 12
    time_limit: float | None = None
    """Seconds for the whole search (see `unity_search`): segment searches stop at half of it,
    whatever runs at the limit is interrupted and the best plan completed by then returned.
    None here; `unity-search` (the pass and `--unity-search`) defaults to 600 s."""
    degrees: tuple[int, ...] | None = None
    """Parallel degrees the rules may use (default: `default_degrees`)."""
    cost: str = "roofline"
    optimizer: str = "sgd"
    memory_check: bool = True
    sync_weight: float = SYNC_WEIGHT
    side_by_side: bool = True
    per_output: int = 2
    """Candidates kept per output partitioning of a segment (besides the best few overall)."""
    seeds: bool = True
    """Whether segment searches also start from data-parallel and Megatron-style versions."""
    beam: float = 1.2
    """Partitionings of a cut are searched onwards only if the best way to reach them costs at
    most `beam` x the best way to reach the cut (inf: all of them)."""
    whole_graph: bool = True
    """Whether the result is compared with whole-graph data-parallel and Megatron plans."""
    pipelines: bool = True
    """Whether pipelined plans compete (`search/pipeline.py`: the partition DP over the graph's
    split points with stage replication and device groups, each flush schedule, the micro-batch
    count; and the pipedream, hetero-gpipe and gpipe plans), the fastest plan winning."""
    levers: bool = True
    """Whether a plan that does not fit gets ZeRO stages and recomputation (`levers.py`)."""
    parallel_pass: bool = True
    """Whether the graph is also searched with the parallelization rules alone (the second phase
    of Unity's sequential ablation, `baselines.sequential`; its cuts are its own, as they
    depend on the rules' matches), the better plan kept: the algebraic rules' neighbours share
    the work budget with the parallel ones, so at the same budget the joint search alone can
    stop short of what the ablation reaches (the zoo MLP on summit:8: 255.5 ms against 243.0 ms)."""


def default_degrees(machine: Machine) -> tuple[int, ...]:
    """Degrees worth trying on `machine`: all its devices, a node, the node count, 2; all
    divisors on machines of up to 8 devices."""
    n = machine.num_devices
    divisors = [d for d in range(2, n + 1) if n % d == 0]
    if n <= 8:
        return tuple(divisors)
    per_node = machine.nodes[0].num_devices
    wanted = {n, per_node, n // per_node if n % per_node == 0 else 1, 2}
    return tuple(d for d in divisors if d in wanted)


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


def check_degrees(degrees: Sequence[int], machine: Machine) -> None:
    """Refuses parallel degrees the machine cannot use: more than its devices, or not dividing
    their number (views place a degree's tasks on a block that tiles the machine)."""
    n = machine.num_devices
    for d in degrees:
        if d > n:
            raise ValueError(f"degrees: {d} is more than the {n} device(s) of {machine.name}")
        if n % d:
            raise ValueError(f"degrees: {d} does not divide the {n} devices of {machine.name}")


@dataclass
class SearchReport:
    seconds: float = 0.0
    segments: int = 0
    searches: int = 0
    reused: int = 0
    priced: int = 0
    bounded: int = 0
    """Candidates not priced: their lower bound was beyond alpha x the best."""
    expanded: int = 0
    stopped: dict[str, int] = field(default_factory=dict)
    rounds: list[tuple[float, float, bool]] = field(default_factory=list)
    """Per memory round: (memory weight, peak bytes of its plan, whether it fits)."""
    stopped_early: str | None = None
    """Why the search returned before it was done ("time limit", "interrupted"), if it did."""


@dataclass
class UnityResult:
    plan: Graph
    """The mapped plan: every node carries a machine view."""
    estimate: Estimate
    mapped: Mapped | None
    """The DP's mapping (None for a pipelined plan: its stages place it)."""
    fits: bool
    report: SearchReport
    source: str = "search"
    """Where the plan comes from: the search, or a whole-graph plan it was compared with."""
    alternatives: list[PlanSummary] = field(default_factory=list)
    """The whole-graph data-parallel and Megatron plans the result was compared with."""


Progress = Callable[[str, int, int], None]
"""(what, done, total): called as segment searches finish."""


@dataclass
class _Choice:
    objective: float
    graph: Graph
    mapped: Mapped
    segment: SegmentGraph


class _Run:
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
        for t in tensor_degrees(self.machine):
            seeds += [layout.graph for layout in megatron_layouts(seg.graph, n // t, t, seg.keep)]
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


def unity_search(
    graph: Graph,
    machine: Machine,
    rules: Sequence[CompiledRule],
    options: UnityOptions | None = None,
    profile: ProfileCache | None = None,
    progress: Progress | None = None,
    started: float | None = None,
) -> UnityResult:
    """The best plan found for `graph` on `machine` (see the module docstring).

    With a time limit (counted from `started`, a `time.monotonic()` value, default now), the
    segment searches stop at half of it, and whatever still runs at the limit (stitching,
    mapping, pricing the whole-graph plans) is interrupted: the result is then the best plan
    completed by then, `report.stopped_early` says why. The first plan completed is the graph
    on one device (cheap), so a plan is always at hand; then data parallelism, independently of
    the segment search (the worker's first plan, or priced here before the search where no
    worker runs), so that a limit the segment search overruns still returns it. Ctrl-C
    (KeyboardInterrupt) during the search returns the same way."""
    options = options or UnityOptions()
    check_degrees(options.degrees or (), machine)
    began = time.monotonic()
    report = SearchReport()
    pricing = Pricing(options.cost, options.optimizer, options.sync_weight, options.side_by_side, profile)
    limit = None if options.time_limit is None else (started or began) + options.time_limit
    start = strip_views(graph)
    alternatives: list[PlanSummary] = []
    """The whole-graph plans priced, shared by every result (the report's baseline rows)."""
    done: list[UnityResult] = []
    """Plans completed, the search's first (ties go to it)."""
    fallback: UnityResult | None = None
    """The graph on one device: a plan at hand, whatever happens next."""
    if not any(big_degrees(task_degrees(node.types[0])) for node in start.nodes.values()):
        one = one_device_plan(start, machine, pricing)
        fallback = _result(one, report, f"{one.name} ({one.note})", alternatives)
    # the whole-graph and pipelined plans do not depend on the segment search: priced beside it
    # (background.py)
    wholes = (
        Background(
            lambda: _sent(
                _alternative_plans(start, machine, pricing, options, fallback), fallback, options.memory_check
            )
        )
        if options.whole_graph or options.pipelines
        else None
    )
    try:
        with hard_deadline(None if limit is None else limit - tail_seconds(options.time_limit or 0.0, start)):
            if wholes is not None and options.whole_graph:  # where no worker runs: before the search
                wholes.prefetch(1)  # data parallelism
            soft = None if limit is None else began + (limit - began) / 2
            found = _search(start, machine, rules, options, profile, progress, report, soft)
            found.alternatives = alternatives
            done.append(found)
            for row, plan in wholes.items() if wholes is not None else ():
                _received(row, plan, report, alternatives, done)
            # without the whole-graph plans (galvatron among them): memory decides, per layer,
            # where the search's own plan does not fit (a fitting pipeline is no reason to skip it)
            if options.levers and not options.whole_graph and not found.fits:
                with contextlib.suppress(ValueError):
                    layered = galvatron_plan(start, machine, pricing)
                    source = f"per-layer levers ({layered.note})"
                    done.append(_result(layered, report, source, alternatives))
    except Stopped:
        report.stopped_early = "time limit"
        for row, plan in wholes.ready() if wholes is not None else ():  # priced by then: they compete
            _received(row, plan, report, alternatives, done)
    except KeyboardInterrupt:
        report.stopped_early = "interrupted"
        if fallback is None and not done:
            raise
    finally:
        if wholes is not None:
            wholes.close()
    if fallback is not None:  # a competitor too: what pipelines are pruned against
        done.append(fallback)
    if not done:
        raise ValueError(f"no plan completed within the time limit ({options.time_limit:g} s)")
    chosen = done[0]
    for result in done[1:]:
        if _better(result, chosen, options.memory_check):
            chosen = result
    report.seconds = time.monotonic() - began
    chosen.report = report
    return chosen


def _search(
    start: Graph,
    machine: Machine,
    rules: Sequence[CompiledRule],
    options: UnityOptions,
    profile: ProfileCache | None,
    progress: Progress | None,
    report: SearchReport,
    deadline: float | None,
) -> UnityResult:
    """The joint search's plan: memory rounds until one fits (or the deadline passes)."""
    compute = compute_model(options.cost, profile)
    bound = Bound(machine, compute)
    pricing = Pricing(options.cost, options.optimizer, options.sync_weight, options.side_by_side, profile)
    weights = [0.0]
    best: UnityResult | None = None
    smallest: UnityResult | None = None
    while weights:
        weight = weights.pop(0)
        mapping = MappingOptions(options.sync_weight, weight, side_by_side=options.side_by_side)
        mapper = Mapper(machine, compute, options.optimizer, mapping)
        plan, mapped = _Run(start, machine, rules, options, mapper, deadline, report, progress, bound).run()
        estimate = estimate_graph(plan, machine, options.cost, options.optimizer, profile)
        parallel = [r for r in rules if not is_algebraic(r)]
        if options.parallel_pass and 0 < len(parallel) < len(rules):
            alone = _Run(start, machine, parallel, options, mapper, deadline, report, progress, bound).run()
            priced = estimate_graph(alone[0], machine, options.cost, options.optimizer, profile)
            if _better_estimate(priced, estimate, options.memory_check):
                (plan, mapped), estimate = alone, priced
        if options.levers:
            levered = levered_plan(PricedPlan("search", plan, estimate, mapped), machine, pricing)
            plan, estimate = levered.graph, levered.estimate
        fits = estimate.fits
        report.rounds.append((weight, estimate.peak_memory, fits))
        result = UnityResult(plan, estimate, mapped, fits, report)
        if smallest is None or estimate.peak_memory < smallest.estimate.peak_memory:
            smallest = result
        if fits or not options.memory_check:
            best = result
            break
        if weight == 0.0:
            capacity = min(k.memory for k in machine.kinds)
            unit = estimate.iteration_s / capacity
            weights = [unit * w for w in MEMORY_WEIGHTS]
        if deadline is not None and time.monotonic() > deadline:
            break
    chosen = best or smallest
    assert chosen is not None
    return chosen


Worth = Callable[[float], bool]
"""Whether a plan whose iteration takes at least this many seconds could still be chosen."""


def _whole_graph_plans(
    graph: Graph,
    machine: Machine,
    pricing: Pricing,
    levers: bool = False,
    memo: Memo | None = None,
    worth: Worth = lambda s: True,
) -> Iterator[tuple[PricedPlan | None, PricedPlan, bool]]:
    """Whole-graph data-parallel and Megatron plans, as each is priced, as (the plan as the
    report's baselines show it, or None; the plan compared; whether it is one without levers:
    data-parallel or Megatron); on a machine of several device kinds also data parallelism over
    the fastest kind's devices (`plans.fastest_kind_plan`), compared but no baseline row. (Cuts
    keep copies out of segment boundaries, so a whole-graph Megatron plan is not always a search
    result.) With `levers`, also the `zero` and `galvatron` baselines' plans, built on those (so
    the search is never slower than either on the same model, machine and memory): cheapest
    first, as a time limit keeps those had: data parallelism, its ZeRO-3 plans, Galvatron's DP
    over it alone, its other zero plans, then the Megatron plans (costly on big graphs) and
    Galvatron's DP over every tensor degree, then that DP with its budget calibrated
    (`galvatron.per_layer`: from the choices the baseline priced, `memo`, on). A levered plan
    is priced only if a lower bound of its time (`bounds.levers_bound`, from the plan it
    levers) is `worth` it: where data parallelism fits, its zero plans are mostly slower than a
    plan at hand, and each takes an estimate of the whole graph."""
    memo = {} if memo is None else memo
    try:
        dp = [data_parallel_plan(graph, machine, pricing)]
    except ValueError:  # a plan with no feasible mapping is no alternative
        dp = []
    fast = fastest_kind_plan(graph, machine, pricing)
    if fast is not None:
        yield None, fast, True

    def leverable(plan: PricedPlan, zero: int | None = None) -> bool:
        return worth(levers_bound(plan.graph, plan.estimate, machine, pricing.optimizer, zero))

    for plan in dp:
        yield plan, plan, True
        if levers and not plan.estimate.fits and microbatchable(graph):
            accumulation = accumulation_plan(plan, machine, pricing)
            if accumulation is not None:
                yield accumulation, accumulation, False
        if levers and machine.num_devices > 1:
            for stage in sorted(ZERO_STAGES, reverse=True):  # the smallest footprints first
                for recompute in (True, False) if leverable(plan, stage) else ():
                    zero = zero_version(plan, machine, pricing, stage, recompute)
                    yield zero, zero, False
                if stage == max(ZERO_STAGES) and leverable(plan):
                    with contextlib.suppress(ValueError):  # no layer strategy fits
                        yield None, galvatron_plan(graph, machine, pricing, dp, memo), False
    try:
        megatron = megatron_plans(graph, machine, pricing)
    except ValueError:
        megatron = []
    for plan in megatron:
        yield plan, plan, True
    for plan in spatial_plans(graph, machine, pricing):  # images over height x width (x batch)
        yield None, plan, True
    bases = base_plans(graph, machine, pricing, dp + megatron).values() if levers else ()
    if any(leverable(base) for base in bases):  # Galvatron levers one of these
        with contextlib.suppress(ValueError):  # no layer strategy fits at any degree
            galvatron = galvatron_plan(graph, machine, pricing, dp + megatron, memo)
            yield galvatron, galvatron, False
            calibrated = galvatron_plan(graph, machine, pricing, dp + megatron, memo, calibrate=True)
            yield None, calibrated, False


def _alternative_plans(
    graph: Graph, machine: Machine, pricing: Pricing, options: UnityOptions, one: UnityResult | None
) -> Iterator[tuple[PricedPlan | None, PricedPlan]]:
    """The plans the search's result is compared with, as (the plan as the report's baselines
    show it, or None; the plan compared): whole-graph plans (`whole_graph`, with the zero and
    galvatron plans where `levers`), then the data-parallel and Megatron plans that do not fit
    with memory levers (`levered_plan`), then pipelined plans (`pipelines`; those that do not
    fit with levers inside their stages, which -t torch runs there). Made in the background beside the
    segment search, cheapest and most telling first (a time limit keeps those had). Plans
    that cannot beat the fastest plan at hand that fits (the graph on one device `one`, the
    plans made before) by a lower bound of their time are not built: levered plans
    (`bounds.levers_bound`), pipelined plans (`bounds.pipeline_bound`)."""
    best = math.inf
    if one is not None and (one.fits or not options.memory_check):
        best = one.estimate.iteration_s

    def worth(seconds: float) -> bool:
        return seconds <= best

    unfit: list[PricedPlan] = []
    memo: Memo = {}
    hand: list[PricedPlan | None] = []
    """The megatron-lm plan once priced (None: it cannot be had): early where data parallelism
    does not fit (a big model: it is the plan most likely to fit, and a time limit keeps it),
    else with the pipelines."""
    if options.whole_graph:
        for alternative, plan, bare in _whole_graph_plans(
            graph, machine, pricing, options.levers, memo, worth
        ):
            if plan.estimate.fits or not options.memory_check:
                best = min(best, plan.estimate.iteration_s)
            yield alternative, plan
            if options.levers and bare and not plan.estimate.fits:
                unfit.append(plan)
            if options.pipelines and plan.name == "data-parallel" and not plan.estimate.fits and not hand:
                hand.append(megatron_lm_candidate(graph, machine, pricing))
                if hand[0] is not None:
                    if hand[0].estimate.fits or not options.memory_check:
                        best = min(best, hand[0].estimate.iteration_s)
                    yield hand[0], hand[0]
    for plan in sorted(unfit, key=lambda p: p.estimate.backward_s):
        # levers never shorten forward and backward: a plan whose backward ends after a fitting
        # plan's whole iteration cannot win once levered (pricing it takes several estimates)
        if best <= plan.estimate.backward_s:
            continue
        if not worth(levers_bound(plan.graph, plan.estimate, machine, pricing.optimizer)):
            continue
        levered = levered_plan(plan, machine, pricing, memo)
        if levered.estimate.fits or not options.memory_check:
            best = min(best, levered.estimate.iteration_s)
        yield None, levered
    if options.pipelines and not pipelines_pruned(graph, machine, pricing, one, best):
        if not hand:
            hand.append(megatron_lm_candidate(graph, machine, pricing))
            if hand[0] is not None:
                yield hand[0], hand[0]
        for plan in pipeline_plans(graph, machine, pricing):
            lever = options.levers and not plan.estimate.fits
            yield plan, levered_plan(plan, machine, pricing) if lever else plan


def _sent(
    items: Iterator[tuple[PricedPlan | None, PricedPlan]], one: UnityResult | None, memory_check: bool
) -> Iterator[tuple[PlanSummary | None, PricedPlan | None]]:
    """`_alternative_plans`' items as the worker sends them back: each baseline row as its
    summary, and the plan compared only where it can still be chosen, i.e. it beats every plan
    made before it and is not beaten by the graph on one device `one` (the result is the first
    best of the search's plan, these in order, and `one`: a plan no better than one before it
    never is). A plan is megabytes to send and read back; its summary a few bytes."""
    best: Estimate | None = None
    for alternative, plan in items:
        e = plan.estimate
        ahead = best is None or _better_estimate(e, best, memory_check)
        beaten = one is not None and _better_estimate(one.estimate, e, memory_check)
        best = e if ahead else best
        yield None if alternative is None else alternative.summary(), plan if ahead and not beaten else None


def pipelines_pruned(
    graph: Graph, machine: Machine, pricing: Pricing, one: UnityResult | None, best: float
) -> bool:
    """Whether no pipelined plan of `graph` can be faster than `best` seconds (see
    `bounds.pipeline_bound`; `one` is the graph's plan on one device)."""
    from unityc.search.pipeline import PipelineError, batch_size

    if one is None or best == math.inf:
        return False
    try:
        batch = batch_size(graph)
    except PipelineError:
        return False
    return pipeline_bound(one.estimate, machine, batch, pricing.cost) >= best


def megatron_lm_candidate(graph: Graph, machine: Machine, pricing: Pricing) -> PricedPlan | None:
    """The `megatron-lm` baseline's plan (`megatron_lm.py`), a pipelined plan the search's
    result competes with; None on one device, where micro-batches cannot compute the loss, or
    where the machine and batch allow no configuration."""
    from unityc.search.megatron_lm import megatron_lm_plan
    from unityc.search.pipeline import PipelineError

    if machine.num_devices < 2 or not microbatchable(graph):
        return None
    try:
        return megatron_lm_plan(graph, machine, pricing)
    except (PipelineError, ValueError):
        return None


def pipeline_plans(graph: Graph, machine: Machine, pricing: Pricing) -> list[PricedPlan]:
    """The pipelined plans the search considers (`pipeline.pipeline_candidates`), as plans."""
    from unityc.search.pipeline import PipelineOptions, pipeline_candidates

    if not microbatchable(graph):
        return []
    options = PipelineOptions(pricing.cost, pricing.optimizer, pricing.profile)
    candidates = [p for p in pipeline_candidates(graph, machine, options) if runnable_pipeline(p)]
    return [PricedPlan(p.name, p.graph, p.estimate, None, p.note) for p in candidates]


def microbatchable(graph: Graph) -> bool:
    """Whether micro-batches of `graph` compute its loss (`microbatch_module` with one
    micro-batch, which refuses what no count allows: ops mixing samples such as batch norm, a
    summed loss, a reshape moving the batch out of dim 0). A plan of the graph computes the same
    values, so where this fails no pipelined plan is runnable (`runnable_pipeline`): the
    pipeline candidates are not built (Inception-v3's and ResNeXt's batch norms)."""
    from unityc.dialects.diagnostics import LocatedError
    from unityc.dialects.pipeline import microbatch_module

    try:
        microbatch_module(to_module(graph), 1)
    except (LocatedError, ValueError):
        return False
    return True


def runnable_pipeline(plan: PipelinePlan) -> bool:
    """Whether `-t torch` can run a pipelined plan, so that the search never returns one it
    cannot: stages of equal width (data or tensor parallel inside), and micro-batches that each
    compute their share of the loss (`microbatch_module`)."""
    from unityc.dialects.container import graph_function
    from unityc.dialects.diagnostics import LocatedError
    from unityc.dialects.pipeline import check_pipeline, microbatch_module

    part = plan.partition
    if part is None or len({st.width for st in part.stages}) > 1:
        return False
    try:
        module = to_module(plan.graph)
        checked = check_pipeline(graph_function(module))
        if checked is None:
            return False
        microbatch_module(module, checked[0].microbatches)
    except (LocatedError, ValueError):
        return False
    return True


def accumulation_plan(plan: PricedPlan, machine: Machine, pricing: Pricing) -> PricedPlan | None:
    """A plan that does not fit (data parallelism) with the fewest gradient accumulation steps
    that make it fit, no other lever (Galvatron's data-parallel plan with accumulation); None
    where none does. The caller checks that the graph may run in micro-batches."""
    found = with_accumulation(
        plan.graph, plan.estimate, machine, lambda g: pricing.estimate(g, machine), levers=False
    )
    if found is None:
        return None
    return PricedPlan(plan.name, found.graph, found.estimate, plan.mapped, _joined(plan.note, found.note))


def levered_plan(
    plan: PricedPlan, machine: Machine, pricing: Pricing, memo: Memo | None = None
) -> PricedPlan:
    """`plan` with memory levers if it does not fit: the better of ZeRO stages and
    recomputation added greedily (`levers.with_memory_levers`) and Galvatron-BMW's per-layer
    dynamic program over the plan's layers (`galvatron.per_layer`), its budget calibrated
    against the estimate (so it uses the memory the `galvatron` baseline leaves free); `memo`:
    per-layer choices already priced (by `galvatron_plan`)."""
    if plan.estimate.fits:
        return plan
    price = lambda g: pricing.estimate(g, machine)  # noqa: E731
    levered = with_memory_levers(plan.graph, plan.estimate, machine, price)
    best = PricedPlan(
        plan.name, levered.graph, levered.estimate, plan.mapped, _joined(plan.note, levered.note)
    )
    if plan.estimate.pipeline is None and microbatchable(plan.graph):
        accumulated = with_accumulation(plan.graph, plan.estimate, machine, price)
        if accumulated is not None and _better_estimate(accumulated.estimate, best.estimate):
            note = _joined(plan.note, accumulated.note)
            best = PricedPlan(plan.name, accumulated.graph, accumulated.estimate, plan.mapped, note)
    copies = max(
        (n.types[0].copy_degree for n in plan.graph.nodes.values() if n.op == "pcg.weight"), default=1
    )
    for layered in per_layer(plan, machine, pricing, copies, "per layer", calibrate=True, memo=memo):
        candidate = PricedPlan(
            plan.name, layered.graph, layered.estimate, plan.mapped, _joined(plan.note, layered.note)
        )
        if _better_estimate(candidate.estimate, best.estimate):
            best = candidate
    return best


def _joined(note: str, more: str) -> str:
    return "; ".join(part for part in (note, more) if part)


def _received(
    row: PlanSummary | None,
    plan: PricedPlan | None,
    report: SearchReport,
    alternatives: list[PlanSummary],
    done: list[UnityResult],
) -> None:
    """One item from the worker (`_sent`): a baseline row for the report, a plan that competes."""
    if row is not None:
        alternatives.append(row)
    if plan is not None:
        done.append(_result(plan, report, f"{plan.name} ({plan.note})", alternatives))


def _result(
    plan: PricedPlan, report: SearchReport, source: str, alternatives: list[PlanSummary]
) -> UnityResult:
    e = plan.estimate
    return UnityResult(plan.graph, e, plan.mapped, e.fits, report, source, alternatives)


def _better(a: UnityResult, b: UnityResult, memory_check: bool) -> bool:
    """Whether plan `a` beats plan `b` (`_better_estimate`)."""
    return _better_estimate(a.estimate, b.estimate, memory_check)


def _better_estimate(a: Estimate, b: Estimate, memory_check: bool = True) -> bool:
    """Whether a plan priced `a` beats one priced `b`: one that fits over one that does not,
    the smaller footprint when neither fits, else the faster (ties keep `b`)."""
    if memory_check and a.fits != b.fits:
        return a.fits
    if memory_check and not a.fits:
        return a.peak_memory < b.peak_memory
    return a.iteration_s < b.iteration_s


def tail_seconds(limit: float, graph: Graph) -> float:
    """Time kept back from a time limit for what follows the search: the report, the plan's
    conversion to IR and printing (about a millisecond per op), and a tenth for slack."""
    return 0.1 * limit + 1e-3 * len(graph.nodes)


class Stopped(BaseException):
    """Raised into a search when its time is up: a BaseException, like KeyboardInterrupt, so
    that no `except Exception` on the way swallows it."""


@contextmanager
def hard_deadline(at: float | None) -> Iterator[None]:
    """Raises `Stopped` in the block at `time.monotonic()` value `at` (SIGALRM; nothing where no
    timer signal can be had: another thread than the main one, or no `setitimer`)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if at is None or not usable:
        yield
        return
    armed = [True]

    def ring(signum: int, frame: Any) -> None:
        if armed[0]:
            raise Stopped()

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(at - time.monotonic(), 1e-3))
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def strip_views(graph: Graph) -> Graph:
    """A copy without per-op plans (machine views, stages, zero stages, recompute marks), the
    pipeline schedule of a pipelined plan, and dead nodes (what the search starts from)."""
    out = graph.copy()
    for nid, node in out.nodes.items():
        if node.plan:
            out.nodes[nid] = Node(node.op, node.operands, node.attrs, node.types, hint=node.hint)
    out.function_attrs = {k: v for k, v in out.function_attrs.items() if k not in GRAPH_PLAN_ATTRS}
    return out.prune()


__all__ = ["BOUNDARY_KEY", "UnityOptions", "UnityResult", "default_degrees", "strip_views", "unity_search"]
