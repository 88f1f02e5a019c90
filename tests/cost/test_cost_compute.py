"""Compute cost: FLOPs and bytes of each op kind, computed by hand, and the roofline time on
the two-node spec's device (1 TFLOP/s f32, 100 GB/s, efficiency 1, no kernel latency)."""

from __future__ import annotations

import pytest
from cost_graphs import two_nodes

from unityc.cost.compute import (
    FORWARD_FLOPS,
    Piece,
    backward_work,
    forward_work,
    has_formula,
    kernel_time,
    op_cost,
)
from unityc.dialects import pcg


def f32(*shape: int) -> Piece:
    return Piece(tuple(shape), "f32")


def i64(*shape: int) -> Piece:
    return Piece(tuple(shape), "i64")


def test_every_pcg_op_has_a_formula() -> None:
    missing = [op.name for op in pcg.ALL_OPS if not has_formula(op.name)]
    assert not missing, f"ops without a FLOP formula in unityc/cost/compute.py: {missing}"
    assert not [k for k in FORWARD_FLOPS if k not in {op.name for op in pcg.ALL_OPS}]


# (op, attrs, operands, results, forward FLOPs, forward bytes), each computed by hand.
CASES = [
    # x [16, 32] @ w[64, 32]^T + b: 2*16*32*64 = 65536, bias 16*64 = 1024;
    # bytes (512 + 2048 + 64 + 1024) * 4
    ("pcg.linear", {}, [f32(16, 32), f32(64, 32), f32(64)], [f32(16, 64)], 66560, 14592),
    ("pcg.linear", {}, [f32(2, 8, 32), f32(64, 32), None], [f32(2, 8, 64)], 65536, 14336),
    # [8, 16] @ [16, 4]: 2*8*16*4; bytes (128 + 64 + 32) * 4
    ("pcg.matmul", {}, [f32(8, 16), f32(16, 4)], [f32(8, 4)], 1024, 896),
    # 3 x ([8, 16] @ [16, 4])
    ("pcg.batch_matmul", {}, [f32(3, 8, 16), f32(3, 16, 4)], [f32(3, 8, 4)], 3072, 2688),
    # out 2*4*6*6 = 288 elements, 3*3*3 = 27 MACs each: 2*288*27; bytes (384 + 108 + 288) * 4
    ("pcg.conv2d", {}, [f32(2, 3, 8, 8), f32(4, 3, 3, 3), None], [f32(2, 4, 6, 6)], 15552, 3120),
    # + bias: 288 more FLOPs, 4 more floats
    ("pcg.conv2d", {}, [f32(2, 3, 8, 8), f32(4, 3, 3, 3), f32(4)], [f32(2, 4, 6, 6)], 15840, 3136),
    # 2x2 max pool of [2, 4, 6, 6] -> [2, 4, 3, 3]: 72 outputs * 4
    ("pcg.pool2d", {"kernel": (2, 2)}, [f32(2, 4, 6, 6)], [f32(2, 4, 3, 3)], 288, 1440),
    ("pcg.relu", {}, [f32(8, 16)], [f32(8, 16)], 128, 1024),
    ("pcg.gelu", {}, [f32(8, 16)], [f32(8, 16)], 1024, 1024),
    ("pcg.exp", {}, [f32(8, 16)], [f32(8, 16)], 512, 1024),
    ("pcg.identity", {}, [f32(8, 16)], [f32(8, 16)], 0, 1024),
    ("pcg.add", {}, [f32(8, 16), f32(16)], [f32(8, 16)], 128, 1088),
    ("pcg.mul", {}, [f32(8, 16), f32(8, 16)], [f32(8, 16)], 128, 1536),
    ("pcg.softmax", {"dim": 1}, [f32(8, 16)], [f32(8, 16)], 640, 1024),
    # 5 per element, + weight + bias
    ("pcg.layer_norm", {"dims": 1}, [f32(8, 16), f32(16), f32(16)], [f32(8, 16)], 896, 1152),
    ("pcg.batch_norm", {}, [f32(2, 4, 3, 3), None, None], [f32(2, 4, 3, 3)], 360, 576),
    ("pcg.reduce", {"kind": "sum", "dims": (1,)}, [f32(8, 16)], [f32(8)], 128, 544),
    ("pcg.reduce", {"kind": "mean", "dims": (1,)}, [f32(8, 16)], [f32(8)], 136, 544),
    # a gather: no FLOPs; reads 24 ids (8 B) and 24 rows of 8 floats, writes them
    ("pcg.embedding", {}, [i64(4, 6), f32(100, 8)], [f32(4, 6, 8)], 0, 192 + 2 * 768),
    # bags of 6: sums 24 rows of 8 -> 4 x 8; reads ids, 24 rows, writes 32 floats
    ("pcg.embedding_bag", {"mode": "sum"}, [i64(4, 6), f32(100, 8)], [f32(4, 8)], 192, 192 + 768 + 128),
    ("pcg.cross_entropy", {"reduction": "mean"}, [f32(16, 10), i64(16)], [f32()], 640, 640 + 128 + 4),
    ("pcg.mse_loss", {"reduction": "mean"}, [f32(4, 5), f32(4, 5)], [f32()], 60, 164),
    ("pcg.concat", {"dim": 0}, [f32(2, 4), f32(3, 4)], [f32(5, 4)], 0, 160),
    ("pcg.transpose", {"perm": (1, 0)}, [f32(2, 4)], [f32(4, 2)], 0, 0),  # a view (permute)
    ("pcg.reshape", {"shape": (8,)}, [f32(2, 4)], [f32(8)], 0, 0),
    ("pcg.weight", {}, [], [f32(64, 32)], 0, 0),
    ("pcg.input", {}, [], [f32(64, 32)], 0, 0),
]


