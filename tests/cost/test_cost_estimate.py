"""The estimate adapter on mapped graphs: each parallel op's communication, gradient
synchronization, the schedule, memory and the optimizer, on the two-node spec, by hand.

Devices 0, 1 are node 0 and 2, 3 node 1; within a node 100 GB/s + 1 us, between nodes
10 GB/s + 5 us; devices 1 TFLOP/s and 100 GB/s with no kernel latency.
"""

from __future__ import annotations

import json
import os

import pytest
from cost_graphs import EXAMPLES, estimate, graph, parse, two_nodes

from unityc.cost.compute import Piece
from unityc.cost.estimate import Estimate, OpRow, estimate_module
from unityc.cost.profile import ProfileCache, op_key
from unityc.cost.report import render

US = 1e-6
NS = 1e-9


def t(extra: str = "") -> str:
    """A 1 MB tensor ([1000, 250] f32) with the given degrees."""
    return f"!pcg.tensor<1000x250xf32{extra}>"


T1, TC, TS, TP, TT = t(), t(", copy 2"), t(", shard [2, 1]"), t(", sum 2"), t(", shard [1, 2]")
MICRO = "!pcg.tensor<500x250xf32>"


def row(e: Estimate, name: str) -> OpRow:
    return next(r for r in e.rows if r.name == name)


def line(result: str, op: str, where: str, types: str, start: int = 0) -> str:
    """`  %result = op {view = #pcg.view<start S, [where]>} : types`."""
    dims = f", [{where}]" if where else ""
    return f"  %{result} = {op} {{view = #pcg.view<start {start}{dims}>}} : {types}"


def partial_sums(where: str) -> str:
    """%s: a [1000, 250] tensor with two partial sums on `where` (a k-sharded matmul)."""
    a, b = "!pcg.tensor<1000x2xf32, shard [1, 2]>", "!pcg.tensor<2x250xf32, shard [2, 1]>"
    return "\n".join(
        [
            line("a", 'pcg.input key "a"', where, a),
            line("b", 'pcg.input key "b"', where, b),
            line("s", "pcg.matmul %a, %b", where, f"{a}, {b} -> {TP}"),
        ]
    )


X0 = line("x", 'pcg.input key "x"', "", T1)


def x_sharded(where: str, start: int = 0) -> str:
    return line("x", 'pcg.input key "x"', where, TS, start)


PARALLEL_CASES = [
    # replicate across nodes: broadcast 1 MB from 0 to 2: 5 us + 1 MB / 10 GB/s
    ("replicate", X0, line("r", "parallel.replicate %x degree 2", "inter 1", f"{T1} -> {TC}"), TC, 105 * US),
    # partition within node 0: one 0.5 MB chunk leaves device 0: 1 us + 5 us
    ("partition", X0,
     line("r", "parallel.partition %x dim 0 degree 2", "intra 1", f"{T1} -> {TS}"), TS, 6 * US),
    # combine two 0.5 MB pieces on node 1 onto device 0: 2 * 5 us + 1 MB / 10 GB/s
    ("combine", x_sharded("intra 1", 2),
     line("r", "parallel.combine %x dim 0 degree 2", "", f"{TS} -> {T1}"), T1, 110 * US),
    # reduce partial sums on 0 and 2 onto 0: 5 us + 100 us
    ("reduce", partial_sums("inter 1"), line("r", "parallel.reduce %s degree 2", "", f"{TP} -> {T1}"),
     T1, 105 * US),
    # ring all-reduce over devices 0, 1: 1 MB / 100 GB/s + 2 * 1 us
    ("all_reduce", partial_sums("intra 1"),
     line("r", "parallel.all_reduce %s degree 2", "intra 1", f"{TP} -> {TC}"), TC, 12 * US),
    # reduce-scatter over 0, 2: 1/2 * 1 MB / 10 GB/s + 5 us
    ("reduce_scatter", partial_sums("inter 1"),
     line("r", "parallel.reduce_scatter %s dim 0 degree 2", "inter 1", f"{TP} -> {TS}"), TS, 55 * US),
    # all-gather over 0, 1 of a 1 MB result: 1/2 * 1 MB / 100 GB/s + 1 us
    ("all_gather", x_sharded("intra 1"),
     line("r", "parallel.all_gather %x dim 0 degree 2", "intra 1", f"{TS} -> {TC}"), TC, 6 * US),
    # all-to-all over 0, 2 of 0.5 MB buffers: 1/2 * 0.5 MB / 10 GB/s + 5 us
    ("all_to_all", x_sharded("inter 1"),
     line("r", "parallel.all_to_all %x src 0 dst 1 degree 2", "inter 1", f"{TS} -> {TT}"), TT, 30 * US),
    # micro-batches staying on their device move nothing
    ("pipeline", X0, line("r", "parallel.pipeline %x dim 0 degree 2", "", f"{T1} -> {MICRO}"), MICRO, 0.0),
    # ... and a micro-batch sent to device 1 is a p2p per micro-batch: 2 * (1 us + 0.5 MB / 100 GB/s)
    ("pipeline_p2p", X0, line("r", "parallel.pipeline %x dim 0 degree 2", "", f"{T1} -> {MICRO}", 1),
     MICRO, 2 * 6 * US),
]  # fmt: skip


