"""The estimate of a plan with gradient accumulation (`unityc.accumulation = k`): k micro-batches
of 1/k of the batch priced one after another, the gradient sync and the update once, the
activations of one micro-batch; and accumulation as a memory lever of the search."""

from __future__ import annotations

import os
from functools import cache

import pytest

from unityc.cost.estimate import Estimate, estimate_graph
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.graph.microbatch import microbatch_graph
from unityc.machine import load_machine
from unityc.search.levers import accumulated, accumulation_steps, with_accumulation
from unityc.search.plans import Pricing, data_parallel_plan

DEEP_MLP = os.path.join(os.path.dirname(__file__), "..", "pipeline", "deep_mlp.py")
MACHINE = "dgx-a100:1"


@cache
def dp_plan(batch: int = 4096) -> Graph:
    """The 8-way data-parallel plan of a deep MLP on 8 A100s (Adam)."""
    graph = from_module(
        import_model(
            ModelSpec(os.path.abspath(DEEP_MLP) + ":make", batch=batch, overrides=(("layers", "8"),))
        )
    )
    return data_parallel_plan(graph, load_machine(MACHINE), Pricing(optimizer="adam")).graph


def priced(graph: Graph) -> Estimate:
    return estimate_graph(graph, load_machine(MACHINE), optimizer="adam")


@pytest.mark.parametrize("k", [2, 4])
def test_k_micro_batches_one_sync_one_update(k: int) -> None:
    """k steps cost more than one micro-batch's whole iteration, and no more than it plus k - 1
    forward-and-backward passes: the gradient sync and update after the last backward only."""
    plan = dp_plan()
    micro = priced(microbatch_graph(plan, k))  # one micro-batch, with its sync and update
    e = priced(accumulated(plan, k))
    assert e.iteration_s > micro.iteration_s
    assert e.iteration_s <= micro.iteration_s + (k - 1) * micro.backward_s + 1e-12
    assert e.iteration_s - micro.iteration_s >= (k - 1) * micro.forward_s  # each step's forward, at least
    assert any("gradient accumulation: " + str(k) in note for note in e.notes)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_activations_of_one_micro_batch_and_the_same_model_flops(k: int) -> None:
    whole, e = priced(dp_plan()), priced(accumulated(dp_plan(), k))
    for a, b in zip(whole.devices, e.devices, strict=True):
        assert (b.memory.weights, b.memory.gradients, b.memory.optimizer) == (
            a.memory.weights,
            a.memory.gradients,
            a.memory.optimizer,
        )
        assert b.memory.activations == pytest.approx(a.memory.activations / k, rel=1e-9)
    assert e.model_flops == pytest.approx(whole.model_flops, rel=1e-9)
    assert e.plan_flops == pytest.approx(whole.plan_flops, rel=1e-9)


def test_accumulation_is_a_graph_plan_property() -> None:
    plan = accumulated(dp_plan(), 4)
    assert plan.plan.accumulation == 4 and plan.plan.pipeline is None
    assert accumulation_steps(dp_plan()) == [2, 4, 8, 16, 32, 64]  # 4096 rows in 8 pieces: 512 each
    assert accumulation_steps(dp_plan(24)) == []  # 3 rows per piece: none of 2, 4, ...
    assert dp_plan().plan.accumulation == 1


def test_the_lever_finds_the_fewest_steps_that_fit() -> None:
    plan = dp_plan()
    whole = priced(plan)
    one_micro = {k: priced(accumulated(plan, k)).peak_memory for k in (2, 4, 8)}
    budget = (one_micro[2] + one_micro[4]) / 2  # between 2 and 4 steps: 4 fits, 2 does not
    machine = load_machine(MACHINE).with_memory(budget)
    price = lambda g: estimate_graph(g, machine, optimizer="adam")  # noqa: E731
    e = price(plan)
    assert not e.fits
    found = with_accumulation(plan, e, machine, price, levers=False)
    assert found is not None and found.graph.plan.accumulation == 4 and found.estimate.fits
    assert found.note == "4 accumulation steps"
    assert whole.peak_memory > budget


def test_steps_that_do_not_divide_the_batch_are_refused() -> None:
    with pytest.raises(ValueError, match="3 micro-batches do not divide the batch"):
        priced(accumulated(dp_plan(), 3))