@pytest.mark.parametrize(
    ("kind", "attrs", "operands", "results", "flops", "nbytes"), CASES, ids=[c[0] for c in CASES]
)
def test_forward_work(kind, attrs, operands, results, flops, nbytes) -> None:  # type: ignore[no-untyped-def]
    work = forward_work(kind, attrs, operands, results)
    assert (work.flops, work.bytes) == (flops, nbytes)


def test_attention_flops() -> None:
    # B=2, Sq=Sk=5, E=8, 2 heads, all heads on this task (Eh = 8):
    # q/k/v projections 2*2*(5+5+5)*8*8 = 3840; output projection 2*2*5*8*8 = 1280;
    # scores and context 4*2*5*5*8 = 1600; softmax 5*2*2*5*5 = 500.  Total 7220.
    q = f32(2, 5, 8)
    w = f32(8, 8)
    operands = [q, q, q, w, w, w, w, None, None, None, None, None]
    assert forward_work("pcg.attention", {"heads": 2}, operands, [q]).flops == 7220
    # head-parallel task holding 1 of 2 heads: wq, wk, wv [4, 8], wo [8, 4]: Eh = 4, h = 1
    half = [q, q, q, f32(4, 8), f32(4, 8), f32(4, 8), f32(8, 4), None, None, None, None, None]
    assert forward_work("pcg.attention", {"heads": 2}, half, [q]).flops == 3840 / 2 + 1280 / 2 + 800 + 250


def test_backward_work() -> None:
    x, w, b, out = f32(16, 32), f32(64, 32), f32(64), f32(16, 64)
    # dX and dW are each 65536 FLOPs, the bias gradient 1024
    assert backward_work("pcg.linear", {}, [x, w, b], [out]).flops == 2 * 65536 + 1024
    # an input needs no gradient: only dW and db
    assert backward_work("pcg.linear", {}, [x, w, b], [out], [False, True, True]).flops == 65536 + 1024
    assert backward_work("pcg.linear", {}, [x, w, b], [out], [False, False, False]).flops == 0
    assert backward_work("pcg.relu", {}, [f32(8, 16)], [f32(8, 16)]).flops == 128
    assert backward_work("pcg.relu", {}, [f32(8, 16)], [f32(8, 16)]).bytes == 2048
    lookup = ([i64(4, 6), f32(100, 8)], [f32(4, 6, 8)])
    embedding = backward_work("pcg.embedding", {}, *lookup)
    assert embedding.flops == 192 and embedding.rows == 24  # one row added per id
    assert embedding.bytes == forward_work("pcg.embedding", {}, *lookup).bytes + 3200  # + the table
    bag = backward_work("pcg.embedding_bag", {"mode": "sum"}, [i64(4, 6), f32(100, 8)], [f32(4, 8)])
    assert bag.flops == 192 and bag.rows == 24
    assert backward_work("pcg.weight", {}, [], [f32(4)]).flops == 0


def test_roofline_time() -> None:
    device = two_nodes().kind_of(0)
    # linear: 66560 FLOPs at 1e12 = 66.56 ns; 14592 B at 1e11 = 145.92 ns: memory-bound
    cost = op_cost("pcg.linear", {}, [f32(16, 32), f32(64, 32), f32(64)], [f32(16, 64)], device)
    assert cost.fwd_s == pytest.approx(145.92e-9)
    # backward: 132096 FLOPs = 132.096 ns vs 29184 B = 291.84 ns
    assert cost.bwd_s == pytest.approx(291.84e-9)
    # a big matmul is compute-bound: 2*1024^3 FLOPs = 2.147 ms; 12 MiB = 126 us
    big = op_cost("pcg.matmul", {}, [f32(1024, 1024), f32(1024, 1024)], [f32(1024, 1024)], device)
    assert big.fwd_s == pytest.approx(2 * 1024**3 / 1e12)
    # f16 runs at its own peak (4 TFLOP/s here)
    half = op_cost("pcg.matmul", {}, [Piece((1024, 1024), "f16")] * 2, [Piece((1024, 1024), "f16")], device)
    assert half.fwd_s == pytest.approx(2 * 1024**3 / 4e12)
    assert op_cost("pcg.reshape", {"shape": (8,)}, [f32(2, 4)], [f32(8)], device).fwd_s == 0


