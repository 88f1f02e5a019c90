"""Pruning whole families of candidates by bounds (issue 14): the pipeline bound is below every
runnable pipelined plan's time, the search skips pipelines where it cannot beat a plan at hand
(and returns the same plan as without them), and graphs whose micro-batches cannot compute the
loss (batch norm) get no pipeline candidates at all. Likewise the levered plans (zero,
Galvatron): their bound is below every levered version of a plan, and those that cannot win
are not priced; the background worker sends back in full only the plans that can win."""

from __future__ import annotations

from functools import cache

import pytest
from helpers import BATCH_NORM, DEEP_MLP

from unityc.dialects.source import make_context, parse_source
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.passes.unity_search import load_rules
from unityc.search.alternatives import (
    alternative_plans,
    better_estimate,
    microbatchable,
    pipeline_plans,
    pipelines_pruned,
    sent_items,
    whole_graph_plans,
)
from unityc.search.bounds import levers_bound, pipeline_bound
from unityc.search.galvatron import per_layer
from unityc.search.layers import batch_size
from unityc.search.levers import with_memory_levers
from unityc.search.options import SearchReport
from unityc.search.pipeline import PipelineOptions, pipeline_candidates
from unityc.search.plans import Pricing, data_parallel_plan, megatron_plans, one_device_plan, zero_version
from unityc.search.unity import (
    UnityOptions,
    _result,
    unity_search,
)
from unityc.search.views import strip_views


@cache
def deep_mlp() -> Graph:
    return strip_views(from_module(import_model(ModelSpec(DEEP_MLP, batch=64, overrides=(("layers", "6"),)))))


@pytest.mark.parametrize("machine", ["cpu:4", "summit:1", "dgx-a100:1"])
def test_the_pipeline_bound_is_below_every_runnable_pipeline(machine: str) -> None:
    m = load_machine(machine)
    graph = deep_mlp()
    one = one_device_plan(graph, m, Pricing())
    bound = pipeline_bound(one.estimate, m, batch_size(graph), "roofline")
    assert bound > 0
    plans = [
        p
        for p in pipeline_candidates(graph, m, PipelineOptions())
        if p.partition is not None
        and p.partition.tensor == 1
        and len({st.width for st in p.partition.stages}) == 1
    ]
    assert plans
    for p in plans:
        assert bound <= p.estimate.iteration_s * (1 + 1e-9), (p.name, p.note)


def test_the_pipeline_bound_holds_at_any_device_count() -> None:
    """Priced at any size (it returned 0 above 4,096 devices): more devices of one kind never
    raise it (a superset of splits, each as fast or faster), and 8,192 devices bound it above 0."""
    small, big = load_machine("dgx-a100:2"), load_machine("dgx-a100:1024")
    one = one_device_plan(deep_mlp(), small, Pricing())
    batch = 8192 * 4
    at_small = pipeline_bound(one.estimate, small, batch, "roofline")
    at_big = pipeline_bound(one.estimate, big, batch, "roofline")
    assert 0 < at_big <= at_small


def test_no_bound_where_it_would_not_hold() -> None:
    m = load_machine("cpu:4")
    one = one_device_plan(deep_mlp(), m, Pricing())
    assert pipeline_bound(one.estimate, m, 64, "profile") == 0.0  # measured kernels may not scale
    assert pipeline_bound(one.estimate, load_machine("cpu:1"), 64, "roofline") == 0.0


def test_the_search_skips_pipelines_that_cannot_win() -> None:
    """On cpu:2 the graph's plan on one device beats any pipeline (a p2p message costs more than
    the whole model's compute): no pipeline candidate is built, and the plan is what the
    search with every pipeline candidate priced returns."""
    m = load_machine("cpu:2")
    graph = deep_mlp()
    one = unity_search(graph, m, load_rules(""), UnityOptions(budget=1, split_size=6))
    priced = pipeline_plans(graph, m, Pricing())
    assert priced and all(p.estimate.iteration_s > one.estimate.iteration_s for p in priced)
    at_hand = _result(one_device_plan(graph, m, Pricing()), one.report, "one device", [])
    assert pipelines_pruned(graph, m, Pricing(), at_hand, at_hand.estimate.iteration_s)
    assert one.estimate.pipeline is None


