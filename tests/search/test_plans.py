"""Searched plans of the zoo's small configs compute what the unparallelized graphs compute (by
the reference interpreter), fit memory when anything can, and the baselines do too."""

from __future__ import annotations

import os

import pytest
from search_graphs import INPUTS, assert_same_outputs, machine, mlp, rules

from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.machine import load_spec_file
from unityc.search.baselines import data_parallel, megatron, sequential
from unityc.search.unity import UnityOptions, unity_search

ZOO = ["mlp", "bert", "dlrm", "xdl", "candle_uno", "resnext50", "inception_v3"]


def parallel_ops(plan) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for n in plan.nodes.values() if n.op.startswith("parallel."))


@pytest.mark.parametrize(
    ("model", "m_name"),
    # on cpu:2 the small MLP's step (0.8 ms) is shorter than one gloo collective with its
    # hand-off (`DeviceKind.collective_handoff`), so one device is its plan: DLRM's is searched
    [*((m, "slow") for m in ZOO), ("dlrm", "cpu:2"), ("bert", "cpu:4")],
)
def test_searched_plans_compute_the_same_values(model: str, m_name: str) -> None:
    graph = from_module(import_model(ModelSpec(model, "small")))
    options = UnityOptions(
        budget=2 if model != "inception_v3" else 1, split_size=10, whole_graph=False, pipelines=False
    )
    result = unity_search(graph, machine(m_name), rules(), options)  # the search's own plan
    assert result.source == "search"
    to_module(result.plan).verify()
    assert all(node.view is not None for node in result.plan.nodes.values())
    if m_name == "slow":  # parallelism pays there: the plan must hold some
        assert parallel_ops(result.plan) > 0
    assert_same_outputs(graph, result.plan)


@pytest.mark.parametrize("model", ["bert", "resnext50"])
def test_baselines_compute_the_same_values(model: str) -> None:
    graph = from_module(import_model(ModelSpec(model, "small")))
    m = machine("slow")
    for plan in (data_parallel(graph, m), megatron(graph, m)):
        assert parallel_ops(plan.graph) > 0, plan.name
        assert_same_outputs(graph, plan.graph)


def test_memory_limit_is_respected() -> None:
    """One device is fastest but the model does not fit there: the search shards it."""
    m = load_spec_file(os.path.join(INPUTS, "tight_memory.toml"))
    graph = mlp(batch=64, width=64, layers=3)
    ignoring = unity_search(graph, m, rules(), UnityOptions(budget=8, memory_check=False))
    assert not ignoring.fits
    result = unity_search(graph, m, rules(), UnityOptions(budget=8))
    assert result.fits and result.estimate.fits
    assert all(d.memory.total <= d.capacity for d in result.estimate.devices)
    assert len(result.report.rounds) > 1  # memory rounds ran (the plan that fits may come from
    # a whole-graph plan given memory levers rather than from the last round)
    assert_same_outputs(graph, result.plan)


def test_nothing_fits_is_reported_with_the_smallest_footprint() -> None:
    m = load_spec_file(os.path.join(INPUTS, "tight_memory.toml"))
    graph = mlp(batch=512, width=256, layers=3)  # megabytes of weights: no plan fits 96 KiB
    result = unity_search(graph, m, rules(), UnityOptions(budget=2))
    assert not result.fits
    # the smallest footprint found: the search's rounds', a pipeline's (stages split the weights)
    # or a whole-graph plan's with memory levers
    assert result.estimate.peak_memory <= min(peak for _, peak, _ in result.report.rounds)
    levered = any(n.zero or n.recompute for n in result.plan.nodes.values())
    assert levered or result.estimate.pipeline is not None


def test_sequential_baseline_computes_the_same_values() -> None:
    graph = mlp(batch=64, width=64, layers=3)
    plan = sequential(graph, machine("slow"), rules(), UnityOptions(budget=4))
    assert plan.estimate.iteration_s > 0
    assert_same_outputs(graph, plan.graph)
