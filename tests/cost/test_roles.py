"""Pricing by roles (`cost/roles.py`) gives the per-device estimate: every zoo plan (the
baselines, ZeRO with recomputation, the search's own plan) priced both ways on machines of
several nodes agrees on every figure, every op row and every device; and the roles of symmetric
plans are few whatever the machine's size."""

from __future__ import annotations

import os
from functools import cache

import pytest

from unityc.cost.estimate import Estimate, estimate_graph
from unityc.cost.roles import device_array, device_arrays, find_roles
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.search.baselines import data_parallel, megatron, megatron_lm, pipeline_baseline, zero
from unityc.search.bounds import levers_bound
from unityc.search.unity import UnityOptions, unity_search

ZOO = ["mlp", "bert", "dlrm", "xdl", "candle_uno", "resnext50"]
"""The zoo but Inception-v3 (its search takes minutes here; ResNeXt-50 covers convolutions)."""
FIGURES = ("iteration_s", "forward_s", "backward_s", "plan_flops", "model_flops", "roofline_s",
           "peak_memory", "fits", "buckets", "sync_after_s", "devices_used", "notes")  # fmt: skip
ROW_FIGURES = ("fwd_compute_s", "bwd_compute_s", "fwd_comm_s", "bwd_comm_s", "pattern", "collectives",
               "comm_bytes", "flops", "memory", "device_count")  # fmt: skip


@cache
def model(name: str) -> Graph:
    return from_module(import_model(ModelSpec(name, "small")))


def plans(name: str, machine_name: str) -> dict[str, Graph]:
    graph, m = model(name), load_machine(machine_name)
    out = {
        "data-parallel": data_parallel(graph, m).graph,
        "megatron": megatron(graph, m).graph,
        "zero-3 recomputed": zero(graph, m, stage=3, recompute=True).graph,
    }
    options = UnityOptions(budget=1, split_size=10, pipelines=False)
    out["search"] = unity_search(graph, m, [], options).plan
    return out


def same(x: object, y: object) -> bool:
    if isinstance(x, float) and isinstance(y, float | int):
        return x == pytest.approx(y, rel=1e-12, abs=0)
    return x == y


def assert_same(a: Estimate, b: Estimate, what: str) -> None:
    """Equal figures; sums over devices may differ in the last bits (added in another order)."""
    for f in FIGURES:
        assert same(getattr(a, f), getattr(b, f)), (what, f, getattr(a, f), getattr(b, f))
    assert len(a.rows) == len(b.rows)
    for ra, rb in zip(a.rows, b.rows, strict=True):
        for f in ROW_FIGURES:
            assert same(getattr(ra, f), getattr(rb, f)), (what, ra.name, f, getattr(ra, f), getattr(rb, f))
    for row in a.devices:
        other = b.device(row.device)
        assert (row.compute_s, row.comm_s, row.busy_s) == pytest.approx(
            (other.compute_s, other.comm_s, other.busy_s), rel=1e-12, abs=0
        ), (what, row.device)
        assert row.memory.total == pytest.approx(other.memory.total, rel=1e-12), (what, row.device)
        assert same(row.memory.peak, other.memory.peak), (what, row.device)  # None: a pipeline's


@pytest.mark.parametrize("machine_name", ["dgx-a100:2", "summit:2"])
@pytest.mark.parametrize("name", ZOO)
def test_roles_price_as_every_device(name: str, machine_name: str) -> None:
    m = load_machine(machine_name)
    for plan_name, plan in plans(name, machine_name).items():
        every = estimate_graph(plan, m, optimizer="adam", roles=False)
        by_roles = estimate_graph(plan, m, optimizer="adam", roles=True)
        assert every.roles is None and by_roles.roles is not None
        assert sum(by_roles.roles.counts) == m.num_devices
        assert_same(every, by_roles, f"{name} {plan_name} on {machine_name}")


@pytest.mark.parametrize("nodes", [2, 8, 32])
def test_a_data_parallel_plan_has_as_many_roles_at_any_size(nodes: int) -> None:
    """The device holding the loss, and every other: two roles on 16 devices as on 256."""
    m = load_machine(f"dgx-a100:{nodes}")
    graph = from_module(import_model(ModelSpec("mlp", "small", batch=256)))  # a batch every size splits
    plan = data_parallel(graph, m).graph
    arrays = {nid: device_array(n.types[0], n.view, m) for nid, n in plan.nodes.items()}
    roles = find_roles(plan, m, arrays)
    assert sum(roles.counts) == m.num_devices
    assert len(roles.reps) <= 4
    assert roles.reps[0] == 0


def test_a_machine_above_the_threshold_is_priced_by_roles() -> None:
    m = load_machine("dgx-a100:16")
    plan = data_parallel(model("mlp"), m).graph
    estimate = estimate_graph(plan, m)
    assert estimate.roles is not None and len(estimate.devices) <= len(estimate.roles.reps)
    assert estimate.devices_used == sum(d.count for d in estimate.devices) <= m.num_devices
    used = {row.device for row in estimate.devices}
    for d in range(m.num_devices):  # a device's row is its role's
        if estimate.roles.rep_of(d) in used:
            assert estimate.device(d).device == estimate.roles.rep_of(d)


