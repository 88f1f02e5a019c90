"""The substitution search and the whole Unity search on small graphs (at most 8 ops, at most 4
devices), where every graph the rules reach can be enumerated."""

from __future__ import annotations

import pytest
from search_graphs import assert_same_outputs, branches, machine, mlp, rules

from unityc.cost.estimate import estimate_module, roofline_model
from unityc.graph import Graph, to_module
from unityc.graph.simplify import fuse_collectives
from unityc.search.baselines import exhaustive
from unityc.search.mapping import Mapper
from unityc.search.substitution import SubstitutionOptions, best_first
from unityc.search.unity import UnityOptions, unity_search

CASES = [
    ("cpu:2", "mlp", lambda: mlp(layers=2), None),
    ("cpu:2", "branches", branches, None),
    ("slow", "mlp", lambda: mlp(layers=2), (2,)),  # 4 devices: 2x2 hybrids, not 4-way (too many graphs)
    ("two-nodes", "mlp", lambda: mlp(width=4, layers=1), (2, 4)),
]


@pytest.mark.parametrize(("m_name", "g_name", "make", "degrees"), CASES)
def test_unlimited_search_finds_the_exhaustive_optimum(m_name: str, g_name: str, make, degrees) -> None:  # type: ignore[no-untyped-def]
    m = machine(m_name)
    graph: Graph = make()
    options = UnityOptions(
        alpha=float("inf"),
        budget=None,
        split_size=100,
        degrees=degrees,
        seeds=False,
        memory_check=False,
        whole_graph=False,
        pipelines=False,
    )
    best = exhaustive(graph, m, rules(), options)
    found = unity_search(graph, m, rules(), options)
    assert found.mapped.objective == pytest.approx(best.mapped.objective, rel=1e-9)
    assert_same_outputs(graph, found.plan)


def test_alpha_and_budget_bound_the_search() -> None:
    m = machine("slow")
    mapper = Mapper(m, roofline_model())

    def price(g: Graph):  # type: ignore[no-untyped-def]
        return mapper.map(fuse_collectives(g))

    degrees, n = (2,), m.num_devices
    unlimited = SubstitutionOptions(alpha=float("inf"), budget=None)
    everything = best_first(mlp(layers=1), price, rules(), degrees, unlimited, devices=n)
    assert everything.stats.stopped_by == "queue empty"
    capped_options = SubstitutionOptions(alpha=float("inf"), budget=3)
    capped = best_first(mlp(layers=1), price, rules(), degrees, capped_options, devices=n)
    assert capped.stats.expanded == 3 and capped.stats.stopped_by == "budget"
    greedy_options = SubstitutionOptions(alpha=1.0, budget=None)
    greedy = best_first(mlp(layers=1), price, rules(), degrees, greedy_options, devices=n)
    assert greedy.stats.priced < everything.stats.priced
    assert everything.best.objective <= greedy.best.objective <= capped.candidates[-1].objective
    assert len({c.digest for c in everything.candidates}) == len(everything.candidates)  # no duplicates


def test_the_plan_costs_what_estimate_says() -> None:
    """The search's reported cost is the estimate of the plan it emits, module round trip included."""
    m = machine("slow")
    result = unity_search(mlp(batch=64, width=64, layers=3), m, rules(), UnityOptions(budget=4))
    assert any(n.op.startswith("parallel.") for n in result.plan.nodes.values())
    again = estimate_module(to_module(result.plan), m)
    assert again.iteration_s == result.estimate.iteration_s
    assert again.peak_memory == result.estimate.peak_memory
    assert all(node.view is not None for node in result.plan.nodes.values())
