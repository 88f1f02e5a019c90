"""Searches on graphs that do not cut into a chain of segments finish with a real plan (issue
26): a language model over an `nn.LSTM` (each time step's gates side by side, the steps joined by
two states, so the mapping DP met exponentially many subproblems: pricing one candidate took
minutes and memory grew to gigabytes) and a DenseNet-style block (every layer reads all earlier
outputs: no cut point). Now one mapping solves at most `MAX_SUBPROBLEMS` subproblems by
decomposition (the rest greedily), the search prices real candidates, and its plan is at least
as fast as data parallelism (the worker prices it beside the search)."""

from __future__ import annotations

import os
from functools import cache

import pytest
from search_graphs import machine, rules

import unityc.search.mapping as mapping
from unityc.cost.estimate import roofline_model
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.search.mapping import MAX_SUBPROBLEMS, Mapper
from unityc.search.unity import UnityOptions, unity_search

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "non_chain.py")


BATCH = 256
"""Enough rows that data parallelism pays on cpu:2 for both models."""


@cache
def graph(factory: str) -> Graph:
    return from_module(import_model(ModelSpec(f"{MODELS}:{factory}", "small", BATCH)))


def test_one_mapping_solves_a_bounded_number_of_subproblems(monkeypatch: pytest.MonkeyPatch) -> None:
    lstm = graph("lstm")
    solved = []
    split = Mapper._solve_split

    def counted(self, *args):  # type: ignore[no-untyped-def]
        solved.append(1)
        return split(self, *args)

    monkeypatch.setattr(mapping.Mapper, "_solve_split", counted)
    mapped = Mapper(machine("cpu:2"), roofline_model()).map(lstm)
    assert mapped.feasible
    assert 0 < len(solved) <= MAX_SUBPROBLEMS  # unbounded: 6419 for this 6-step LSTM


@pytest.mark.parametrize("factory", ["lstm", "densenet"])
def test_a_non_chain_graph_gets_a_plan_at_least_as_good_as_data_parallel(factory: str) -> None:
    found = unity_search(graph(factory), machine("cpu:2"), rules(), UnityOptions(pipelines=False))
    assert found.report.stopped_early is None
    assert found.report.priced > 0  # real candidates, not only the plans compared with
    data = next(p for p in found.alternatives if p.name == "data-parallel")
    assert found.estimate.iteration_s <= data.estimate.iteration_s * (1 + 1e-9), found.source