HETERO = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", "examples", "machines", "hetero_v100_m4.toml")
)


def pipelined_plans(name: str, machine_name: str) -> dict[str, Graph]:
    graph, m = from_module(import_model(ModelSpec(name, "small", 8))), load_machine(machine_name)
    out = {p: pipeline_baseline(p, graph, m).graph for p in ("gpipe", "pipedream", "hetero-gpipe")}
    out["megatron-lm"] = megatron_lm(graph, m, tensor=2, stages=2, sequence=False).graph
    return out


def test_a_sequence_parallel_plan_prices_as_every_device() -> None:
    """Megatron-LM's 3-D plan with sequence parallelism: each add reading the position
    embedding (sharded on the sequence, copied over the batch) finds its piece on its own device
    on some devices and receives it on others (two roles, not one), and the roles' symmetry
    reverses the order of a weight's copy group (roles 0,1,2,3,3,2,1,0: its two groups are one
    collective's mirror images, counted once each)."""
    graph, m = from_module(import_model(ModelSpec("bert", "small", 8))), load_machine("dgx-a100:2")
    plan = megatron_lm(graph, m, tensor=2, stages=2, sequence=True).graph
    every = estimate_graph(plan, m, optimizer="adam", roles=False)
    by_roles = estimate_graph(plan, m, optimizer="adam", roles=True)
    assert_same(every, by_roles, "bert megatron-lm (sequence parallel) on dgx-a100:2")


GPT2 = (("hidden", "32"), ("layers", "1"), ("heads", "8"), ("ffn", "64"), ("vocab", "128"), ("seq", "16"))
"""A small GPT-2 that splits 8 ways over its heads (every size set: no small-config warning)."""


def test_a_position_table_read_over_sequence_and_data_stays_on_its_readers() -> None:
    """GPT-2's learned position table, read by the position lookup of a sequence-parallel plan
    (tensor 8 x data 4 on 32 GPUs): each task reads the copy numbered sequence-major then batch
    (`copy=(d0, d1, copy)`), which no single-stride view of the table holds where its readers
    are. Its copies are interchangeable (`transfers.read_from`), so the view with each piece's
    copies in device order puts one on every reader: the lookup keeps its natural view, the
    add after it moves nothing (on main the DP transposed the lookup and 30 of the add's 32
    tasks received their piece: 16 roles here, 6,144 pairs at 12,288 GPUs), the plan has one
    role, and pricing by roles is still pricing every device."""
    graph = from_module(import_model(ModelSpec("hf:gpt2", "small", batch=32, overrides=GPT2)))
    m = load_machine("dgx-a100:4")
    plan = megatron_lm(graph, m, tensor=8, stages=1, sequence=True).graph
    roles = find_roles(plan, m, device_arrays(plan, m))
    assert len(roles.reps) == 1
    every = estimate_graph(plan, m, optimizer="adam", roles=False)
    by_roles = estimate_graph(plan, m, optimizer="adam", roles=True)
    assert_same(every, by_roles, "gpt2 megatron-lm (tensor 8, sequence parallel) on dgx-a100:4")
    adds = [r for r in every.rows if r.kind == "pcg.add"]
    assert adds and all(r.fwd_comm_s == r.bwd_comm_s == 0 for r in adds)


@pytest.mark.parametrize("machine_name", ["dgx-a100:2", HETERO])
@pytest.mark.parametrize("name", ["mlp", "bert"])
def test_pipelined_plans_price_as_every_device(name: str, machine_name: str) -> None:
    """The staged estimate by roles (`cost/staged.py`) is the per-device one: pipeline
    baselines, Megatron-LM's 3-D plan (tensor 2 x pipeline 2 x data, ZeRO-1, BERT's embedding
    held on both stages and all-reduced over both), on a homogeneous and a mixed machine."""
    m = load_machine(machine_name)
    for plan_name, plan in pipelined_plans(name, machine_name).items():
        every = estimate_graph(plan, m, optimizer="adam", roles=False)
        by_roles = estimate_graph(plan, m, optimizer="adam", roles=True)
        assert every.pipeline is not None and by_roles.roles is not None
        assert_same(every, by_roles, f"{name} {plan_name} on {machine_name}")


@pytest.mark.parametrize("name", ["mlp", "bert"])
def test_the_levers_bound_by_roles_is_the_per_device_bound(name: str) -> None:
    """`bounds.levers_bound` from an estimate by roles charges each role's representative what
    the per-device bound charges any of its devices: the same bound, any ZeRO stage or none."""
    m = load_machine("dgx-a100:2")
    for plan in (data_parallel(model(name), m).graph, megatron(model(name), m).graph):
        every = estimate_graph(plan, m, optimizer="adam", roles=False)
        by_roles = estimate_graph(plan, m, optimizer="adam", roles=True)
        for zero_stage in (None, 0, 1, 2, 3):
            a = levers_bound(plan, every, m, "adam", zero_stage)
            b = levers_bound(plan, by_roles, m, "adam", zero_stage)
            assert a > 0 and same(a, b), (name, zero_stage, a, b)