@pytest.mark.parametrize(
    ("setup", "op", "result", "seconds"), [c[1:] for c in PARALLEL_CASES], ids=[c[0] for c in PARALLEL_CASES]
)
def test_parallel_op_communication(setup: str, op: str, result: str, seconds: float) -> None:
    e = estimate(graph(f"{setup}\n{op}", result, "%r"))
    assert row(e, "r").fwd_comm_s == pytest.approx(seconds)


def mlp(**options: str) -> Estimate:
    with open(os.path.join(EXAMPLES, "mlp.mlir")) as f:
        return estimate_module(parse(f.read()), two_nodes(), **options)


def test_mlp_by_hand() -> None:
    """examples/mlp.mlir, all on device 0 (no views), SGD. Forward: linear 145.92 ns (14592 B),
    relu 81.92 ns, linear 73.36 ns, cross-entropy 7.72 ns; backward: 15.44 + 146.72 + 163.84 +
    291.84 ns (the first linear needs no dX); updates: 3 passes over 2762 floats = 331.44 ns."""
    e = mlp()
    assert e.forward_s == pytest.approx(308.92 * NS)
    assert e.backward_s - e.forward_s == pytest.approx(617.84 * NS)
    assert e.update_s == pytest.approx(331.44 * NS)
    assert e.iteration_s == pytest.approx(1258.2 * NS)
    (d,) = e.devices
    assert (d.memory.weights, d.memory.gradients, d.memory.optimizer) == (11048, 11048, 0)
    # saved: x (for dW) 2048 B, relu's result 4096 B, logits 640 B, labels 128 B
    assert d.memory.activations == 6912
    assert d.comm_s == 0
    # model FLOPs: 66560 * 2 + 1024 * 2 + 20640 + 41120 + 640 * 2, + 2 per weight element
    assert e.model_flops == 198208 + 2 * 2762
    assert e.roofline_s == pytest.approx(e.model_flops / 4e12)
    adam = mlp(optimizer="adam")
    assert adam.devices[0].memory.optimizer == 2 * 11048
    assert adam.update_s == pytest.approx(331.44 * NS * 7 / 3)


XB, YT = "!pcg.tensor<4x1000xf32, shard [2, 1]>", "!pcg.tensor<4x250xf32, shard [2, 1]>"
WT, WC = "!pcg.tensor<250x1000xf32>", "!pcg.tensor<250x1000xf32, copy 2>"


def data_parallel(weight: list[str], w: str) -> str:
    """A linear over a batch sharded on devices 0 and 2, its weight made by the `weight` lines
    (value `w`), summed to a loss on device 0."""
    loss_t = "!pcg.tensor<f32, sum 2>"
    lines = [
        line("x", 'pcg.input key "x"', "inter 1", XB),
        *weight,
        line("y", f"pcg.linear %x, {w}", "inter 1", f"{XB}, {WC} -> {YT}"),
        line("s", 'pcg.reduce %y kind "sum" dims [0, 1]', "inter 1", f"{YT} -> {loss_t}"),
        line("loss", "parallel.reduce %s degree 2", "", f"{loss_t} -> !pcg.tensor<f32>"),
    ]
    return graph("\n".join(lines))


def test_weight_with_copies_gets_its_gradient_all_reduced() -> None:
    """Data parallel over devices 0 and 2 with the weight held as copy 2: its 1 MB gradient is
    all-reduced across nodes, 1 MB / 10 GB/s + 2 * 5 us = 110 us."""
    e = estimate(data_parallel([line("w", 'pcg.weight key "w"', "inter 1", WC)], "%w"))
    w = row(e, "w")
    assert w.bwd_comm_s == pytest.approx(110 * US)
    assert (w.pattern, w.collectives, w.comm_bytes) == ("all_reduce", 1, 1e6)
    assert w.memory == 4e6  # both copies hold weight and gradient


