"""Properties of the cost model (hypothesis): sharding never raises per-device compute, graphs
with every degree 1 on one device never communicate, memory is the sum of its parts, and the
iteration is never shorter than any device's busy time."""

from __future__ import annotations

import math

from cost_graphs import estimate, graph, mlp_plan, two_nodes
from hypothesis import given
from hypothesis import strategies as st

from unityc.cost.compute import Piece, op_cost
from unityc.machine import load_machine

DEVICES = [two_nodes().kind_of(0), load_machine("summit:1").kind_of(0), load_machine("cpu:1").kind_of(0)]


def f32(*shape: int) -> Piece:
    return Piece(tuple(shape), "f32")


def _pieces(kind: str, n: int, m: int, k: int, s: int) -> tuple[dict, list[Piece | None], list[Piece]]:
    """One task's pieces of `kind` with its parallel dims divided by `s` (a power of two)."""
    match kind:
        case "linear-batch":
            return {}, [f32(n // s, k), f32(m, k), f32(m)], [f32(n // s, m)]
        case "linear-out":
            return {}, [f32(n, k), f32(m // s, k), f32(m // s)], [f32(n, m // s)]
        case "linear-reduction":
            return {}, [f32(n, k // s), f32(m, k // s), None], [f32(n, m)]
        case "matmul":
            return {}, [f32(n // s, k), f32(k, m)], [f32(n // s, m)]
        case "batch_matmul":
            return {}, [f32(8 // s, n, k), f32(8 // s, k, m)], [f32(8 // s, n, m)]
        case "conv2d":
            return {}, [f32(n // s, 4, 9, 9), f32(m, 4, 3, 3), None], [f32(n // s, m, 7, 7)]
        case "attention":
            return {"heads": 8}, [
                f32(2, n, 64), f32(2, n, 64), f32(2, n, 64),
                f32(64 // s, 64), f32(64 // s, 64), f32(64 // s, 64), f32(64, 64 // s),
                None, None, None, None, None,
            ], [f32(2, n, 64)]  # fmt: skip
        case "softmax" | "relu" | "gelu":
            return {"dim": 1}, [f32(n // s, m)], [f32(n // s, m)]
        case "layer_norm":
            return {"dims": 1}, [f32(n // s, m), f32(m), f32(m)], [f32(n // s, m)]
        case "add":
            return {}, [f32(n // s, m), f32(n // s, m)], [f32(n // s, m)]
        case "embedding":
            return {}, [Piece((n // s, 4), "i64"), f32(1000, m)], [f32(n // s, 4, m)]
    raise AssertionError(kind)


KINDS = ["linear-batch", "linear-out", "linear-reduction", "matmul", "batch_matmul", "conv2d", "attention",
         "softmax", "relu", "gelu", "layer_norm", "add", "embedding"]  # fmt: skip


@given(
    kind=st.sampled_from(KINDS),
    n=st.sampled_from([8, 16, 64, 256]),
    m=st.sampled_from([8, 32, 128]),
    k=st.sampled_from([8, 64, 512]),
    shards=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=2, max_size=2),
    device=st.sampled_from(DEVICES),
)
def test_more_shards_never_raise_per_device_compute(kind, n, m, k, shards, device) -> None:  # type: ignore[no-untyped-def]
    few, many = sorted(shards)
    costs = []
    for s in (few, many):
        attrs, operands, results = _pieces(kind, n, m, k, s)
        op = "pcg." + kind.split("-")[0]
        costs.append(op_cost(op, attrs, operands, results, device))
    assert costs[1].fwd_s <= costs[0].fwd_s
    assert costs[1].bwd_s <= costs[0].bwd_s


PLANS = st.fixed_dictionaries(
    {
        "batch": st.sampled_from([4, 8, 64]),
        "inp": st.sampled_from([8, 32, 256]),
        "hidden": st.sampled_from([8, 64, 512]),
        "classes": st.sampled_from([2, 10]),
        "a": st.sampled_from([1, 2]),
        "b": st.sampled_from([1, 2]),
        "inter": st.booleans(),
    }
)


@given(plan=PLANS)
def test_sharded_plans_never_raise_per_device_compute(plan: dict) -> None:
    sizes = {k: plan[k] for k in ("batch", "inp", "hidden", "classes")}
    serial = estimate(mlp_plan(**sizes, a=1, b=1, inter=False))
    sharded = estimate(mlp_plan(**sizes, a=plan["a"], b=plan["b"], inter=plan["inter"]))
    assert max(d.compute_s for d in sharded.devices) <= serial.device(0).compute_s * (1 + 1e-9)


UNARY = ["relu", "gelu", "tanh", "sigmoid", "exp", "neg", "identity"]


@given(
    ops=st.lists(st.sampled_from([*UNARY, "add", "mul", "softmax"]), min_size=1, max_size=8),
    shape=st.sampled_from([(4, 8), (16, 32), (2, 3)]),
    device=st.sampled_from([None, 0, 1, 3]),
    optimizer=st.sampled_from(["sgd", "adam"]),
)
def test_all_degree_one_graphs_never_communicate(ops, shape, device, optimizer) -> None:  # type: ignore[no-untyped-def]
    t = f"!pcg.tensor<{shape[0]}x{shape[1]}xf32>"
    v = "" if device is None else f" {{view = #pcg.view<start {device}>}}"
    lines = [
        f'  %v0 = pcg.input key "x"{v} : {t}',
        f'  %w = pcg.weight key "w"{v} : {t}',
        f"  %v1 = pcg.mul %v0, %w{v} : {t}, {t} -> {t}",
    ]
    for i, name in enumerate(ops, start=1):
        if name in ("add", "mul"):
            lines.append(f"  %v{i + 1} = pcg.{name} %v{i}, %v{i - 1}{v} : {t}, {t} -> {t}")
        elif name == "softmax":
            lines.append(f"  %v{i + 1} = pcg.softmax %v{i} dim 1{v} : {t} -> {t}")
        else:
            lines.append(f"  %v{i + 1} = pcg.{name} %v{i}{v} : {t} -> {t}")
    last = len(ops) + 1
    lines.append(f'  %loss = pcg.reduce %v{last} kind "sum" dims [0, 1]{v} : {t} -> !pcg.tensor<f32>')
    e = estimate(graph("\n".join(lines)), optimizer=optimizer)
    assert all(r.fwd_comm_s == 0 and r.bwd_comm_s == 0 for r in e.rows)
    assert all(d.comm_s == 0 and d.memory.buffers == 0 for d in e.devices)
    assert {d.device for d in e.devices} == {device or 0}


@given(plan=PLANS, optimizer=st.sampled_from(["sgd", "adam"]))
def test_memory_peak_lies_between_its_persistent_parts_and_all_parts(plan: dict, optimizer: str) -> None:
    e = estimate(mlp_plan(**plan), optimizer=optimizer)
    for d in e.devices:
        m = d.memory
        persistent = m.weights + m.gradients + m.optimizer + m.buffers + m.reserved
        assert persistent <= m.total <= persistent + m.activations + m.transient
        assert m.weights + m.optimizer + m.activations + m.buffers <= m.total  # the end of forward
        assert min(m.weights, m.gradients, m.optimizer, m.activations, m.buffers, m.transient) >= 0
    held = sum(m.weights + m.gradients + m.optimizer + m.activations for m in (d.memory for d in e.devices))
    assert math.isclose(sum(r.memory for r in e.rows), held)
    weights = sum(d.memory.weights for d in e.devices)
    expected = 4 * (plan["hidden"] * plan["inp"] + plan["classes"] * plan["hidden"])
    assert weights == expected  # every weight is held once (its replicas are activations)
    if optimizer == "adam":
        assert sum(d.memory.optimizer for d in e.devices) == 2 * expected


@given(plan=PLANS, optimizer=st.sampled_from(["sgd", "adam"]))
def test_iteration_time_covers_every_device(plan: dict, optimizer: str) -> None:
    e = estimate(mlp_plan(**plan), optimizer=optimizer)
    for d in e.devices:
        assert e.iteration_s >= d.busy_s * (1 - 1e-12)
        assert d.busy_s >= max(d.compute_s, d.comm_s) * (1 - 1e-12)
        assert d.busy_s <= (d.compute_s + d.comm_s) * (1 + 1e-12)
    assert e.iteration_s >= e.roofline_s
    assert e.forward_s <= e.backward_s <= e.iteration_s