def test_efficiency_and_latency() -> None:
    from dataclasses import replace

    from unityc.cost.compute import Work

    device = replace(two_nodes().kind_of(0), compute_efficiency=0.5, kernel_latency=1e-6)
    assert kernel_time(Work(1e6, 0), "f32", device) == pytest.approx(1e-6 + 2e-6)
    assert kernel_time(Work(0, 0), "f32", device) == 0


def test_cold_operands_and_scatter_rows() -> None:
    """Where a device sets them, a matmul-like op pays its bytes at `cold_bandwidth` on top of
    its compute, and an embedding backward `scatter_row_time` per row; element-wise ops and
    devices without them keep the roofline."""
    from dataclasses import replace

    from unityc.cost.compute import Work

    plain = replace(two_nodes().kind_of(0), compute_efficiency=1.0, memory_efficiency=1.0)
    device = replace(plain, cold_bandwidth=1e9, scatter_row_time=1e-8)
    work = Work(1e6, 1e3, rows=100)
    roofline = kernel_time(work, "f32", plain, matmul=True)
    assert kernel_time(work, "f32", device, matmul=True) == pytest.approx(roofline + 1e-6 + 1e-6)
    assert kernel_time(work, "f32", device) == pytest.approx(kernel_time(work, "f32", plain) + 1e-6)
    assert kernel_time(Work(1e6, 1e3), "f32", device) == kernel_time(Work(1e6, 1e3), "f32", plain)
    linear = op_cost("pcg.linear", {}, [f32(128, 512), f32(512, 512), None], [f32(128, 512)], device)
    assert linear.fwd_s == pytest.approx(
        kernel_time(linear.fwd, "f32", plain, matmul=True) + linear.fwd.bytes / 1e9
    )


def test_cache_bandwidth() -> None:
    """A kernel whose bytes fit in the device's last-level cache (`cache_bytes`) streams them at
    `cache_bandwidth` instead of `memory_bandwidth`; a bigger one, or a device without a cache
    rate (the GPU presets), keeps the memory bandwidth. Fails if the cache rate is not used or is
    used past the cache."""
    from dataclasses import replace

    from unityc.cost.compute import Work

    plain = replace(two_nodes().kind_of(0), memory_bandwidth=1e9, memory_efficiency=1.0)
    cached = replace(plain, cache_bandwidth=4e9, cache_bytes=1e6)
    assert kernel_time(Work(0, 1e6), "f32", cached) == pytest.approx(1e6 / 4e9)
    assert kernel_time(Work(0, 2e6), "f32", cached) == pytest.approx(2e6 / 1e9)
    assert kernel_time(Work(0, 1e6), "f32", plain) == pytest.approx(1e6 / 1e9)


def test_multi_op_kernels_pay_more_fixed_costs() -> None:
    """Attention and dropout run as many framework ops: each pass pays `KERNELS` latencies (an
    attention with dropout on its probabilities the dropout's too); a dropout with p = 0 is the
    identity, one."""
    from dataclasses import replace

    from unityc.cost.compute import KERNELS, Work

    device = replace(two_nodes().kind_of(0), kernel_latency=1e-6)
    x = f32(2, 4, 8)
    drop = forward_work("pcg.dropout", {"p": 0.1}, [x], [x])
    assert drop.kernels == KERNELS["pcg.dropout"][0] > 1
    assert backward_work("pcg.dropout", {"p": 0.1}, [x], [x]).kernels == KERNELS["pcg.dropout"][1]
    assert forward_work("pcg.dropout", {"p": 0.0}, [x], [x]).kernels == 1
    assert kernel_time(replace(drop, flops=0, bytes=0, vector=0, kernels=1), "f32", device) == 0
    assert kernel_time(Work(0, 1, kernels=3), "f32", device) == pytest.approx(
        3e-6 + 1 / device.memory_bandwidth
    )
    w = f32(8, 8)
    ops = [x, x, x, w, w, w, w, None, None, None, None, None]
    plain = forward_work("pcg.attention", {"heads": 2}, ops, [x])
    dropped = forward_work("pcg.attention", {"heads": 2, "dropout": 0.1}, ops, [x])
    assert plain.kernels == KERNELS["pcg.attention"][0]
    assert dropped.kernels == KERNELS["pcg.attention"][0] + KERNELS["pcg.dropout"][0]
    assert forward_work("pcg.relu", {}, [x], [x]).kernels == 1


def test_unknown_op() -> None:
    with pytest.raises(ValueError, match=r"no FLOP formula for 'pcg\.frobnicate'"):
        forward_work("pcg.frobnicate", {}, [], [f32(1)])
