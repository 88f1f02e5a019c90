"""Pruning whole families of candidates by bounds (issue 14): the pipeline bound is below every
runnable pipelined plan's time, the search skips pipelines where it cannot beat a plan at hand
(and returns the same plan as without them), and graphs whose micro-batches cannot compute the
loss (batch norm) get no pipeline candidates at all."""

from __future__ import annotations

from functools import cache

import pytest
from helpers import DEEP_MLP

from unityc.dialects.source import make_context, parse_source
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.passes.unity_search import load_rules
from unityc.search.bounds import pipeline_bound
from unityc.search.pipeline import PipelineOptions, batch_size, pipeline_candidates
from unityc.search.plans import Pricing, one_device_plan
from unityc.search.unity import (
    UnityOptions,
    _result,
    microbatchable,
    pipeline_plans,
    pipelines_pruned,
    strip_views,
    unity_search,
)


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


BATCH_NORM = """
func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" : !pcg.tensor<8x4x2x2xf32>
  %w = pcg.weight key "w" : !pcg.tensor<4x4x1x1xf32>
  %c = pcg.conv2d %x, %w : !pcg.tensor<8x4x2x2xf32>, !pcg.tensor<4x4x1x1xf32> -> !pcg.tensor<8x4x2x2xf32>
  %n = pcg.batch_norm %c eps 1.0e-05 : !pcg.tensor<8x4x2x2xf32> -> !pcg.tensor<8x4x2x2xf32>
  %l = pcg.reduce %n kind "mean" dims [0, 1, 2, 3] : !pcg.tensor<8x4x2x2xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
"""


def test_no_pipeline_candidates_for_a_graph_mixing_samples() -> None:
    graph = from_module(parse_source(make_context(), BATCH_NORM, "bn.mlir"))
    assert not microbatchable(graph)
    assert pipeline_plans(graph, load_machine("cpu:4"), Pricing()) == []
    assert microbatchable(deep_mlp())
