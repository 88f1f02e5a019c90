"""The estimate of pipelined plans (unityc/cost/staged.py) against hand-checkable facts."""

from __future__ import annotations

import os
from functools import cache

import pytest

from unityc.cost import staged
from unityc.cost.estimate import estimate_graph
from unityc.cost.staged import estimate_pipelined
from unityc.dialects.plan import Pipeline
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.graph.microbatch import microbatch_graph
from unityc.machine import load_machine
from unityc.search.gpipe import gpipe_plan

DEEP_MLP = os.path.join(os.path.dirname(__file__), "..", "pipeline", "deep_mlp.py")


@cache
def deep_mlp(layers: int = 8, batch: int = 64) -> Graph:
    return from_module(
        import_model(
            ModelSpec(os.path.abspath(DEEP_MLP) + ":make", batch=batch, overrides=(("layers", str(layers)),))
        )
    )


def test_one_stage_one_microbatch_is_the_plain_estimate() -> None:
    machine = load_machine("cpu:1")  # one device: no gradient sync (a pipeline syncs after its flush)
    plan = gpipe_plan(deep_mlp(), machine, Pipeline("gpipe", 1), 1).graph
    plain = plan.copy()
    plain.function_attrs = {}
    staged = estimate_graph(plan, machine)
    assert staged.pipeline is not None
    assert staged.iteration_s == pytest.approx(estimate_graph(plain, machine).iteration_s, rel=0.02)


def test_microbatches_divide_activations_not_weights() -> None:
    g = deep_mlp()
    micro = microbatch_graph(g, 4)
    for nid, node in g.nodes.items():
        if node.op == "pcg.weight":
            assert micro.nodes[nid].types == node.types
        if node.op == "pcg.linear":
            assert micro.nodes[nid].types[0].shape[0] * 4 == node.types[0].shape[0]
    with pytest.raises(ValueError, match="do not divide"):
        microbatch_graph(g, 5)


def test_1f1b_holds_fewer_activations_than_gpipe() -> None:
    machine = load_machine("summit:1")  # 6 devices: 3 stages x 2-way data parallel
    g = deep_mlp()
    gp = estimate_graph(gpipe_plan(g, machine, Pipeline("gpipe", 8), 3).graph, machine)
    one = estimate_graph(gpipe_plan(g, machine, Pipeline("1f1b", 8), 3).graph, machine)
    assert gp.pipeline is not None and one.pipeline is not None
    assert [r.inflight for r in gp.pipeline.groups] == [8, 8, 8]
    assert [r.inflight for r in one.pipeline.groups] == [3, 2, 1]
    first = lambda e: max(d.memory.activations for d in e.devices if d.device < 2)  # noqa: E731
    assert first(one) == pytest.approx(first(gp) * 3 / 8)
    # the same tasks in another order: with uneven stages and p2p between them the orders'
    # waits differ a little, the flush bounds both
    assert one.iteration_s == pytest.approx(gp.iteration_s, rel=0.05)


def test_more_stages_pay_more_p2p_and_2bw_has_no_flush() -> None:
    machine = load_machine("summit:1")
    plan = gpipe_plan(deep_mlp(batch=48), machine, Pipeline("1f1b", 8), 2).graph  # 8 x 3 rows split 48
    flush = estimate_pipelined(plan, machine)
    two = estimate_pipelined(plan, machine, schedule="2bw")
    assert two.iteration_s < flush.iteration_s
    assert any("one batch late" in n for n in two.notes)
    weights = lambda e: sum(d.memory.weights for d in e.devices)  # noqa: E731
    assert weights(two) == pytest.approx(2 * weights(flush))


def test_a_tied_weight_is_priced_as_the_partition_profile_prices_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """BERT's word embedding, read on stage 0 (the embedding) and stage 1 (the MLM head), is held
    by both stages (`untie`): each holds it (memory) and steps it, and its gradient is all-reduced
    over both once per iteration, not sent each micro-batch; the partition DP's profile prices the
    stages' sync and update as the estimate does."""
    import unityc.cost.staged as staged
    from unityc.search.layers import LayerCosts, Stage
    from unityc.search.partition import StageModel, stage_costs
    from unityc.search.pipeline import materialize

    graph = from_module(import_model(ModelSpec("bert", "small", 8)))
    machine = load_machine("cpu:2")
    costs = LayerCosts(graph, machine)
    stages = [Stage(0, costs.count // 2, 0, 1), Stage(costs.count // 2, costs.count, 1, 1)]
    plan = materialize(graph, machine, stages, "1f1b", 2)
    tied = staged.tied_keys(plan)
    assert list(tied) == ["word_embeddings.weight"]
    assert sorted(plan.nodes[n].stage for n in tied["word_embeddings.weight"]) == [0, 1]
    seen: list[list] = []
    simulate = staged.simulate_pipeline
    monkeypatch.setattr(staged, "simulate_pipeline", lambda c, *a: seen.append(c) or simulate(c, *a))
    e = estimate_pipelined(plan, machine)
    profile = stage_costs(StageModel(costs, 2, "1f1b"), stages)
    for est, prof in zip(seen[0], profile, strict=True):
        assert est.sync_s == pytest.approx(prof.sync_s) and est.sync_s > 0  # the copies' all-reduce
        assert est.update_s == pytest.approx(prof.update_s)
        assert est.forward_s == pytest.approx(prof.forward_s) and est.backward_s == pytest.approx(
            prof.backward_s
        )
    embedding = 128 * 32 * 4
    assert all(d.memory.weights >= embedding for d in e.devices)
    assert seen[0][1].send_back_s <= seen[0][0].send_s  # no weight gradient comes back per micro-batch


def test_pricing_cost_does_not_grow_with_microbatches(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 25: a pipelined plan is priced from one micro-batch's steps (built once) and a
    # stage-level schedule, so 32 micro-batches build as many steps as 2 (no wall-clock assertion)
    built: list[int] = []
    real = staged.build_steps

    def counting(graph, *args, **kwargs):  # type: ignore[no-untyped-def]
        steps = real(graph, *args, **kwargs)
        built.append(len(steps[2]))
        return steps

    laid: list[int] = []
    schedule = staged.simulate_pipeline

    def stages_only(costs, *args, **kwargs):  # type: ignore[no-untyped-def]
        laid.append(len(costs))
        return schedule(costs, *args, **kwargs)

    monkeypatch.setattr(staged, "build_steps", counting)
    monkeypatch.setattr(staged, "simulate_pipeline", stages_only)
    machine = load_machine("summit:1")  # 6 devices: 3 stages x 2-way data parallel
    sizes = []
    for m in (4, 32):
        plan = gpipe_plan(deep_mlp(), machine, Pipeline("1f1b", m), 3).graph
        built.clear()
        laid.clear()
        estimate_graph(plan, machine)
        sizes.append((list(built), list(laid)))
    assert len(sizes[0][0]) == 1 and sizes[0][1] == [3]  # one micro-batch's steps; one cost per stage
    assert sizes[0] == sizes[1]