def test_replicated_weight_gradient_is_reduced() -> None:
    """A weight replicated by parallel.replicate: the replicate's backward reduces the copies'
    gradients (1 MB across nodes: 105 us); the weight itself needs no all-reduce."""
    weight = [
        line("w", 'pcg.weight key "w"', "", WT),
        line("wr", "parallel.replicate %w degree 2", "inter 1", f"{WT} -> {WC}"),
    ]
    e = estimate(data_parallel(weight, "%wr"))
    assert row(e, "wr").fwd_comm_s == pytest.approx(105 * US)
    assert row(e, "wr").bwd_comm_s == pytest.approx(105 * US)
    assert row(e, "w").bwd_comm_s == 0


def test_inputs_get_no_gradient_communication() -> None:
    body = X0 + "\n" + line("r", "parallel.replicate %x degree 2", "inter 1", f"{T1} -> {TC}")
    assert row(estimate(graph(body, TC, "%r")), "r").bwd_comm_s == 0


BIG = "!pcg.tensor<1000x1000xf32>"


def branches(second: int) -> str:
    """Two independent 2-GFLOP matmuls (2 ms each at 1 TFLOP/s) on devices 0 and `second`."""
    lines = [
        line("a", 'pcg.input key "a"', "", BIG),
        line("b", 'pcg.input key "b"', "", BIG, second),
        line("w", 'pcg.weight key "w"', "", BIG),
        line("v", 'pcg.weight key "v"', "", BIG, second),
        line("p", "pcg.matmul %a, %w", "", f"{BIG}, {BIG} -> {BIG}"),
        line("q", "pcg.matmul %b, %v", "", f"{BIG}, {BIG} -> {BIG}", second),
    ]
    return graph("\n".join(lines), f"{BIG}, {BIG}", "%p, %q")


def test_ops_on_disjoint_devices_overlap() -> None:
    assert estimate(branches(2)).forward_s == pytest.approx(2e-3)
    assert estimate(branches(0)).forward_s == pytest.approx(4e-3)


def test_micro_batches_multiply_compute() -> None:
    lines = [
        X0,
        line("m", "parallel.pipeline %x dim 0 degree 2", "", f"{T1} -> {MICRO}"),
        line("r", "pcg.relu %m", "", f"{MICRO} -> {MICRO}"),
        line("y", "parallel.batch %r dim 0 degree 2", "", f"{MICRO} -> {T1}"),
    ]
    e = estimate(graph("\n".join(lines), T1, "%y"))
    # relu of 0.5 MB reads and writes 1 MB: 10 us per micro-batch, twice
    assert row(e, "r").fwd_compute_s == pytest.approx(20 * US)
    assert e.forward_s == pytest.approx(20 * US)


def test_report_renders() -> None:
    with open(os.path.join(EXAMPLES, "mlp_tensor_parallel.mlir")) as f:
        text = render(estimate_module(parse(f.read()), two_nodes()))
    for needle in ("iteration time", "busiest device", "roofline bound", "plan / bound", "%partial"):
        assert needle in text
    assert "reduce 1x640 B" in text
    assert "grad all_reduce 1x40 B" in text


def test_profile_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    key = op_key("pcg.relu", {}, [Piece((16, 64), "f32")], [Piece((16, 64), "f32")])
    path = tmp_path / "cache.json"
    path.write_text(json.dumps({"version": 1, "entries": {f"unit|{key}": {"fwd_s": 1e-3, "bwd_s": 2e-3}}}))
    e = mlp(cost="profile", profile=ProfileCache.load(str(path)))
    assert row(e, "a").fwd_compute_s == 1e-3
    assert row(e, "a").bwd_compute_s == 2e-3
    assert "profile: 1 op(s) priced from the profile, 3 fell back to the roofline" in e.notes


SHARDED = "!pcg.tensor<4xf32, shard [2]>"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (graph(line("loss", 'pcg.input key "x"', "", "!pcg.tensor<f32>", 7)), "device 7 does not exist"),
        (
            graph(line("x", 'pcg.input key "x"', "intra 1", SHARDED, 3), SHARDED, "%x"),
            "reaches device 4 from device 3",
        ),
    ],
)
def test_placement_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        estimate(text)


def test_option_errors() -> None:
    text = graph('  %loss = pcg.input key "x" : !pcg.tensor<f32>')
    with pytest.raises(ValueError, match="unknown cost model 'magic'"):
        estimate(text, cost="magic")
    with pytest.raises(ValueError, match="needs a profile cache"):
        estimate(text, cost="profile")
