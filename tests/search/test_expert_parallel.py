"""Expert parallelism in the search (issue 40): the Megatron layout of a `Layout(expert=e)`
splits every `pcg.experts`'s experts e ways inside the data replicas (tokens as the replicas
hold them, each expert slice copied over its expert-data group) and computes what the
unparallelized graph does (the reference interpreter, its tasks reading their group's expert
slices as the all-to-all brings them); the pricing adds each group's dispatch and combine
(`cost/experts.py`); `megatron-lm` sets the expert degree as Megatron-Core users do."""

from __future__ import annotations

import pytest
from search_graphs import assert_same_outputs, moe

from unityc.cost import experts as expert_cost
from unityc.machine.presets import preset
from unityc.search.experts import graph_experts, with_experts
from unityc.search.layers import PipelineError
from unityc.search.layout import Layout
from unityc.search.megatron_lm import build, hand_expert_degree, megatron_lm_plan
from unityc.search.plans import Pricing
from unityc.search.strategies import megatron_graph


@pytest.mark.parametrize(
    "layout",
    [
        Layout(data=2, expert=2),
        Layout(data=4, expert=2),
        Layout(data=4, expert=4),
        Layout(data=2, tensor=2, expert=2),
    ],
    ids=["ep2", "ep2-edp2", "ep4", "ep2-tp2"],
)
def test_expert_layout_splits_the_experts_and_computes_the_graph(layout: Layout) -> None:
    graph = moe()
    assert graph_experts(graph) == 4
    plan = megatron_graph(graph, layout)
    (node,) = [n for n in plan.nodes.values() if n.op == "pcg.experts"]
    x, ids, gates, gate_up, down = (plan.type_of(r) for r in node.operands if r is not None)
    for w in (gate_up, down):
        assert w.shard[0] == layout.expert and w.copy_degree == layout.data * layout.tensor // layout.expert
    assert x.shard[0] == ids.shard[0] == gates.shard[0] == layout.data
    assert_same_outputs(graph, plan)


def test_pricing_adds_each_groups_all_to_alls(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, machine, pricing = moe(tokens=256, width=64, ffn=128), preset("cpu:4"), Pricing(optimizer="adam")
    plan = build(graph, machine, Layout(data=4, expert=2), pricing).graph  # placed: views on the devices
    priced = pricing.estimate(plan, machine)
    groups: list[tuple[int, ...]] = []
    real = expert_cost.experts_exchanges

    def spy(g, load, m):  # type: ignore[no-untyped-def]
        groups.extend(tuple(d) for d in g)
        assert (load.tokens, load.hidden, load.top_k, load.experts, load.skew) == (64, 64, 2, 4, 1.0)
        return real(g, load, m)

    monkeypatch.setattr("unityc.cost.pricing.experts_exchanges", spy)
    again = pricing.estimate(plan, machine)
    assert sorted(groups) == [(0, 1), (2, 3)]  # EP 2 groups within the data replicas
    assert again.iteration_s == pytest.approx(priced.iteration_s)
    monkeypatch.setattr("unityc.cost.pricing.experts_exchanges", lambda g, load, m: ([], []))
    free = pricing.estimate(plan, machine)
    assert free.iteration_s < priced.iteration_s  # the exchange is priced


def test_megatron_lm_sets_the_expert_degree_as_users_do() -> None:
    graph, machine, pricing = moe(tokens=64), preset("cpu:4"), Pricing(optimizer="adam")
    assert hand_expert_degree(graph, machine) == 4  # the experts of a node (4 per cpu:4 node)
    chosen = megatron_lm_plan(graph, machine, pricing)
    assert "expert 4" in chosen.note and "tensor 1" in chosen.note, chosen.note
    asked = megatron_lm_plan(graph, machine, pricing, expert=2)
    assert "expert 2" in asked.note and "tensor 2" in asked.note, asked.note  # TP takes the rest
    dense = megatron_lm_plan(graph, machine, pricing, expert=1)
    assert "expert" not in dense.note


@pytest.mark.parametrize(
    ("machine", "expert", "message"),
    [
        ("cpu:4", 3, "expert=3 cannot apply: it does not divide the graph's 4 experts"),
        ("cpu:2", 4, "expert=4 cannot apply beside tensor 1 on cpu:2: the expert degrees .* are 2, 1"),
        ("cpu:4", 4, "4 divides no data degree here \\(1, 2: the batch of 2 over 4 devices beside"),
    ],
)
def test_megatron_lm_names_an_expert_degree_it_cannot_apply(machine: str, expert: int, message: str) -> None:
    """An `expert=N` the graph, the machine or the data degrees cannot take is an error that
    says why, not a plan without expert parallelism (nor a message about pipeline tilings)."""
    graph, pricing = moe(tokens=2), Pricing(optimizer="adam")
    with pytest.raises(PipelineError, match=message):
        megatron_lm_plan(graph, preset(machine), pricing, expert=expert)


def test_expert_degrees_divide_the_data_replicas_not_the_context_ranks() -> None:
    """The expert axis is carved out of the data replicas (the tokens of `pcg.experts` split over
    data x e): a layout of data 1 x context 2 gets no expert degree 2 (its Megatron layout would
    keep every expert on every replica under an "expert 2" label; `_Megatron._experts` refuses it)."""
    graph, machine = moe(), preset("cpu:2")
    assert [lay.expert for lay in with_experts([Layout(data=1, context=2)], graph, machine)] == [1]
    assert [lay.expert for lay in with_experts([Layout(data=2)], graph, machine)] == [2, 1]