def test_no_pipeline_candidates_for_a_graph_mixing_samples() -> None:
    graph = from_module(parse_source(make_context(), BATCH_NORM, "bn.mlir"))
    assert not microbatchable(graph)
    assert pipeline_plans(graph, load_machine("cpu:4"), Pricing()) == []
    assert microbatchable(deep_mlp())


@pytest.mark.parametrize("machine", ["cpu:4", "dgx-a100:1"])
def test_the_levers_bound_is_below_every_levered_plan(machine: str) -> None:
    """Every ZeRO stage with and without recomputation, the greedy levers and Galvatron's
    per-layer plans, on the data-parallel and Megatron plans of a 6-layer MLP with Adam, on
    devices holding 40 % of the data-parallel plan (so the levers have work to do)."""
    roomy = load_machine(machine)
    pricing = Pricing(optimizer="adam")
    graph = deep_mlp()
    m = roomy.with_memory(data_parallel_plan(graph, roomy, pricing).estimate.peak_memory * 0.4)
    bases = [data_parallel_plan(graph, m, pricing), *megatron_plans(graph, m, pricing)]
    assert not any(b.estimate.fits for b in bases)
    for base in bases:
        greedy = with_memory_levers(base.graph, base.estimate, m, lambda g: pricing.estimate(g, m))
        levered = [greedy.estimate]
        levered += [p.estimate for p in per_layer(base, m, pricing, 2, "test")]
        any_levers = levers_bound(base.graph, base.estimate, m, "adam")
        assert 0 < any_levers <= base.estimate.iteration_s
        for stage in (1, 2, 3):
            bound = levers_bound(base.graph, base.estimate, m, "adam", stage)
            assert any_levers <= bound
            for recompute in (False, True):
                zero = zero_version(base, m, pricing, stage, recompute).estimate
                assert bound <= zero.iteration_s
                levered.append(zero)
        assert all(any_levers <= e.iteration_s for e in levered)


def test_the_search_skips_levered_plans_that_cannot_win() -> None:
    """On cpu:4 the graph on one device beats data parallelism and every levered version of it
    (a gloo message takes 0.9 ms): no zero or Galvatron plan is priced, and the worker sends no plan
    back in full (none can be chosen over the one-device plan), only the baseline rows."""
    m = load_machine("cpu:4")
    graph = deep_mlp()
    pricing = Pricing()
    one = _result(one_device_plan(graph, m, pricing), SearchReport(), "one device", [])
    every = [plan for _, plan, _ in whole_graph_plans(graph, m, pricing, True)]
    assert {"zero", "galvatron"} <= {p.name for p in every}
    assert all(p.estimate.iteration_s > one.estimate.iteration_s for p in every)
    options = UnityOptions(pipelines=False)
    made = list(alternative_plans(graph, m, pricing, options, one))
    assert {p.name for _, p in made} == {"data-parallel", "megatron"}
    sent = list(sent_items(iter(made), one, True))
    assert [row.name for row, _ in sent if row is not None] == [p.name for p, _ in made if p is not None]
    assert all(plan is None for _, plan in sent)


def test_the_worker_sends_in_full_every_plan_that_can_win() -> None:
    """Without a plan at hand, the first plan and each that beats all before it are sent in full;
    the best of all is among them."""
    m = load_machine("dgx-a100:1")
    graph = deep_mlp()
    made = list(alternative_plans(graph, m, Pricing(), UnityOptions(pipelines=False), None))
    sent = [plan for _, plan in sent_items(iter(made), None, True)]
    assert sent[0] is made[0][1] and 0 < sum(p is not None for p in sent) < len(sent)
    best = made[0][1]
    for _, plan in made[1:]:
        if better_estimate(plan.estimate, best.estimate):
            best = plan
    assert any(p is best for p in sent)
