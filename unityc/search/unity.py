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

What Unity's sequential ablation (`baselines.sequential`) reaches, the search reaches: the graph
as the algebraic rules alone leave it on one device (`algebraic_phase`, the ablation's first
phase) is searched by the parallel pass, and, where it differs from the input, its whole-graph
plans compete too.

The plans compared are made beside the segment search (`background.py`): the graph on one
device first (here), then data parallelism (the worker's first plan; priced here before the
search where no worker runs), so a time limit the segment search overruns still returns the
better of the two. The worker sends each plan's summary (the report's baseline row) and the
plan itself only where it can still be chosen (`sent_items`).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Sequence

from unityc.cost.estimate import compute_model, estimate_graph
from unityc.cost.profile import ProfileCache
from unityc.graph import Graph
from unityc.machine.spec import Machine
from unityc.rewrites.match import CompiledRule
from unityc.search.alternatives import alternative_plans, better_estimate, levered_plan, sent_items
from unityc.search.background import Background
from unityc.search.bounds import Bound
from unityc.search.deadline import Stopped, hard_deadline, tail_seconds
from unityc.search.galvatron import galvatron_plan
from unityc.search.mapping import Mapped, Mapper, MappingOptions
from unityc.search.options import Progress, SearchReport, UnityOptions, UnityResult, check_degrees
from unityc.search.plans import (
    PlanSummary,
    PricedPlan,
    Pricing,
    one_device_plan,
)
from unityc.search.segments import WORK_PER_EXPANSION, SegmentSearch, is_algebraic
from unityc.search.substitution import SubstitutionOptions, best_first
from unityc.search.views import Block, big_degrees, strip_views, task_degrees

ALGEBRAIC_SHARE = 0.1
"""Share of a time limit the algebraic phase (`algebraic_phase`) may take before the rest of
the search starts: it prices the whole graph once per candidate (seconds each at GPT-3's 4,000
ops), and its budget, scaled by the graph's size, would otherwise run for hours there."""

MEMORY_WEIGHTS = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5)
"""Memory rounds after the first: multiples of (iteration time / device capacity) per byte."""


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
    # Unity's sequential ablation searches the graph as the algebraic rules leave it on one
    # device: the parallel pass and the whole-graph plans start from it too, so that what the
    # ablation reaches the joint search does (it costs a few CPU seconds on a 1,600-op graph)
    phase = None if limit is None else began + ALGEBRAIC_SHARE * (limit - began)
    rewritten = _rewritten(start, machine, rules, options, profile, phase)
    # the whole-graph and pipelined plans do not depend on the segment search: priced beside it
    # (background.py), those of the rewritten graph after the input's (compared, no report rows)
    wholes = (
        Background(
            lambda: sent_items(
                itertools.chain(
                    alternative_plans(start, machine, pricing, options, fallback),
                    (
                        (None, plan)
                        for _, plan in alternative_plans(rewritten, machine, pricing, options, fallback)
                    )
                    if rewritten is not start
                    else (),
                ),
                fallback,
                options.memory_check,
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
            found = _search(start, machine, rules, options, profile, progress, report, soft, rewritten)
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


def _rewritten(
    start: Graph,
    machine: Machine,
    rules: Sequence[CompiledRule],
    options: UnityOptions,
    profile: ProfileCache | None,
    deadline: float | None = None,
) -> Graph:
    """`start` as `algebraic_phase` leaves it (by `deadline`, a `time.monotonic()` value), or
    `start` itself where that changes nothing, or the rules are all algebraic or all parallel
    (the ablation's own second phase)."""
    parallel = [r for r in rules if not is_algebraic(r)]
    if not 0 < len(parallel) < len(rules):
        return start
    rewritten = algebraic_phase(start, machine, rules, options, profile, deadline)
    return start if rewritten.structural_hash() == start.structural_hash() else rewritten


def algebraic_phase(
    start: Graph,
    machine: Machine,
    rules: Sequence[CompiledRule],
    options: UnityOptions,
    profile: ProfileCache | None = None,
    deadline: float | None = None,
) -> Graph:
    """`start` as the algebraic rules alone leave it on one device: the first phase of Unity's
    sequential ablation (`baselines.sequential`), a best-first search of the whole graph with
    the budget scaled by its size (12 ops a unit), stopped at `deadline` (a `time.monotonic()`
    value) with the best graph priced by then."""
    algebraic = [r for r in rules if is_algebraic(r)]
    pricing = Pricing(options.cost, options.optimizer, options.sync_weight, options.side_by_side, profile)
    mapper = pricing.mapper(machine)
    one = Block(0, 1)

    def price(g: Graph) -> Mapped:
        return mapper.map(g, block=one)

    budget = None if options.budget is None else options.budget * max(1, len(start.nodes) // 12)
    work = None if options.budget is None else options.budget * WORK_PER_EXPANSION
    searched = best_first(
        start, price, algebraic, (), SubstitutionOptions(options.alpha, budget, deadline, work=work)
    )
    return searched.best.graph


def _search(
    start: Graph,
    machine: Machine,
    rules: Sequence[CompiledRule],
    options: UnityOptions,
    profile: ProfileCache | None,
    progress: Progress | None,
    report: SearchReport,
    deadline: float | None,
    rewritten: Graph | None = None,
) -> UnityResult:
    """The joint search's plan: memory rounds until one fits (or the deadline passes); the
    parallel pass searches `rewritten` (`algebraic_phase`, default `start`)."""
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
        plan, mapped = SegmentSearch(
            start, machine, rules, options, mapper, deadline, report, progress, bound
        ).run()
        estimate = estimate_graph(plan, machine, options.cost, options.optimizer, profile)
        parallel = [r for r in rules if not is_algebraic(r)]
        if options.parallel_pass and 0 < len(parallel) < len(rules):
            alone = SegmentSearch(
                rewritten or start, machine, parallel, options, mapper, deadline, report, progress, bound
            ).run()
            priced = estimate_graph(alone[0], machine, options.cost, options.optimizer, profile)
            if better_estimate(priced, estimate, options.memory_check):
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


def _received(
    row: PlanSummary | None,
    plan: PricedPlan | None,
    report: SearchReport,
    alternatives: list[PlanSummary],
    done: list[UnityResult],
) -> None:
    """One item from the worker (`sent_items`): a baseline row for the report, a plan that competes."""
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
    """Whether plan `a` beats plan `b` (`better_estimate`)."""
    return better_estimate(a.estimate, b.estimate, memory_check)


__all__ = ["UnityOptions", "UnityResult", "algebraic_phase", "unity_search"]
