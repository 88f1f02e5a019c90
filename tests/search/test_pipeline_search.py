"""The joint search with pipelines: it never returns a plan slower than the pipeline baselines
(gpipe, pipedream, hetero-gpipe), data parallelism (over every device, or over the fastest kind's
devices of a mixed machine) or Megatron on the same input."""

from __future__ import annotations

import os
from functools import cache

import pytest

from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.passes.unity_search import load_rules
from unityc.search.baselines import run_baseline
from unityc.search.plans import Pricing, data_parallel_plan, fastest_kind_plan
from unityc.search.unity import UnityOptions, unity_search

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
DEEP_MLP = os.path.abspath(os.path.join(ROOT, "tests", "pipeline", "deep_mlp.py")) + ":make"
HETERO = os.path.abspath(os.path.join(ROOT, "examples", "machines", "hetero_v100_m4.toml"))


WIDE_CHAIN = os.path.abspath(os.path.join(os.path.dirname(__file__), "wide_chain.py")) + ":make"


@cache
def model(name: str) -> Graph:
    if name == "deep_mlp":
        return from_module(import_model(ModelSpec(DEEP_MLP, batch=64, overrides=(("layers", "6"),))))
    return from_module(import_model(ModelSpec(WIDE_CHAIN, batch=256)))


@cache
def rules() -> list:  # type: ignore[type-arg]
    return load_rules("")


@pytest.mark.parametrize(("name", "machine"), [("wide_chain", HETERO), ("deep_mlp", "summit:1")])
def test_search_is_never_slower_than_the_baselines(name: str, machine: str) -> None:
    m = load_machine(machine)
    options = UnityOptions(budget=1, split_size=6)
    found = unity_search(model(name), m, rules(), options)
    assert found.fits
    for baseline_name in ("data-parallel", "megatron", "gpipe", "pipedream", "hetero-gpipe"):
        baseline = run_baseline(baseline_name, model(name), m, rules(), options)
        if baseline.estimate.fits:
            assert found.estimate.iteration_s <= baseline.estimate.iteration_s * (1 + 1e-9), baseline_name
    fast = fastest_kind_plan(model(name), m, Pricing())
    assert (fast is None) == (machine != HETERO)
    if fast is not None:
        assert found.estimate.iteration_s <= fast.estimate.iteration_s * (1 + 1e-9)


def test_data_parallelism_over_the_fastest_kind() -> None:
    """On 2 x V100 + 2 x M4, data parallelism over the V100s alone (the M4s idle) beats it over
    all four, which waits for the M4s."""
    m = load_machine(HETERO)
    fast = fastest_kind_plan(model("wide_chain"), m, Pricing())
    assert fast is not None and fast.note == "2-way on the v100s"
    assert {d.device for d in fast.estimate.devices if d.busy_s > 0} == {0, 1}
    every = data_parallel_plan(model("wide_chain"), m, Pricing())
    assert fast.estimate.iteration_s < every.estimate.iteration_s


def test_a_pipeline_wins_on_the_mixed_machine() -> None:
    """On 2 x V100 + 2 x M4 a data-parallel plan waits for the M4s; a pipeline giving them a
    small share wins, and without pipelines the search returns a slower plan."""
    m = load_machine(HETERO)
    found = unity_search(model("wide_chain"), m, rules(), UnityOptions(budget=1, split_size=6))
    plain = unity_search(
        model("wide_chain"), m, rules(), UnityOptions(budget=1, split_size=6, pipelines=False)
    )
    assert found.estimate.pipeline is not None
    assert any(node.stage is not None for node in found.plan.nodes.values())
    assert found.estimate.iteration_s < plain.estimate.iteration_s


def test_pipelines_never_make_the_search_slower() -> None:
    """Without whole-graph plans (as in the Fig. 15a ablation) and with 1 MB per device, the
    search's own plan does not fit as it is: levered (gradient accumulation, or the per-layer
    levers' recomputation) it is the answer; a pipeline that fits but is slower must not
    displace it."""
    from dataclasses import replace

    graph = from_module(import_model(ModelSpec(DEEP_MLP, batch=1024)))
    m = load_machine("cpu:2").with_memory(1e6)
    options = UnityOptions(budget=1, split_size=6, seeds=False, whole_graph=False, pipelines=False)
    plain = unity_search(graph, m, rules(), options)
    assert plain.fits
    assert plain.source.startswith("per-layer levers") or plain.plan.plan.accumulation > 1, plain.source
    found = unity_search(graph, m, rules(), replace(options, pipelines=True))
    assert found.fits and found.estimate.iteration_s <= plain.estimate.iteration_s * (1 + 1e-9)
