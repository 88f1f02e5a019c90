"""The plans the joint search's result is compared with (see `unity.py`): whole-graph
data-parallel and Megatron plans, the `zero` and `galvatron` baselines' plans, plans with
memory levers or gradient accumulation, the `megatron-lm` plan and the pipelined plans; each
pruned by a lower bound of its time where it cannot beat a plan at hand.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence

from unityc.cost.estimate import Estimate
from unityc.dialects.plan import ZERO_STAGES
from unityc.graph import Graph
from unityc.graph.microbatch import check_plan, microbatchable
from unityc.machine.spec import Machine
from unityc.search.bounds import levers_bound, pipeline_bound, three_d_bound
from unityc.search.branches import branch_plan
from unityc.search.galvatron import Memo, base_plans, galvatron_plan, per_layer
from unityc.search.layers import PipelineError, batch_size
from unityc.search.layout import Layout
from unityc.search.levers import with_accumulation, with_memory_levers
from unityc.search.megatron_lm import megatron_lm_plan, three_d_plans
from unityc.search.options import UnityOptions, UnityResult
from unityc.search.pipeline import PipelineOptions, PipelinePlan, pipeline_candidates
from unityc.search.plans import (
    PlanSummary,
    PricedPlan,
    Pricing,
    data_parallel_plan,
    fastest_kind_plan,
    megatron_plans,
    spatial_plans,
    zero_version,
)

Worth = Callable[[float], bool]
"""Whether a plan whose iteration takes at least this many seconds could still be chosen."""


def whole_graph_plans(
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
    branches = branch_plan(graph, machine, pricing)  # Inception's branches on disjoint groups
    if branches is not None:
        yield None, branches, True
    bases = base_plans(graph, machine, pricing, dp + megatron).values() if levers else ()
    if any(leverable(base) for base in bases):  # Galvatron levers one of these
        with contextlib.suppress(ValueError):  # no layer strategy fits at any degree
            galvatron = galvatron_plan(graph, machine, pricing, dp + megatron, memo)
            yield galvatron, galvatron, False
            calibrated = galvatron_plan(graph, machine, pricing, dp + megatron, memo, calibrate=True)
            yield None, calibrated, False


def alternative_plans(
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

    def fastest() -> float:
        return best

    unfit: list[PricedPlan] = []
    memo: Memo = {}
    hand: list[PricedPlan | None] = []
    """The megatron-lm plan once priced (None: it cannot be had): early where data parallelism
    does not fit (a big model: it is the plan most likely to fit, and a time limit keeps it),
    else with the pipelines."""
    made: list[PricedPlan] = []
    """Every plan the megatron-lm scan priced, which the 3-D scan reuses where it repeats one."""
    if options.whole_graph:
        for alternative, plan, bare in whole_graph_plans(
            graph, machine, pricing, options.levers, memo, worth
        ):
            if plan.estimate.fits or not options.memory_check:
                best = min(best, plan.estimate.iteration_s)
            yield alternative, plan
            if options.levers and bare and not plan.estimate.fits:
                unfit.append(plan)
            if options.pipelines and plan.name == "data-parallel" and not plan.estimate.fits and not hand:
                hand.append(megatron_lm_candidate(graph, machine, pricing, made))
                if hand[0] is not None:
                    if hand[0].estimate.fits or not options.memory_check:
                        best = min(best, hand[0].estimate.iteration_s)
                    yield hand[0], hand[0]
                for plan in three_d_candidates(graph, machine, pricing, one, fastest, made):
                    best = min(best, plan.estimate.iteration_s)
                    yield plan, plan
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
    if options.pipelines and not hand:  # the 3-D plans: bounded by their own compute, not a pipeline's
        for plan in three_d_candidates(graph, machine, pricing, one, fastest):
            best = min(best, plan.estimate.iteration_s)
            yield plan, plan
    if options.pipelines and not pipelines_pruned(graph, machine, pricing, one, best):
        if not hand:
            hand.append(megatron_lm_candidate(graph, machine, pricing))
            if hand[0] is not None:
                yield hand[0], hand[0]
        for plan in pipeline_plans(graph, machine, pricing):
            lever = options.levers and not plan.estimate.fits
            yield plan, levered_plan(plan, machine, pricing) if lever else plan


def sent_items(
    items: Iterator[tuple[PricedPlan | None, PricedPlan]], one: UnityResult | None, memory_check: bool
) -> Iterator[tuple[PlanSummary | None, PricedPlan | None]]:
    """`alternative_plans`' items as the worker sends them back: each baseline row as its
    summary, and the plan compared only where it can still be chosen, i.e. it beats every plan
    made before it and is not beaten by the graph on one device `one` (the result is the first
    best of the search's plan, these in order, and `one`: a plan no better than one before it
    never is). A plan is megabytes to send and read back; its summary a few bytes."""
    best: Estimate | None = None
    for alternative, plan in items:
        e = plan.estimate
        ahead = best is None or better_estimate(e, best, memory_check)
        beaten = one is not None and better_estimate(one.estimate, e, memory_check)
        best = e if ahead else best
        yield None if alternative is None else alternative.summary(), plan if ahead and not beaten else None


def pipelines_pruned(
    graph: Graph, machine: Machine, pricing: Pricing, one: UnityResult | None, best: float
) -> bool:
    """Whether no pipelined plan of `graph` can be faster than `best` seconds (see
    `bounds.pipeline_bound`; `one` is the graph's plan on one device)."""
    if one is None or best == math.inf:
        return False
    try:
        batch = batch_size(graph)
    except PipelineError:
        return False
    return pipeline_bound(one.estimate, machine, batch, pricing.cost) >= best


def megatron_lm_candidate(
    graph: Graph, machine: Machine, pricing: Pricing, tried: list[PricedPlan] | None = None
) -> PricedPlan | None:
    """The `megatron-lm` baseline's plan (`megatron_lm.py`), a pipelined plan the search's
    result competes with; None on one device, where micro-batches cannot compute the loss, or
    where the machine and batch allow no configuration. `tried` (an empty list) gets every plan
    priced on the way (`megatron_lm_plan`)."""
    if machine.num_devices < 2 or not microbatchable(graph):
        return None
    try:
        return megatron_lm_plan(graph, machine, pricing, tried=tried)
    except (PipelineError, ValueError):
        return None


def three_d_candidates(
    graph: Graph,
    machine: Machine,
    pricing: Pricing,
    one: UnityResult | None,
    best: Callable[[], float],
    priced: Sequence[PricedPlan] = (),
) -> Iterator[PricedPlan]:
    """The search's own 3-D plans (`megatron_lm.three_d_plans`: tensor x pipeline x data, ZeRO-1,
    recomputation none / attention core / full, accumulation to the global batch), each fitting,
    as priced; a recomputation level whose lower bound (`bounds.three_d_bound`, from the graph
    on one device `one`) cannot beat the fastest fitting plan at hand (`best()`) is skipped.
    None on one device or where micro-batches cannot compute the loss. The plans the
    `megatron-lm` scan `priced` (its pick and the stage counts it tried) are reused where a
    candidate repeats their configuration (a 70B plan is costly to price)."""
    if machine.num_devices < 2 or not microbatchable(graph):
        return

    def worth(shape: Layout) -> bool:
        if one is None:
            return True
        bound = three_d_bound(one.estimate, machine, pricing.cost, shape)
        return bound < best()

    with contextlib.suppress(PipelineError):  # no batched input
        yield from three_d_plans(graph, machine, pricing, worth, priced)


def pipeline_plans(graph: Graph, machine: Machine, pricing: Pricing) -> list[PricedPlan]:
    """The pipelined plans the search considers (`pipeline.pipeline_candidates`), as plans."""
    if not microbatchable(graph):
        return []
    options = PipelineOptions(pricing.cost, pricing.optimizer, pricing.profile)
    candidates = [p for p in pipeline_candidates(graph, machine, options) if runnable_pipeline(p)]
    return [PricedPlan(p.name, p.graph, p.estimate, None, p.note) for p in candidates]


def runnable_pipeline(plan: PipelinePlan) -> bool:
    """Whether `-t torch` can run a pipelined plan, so that the search never returns one it
    cannot: stages of equal width (data or tensor parallel inside), and micro-batches that each
    compute their share of the loss: `graph.microbatch.check_plan`, the rules `-t torch` applies."""
    part = plan.partition
    if part is None or len({st.width for st in part.stages}) > 1:
        return False
    try:
        return check_plan(plan.graph) is not None
    except ValueError:
        return False


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
        if accumulated is not None and better_estimate(accumulated.estimate, best.estimate):
            note = _joined(plan.note, accumulated.note)
            best = PricedPlan(plan.name, accumulated.graph, accumulated.estimate, plan.mapped, note)
    copies = max(
        (n.types[0].copy_degree for n in plan.graph.nodes.values() if n.op == "pcg.weight"), default=1
    )
    for layered in per_layer(plan, machine, pricing, copies, "per layer", calibrate=True, memo=memo):
        candidate = PricedPlan(
            plan.name, layered.graph, layered.estimate, plan.mapped, _joined(plan.note, layered.note)
        )
        if better_estimate(candidate.estimate, best.estimate):
            best = candidate
    return best


def _joined(note: str, more: str) -> str:
    return "; ".join(part for part in (note, more) if part)


def better_estimate(a: Estimate, b: Estimate, memory_check: bool = True) -> bool:
    """Whether a plan priced `a` beats one priced `b`: one that fits over one that does not,
    the smaller footprint when neither fits, else the faster (ties keep `b`)."""
    if memory_check and a.fits != b.fits:
        return a.fits
    if memory_check and not a.fits:
        return a.peak_memory < b.peak_memory
    return a.iteration_s < b.iteration_s
