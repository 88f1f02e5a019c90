"""The memory levers in the cost model, by hand: ZeRO stages (persistent bytes, the extra
collectives), recomputation (time, saved activations) and the per-device peak."""

from __future__ import annotations

import pytest
from cost_graphs import estimate, graph
from test_cost_estimate import WC, data_parallel, line, row

from unityc.cost.memory import DeviceMemory, persistent_bytes
from unityc.machine.presets import GPU_RESERVED, preset

US = 1e-6


def test_persistent_bytes_shard_with_padding() -> None:
    """10 floats in 4 copies: shards of ceil(10/4) = 3 elements (12 B; the last shard pads 2)."""
    assert persistent_bytes(10, 4, 4, 0, "adam") == DeviceMemory(40, 40, 80)
    assert persistent_bytes(10, 4, 4, 1, "adam") == DeviceMemory(40, 40, 24)
    assert persistent_bytes(10, 4, 4, 2, "adam") == DeviceMemory(40, 12, 24)
    assert persistent_bytes(10, 4, 4, 3, "adam") == DeviceMemory(12, 12, 24)
    assert persistent_bytes(10, 4, 4, 3, "sgd") == DeviceMemory(12, 12, 0)
    assert persistent_bytes(10, 4, 4, 3, "adam", wants_grad=False) == DeviceMemory(weights=12)


def zero(stage: int) -> str:
    """The 1 MB weight of `data_parallel`, in 2 copies on devices 0 and 2 (across nodes)."""
    attrs = f"{{view = #pcg.view<start 0, [inter 1]>, zero = {stage} : i64}}"
    return data_parallel([f'  %w = pcg.weight key "w" {attrs} : {WC}'], "%w")


@pytest.mark.parametrize(
    ("stage", "fwd_us", "sync_us", "pattern", "held"),
    [
        # all-reduce 1 MB / 10 GB/s + 2 x 5 us = 110 us; all-gather of the update 50 + 5 us
        (1, 0, 165, "all_reduce+all_gather", 2 * (1e6 + 1e6 + 1e6)),
        # reduce-scatter 55 us + all-gather 55 us; the gradient halves
        (2, 0, 110, "reduce_scatter+all_gather", 2 * (1e6 + 0.5e6 + 1e6)),
        # all-gather before use 55 us, reduce-scatter 55 us; the weight halves too
        (3, 55, 55, "reduce_scatter", 2 * (0.5e6 + 0.5e6 + 1e6)),
    ],
)
def test_zero_stages_by_hand(stage: int, fwd_us: float, sync_us: float, pattern: str, held: float) -> None:
    e = estimate(zero(stage), optimizer="adam")
    w = row(e, "w")
    assert w.fwd_comm_s == pytest.approx(fwd_us * US)
    assert w.bwd_comm_s == pytest.approx(sync_us * US)
    assert w.pattern == pattern
    assert w.memory == held  # Adam's m and v are sharded from stage 1 on: 2 x 0.5 MB per copy


def test_zero3_gathers_again_for_the_backward() -> None:
    """The linear keeps its weight for dX; the program frees the gathered weight after forward,
    so the linear's backward waits for a second 55 us all-gather."""
    plain = estimate(zero(2), optimizer="adam")
    sharded = estimate(zero(3), optimizer="adam")
    gap = (sharded.backward_s - sharded.forward_s) - (plain.backward_s - plain.forward_s)
    assert gap == pytest.approx(55 * US)


def test_zero3_peak_by_hand() -> None:
    """Device 0 of the ZeRO-3 plan with Adam: persistent weight shard 0.5 MB + m, v shards 1 MB
    + the largest collective buffer 1 MB; the worst moment is the linear's backward: x kept for
    dW (2 x 1000 floats = 8000 B), the gradient of y (2 x 250 floats = 2000 B), the weight
    gathered again (+0.5 MB) and its unreduced gradient (1 MB, +0.5 MB over its shard)."""
    d = estimate(zero(3), optimizer="adam").device(0)
    assert d.memory.transient == 2000 + 0.5e6 + 0.5e6
    assert d.memory.total == 0.5e6 + 1e6 + 1e6 + 8000 + 2000 + 1e6


def test_recompute_reruns_forward_and_keeps_only_region_inputs() -> None:
    """relu(linear(x)) on one device: marking the relu recompute adds its forward to its
    backward and keeps the linear's result (the region's input) instead of the relu's."""
    t_in, t_h = "!pcg.tensor<4x1000xf32>", "!pcg.tensor<4x250xf32>"

    def text(mark: str) -> str:
        return graph(
            "\n".join(
                [
                    f'  %x = pcg.input key "x" : {t_in}',
                    '  %w = pcg.weight key "w" : !pcg.tensor<250x1000xf32>',
                    f"  %h = pcg.linear %x, %w : {t_in}, !pcg.tensor<250x1000xf32> -> {t_h}",
                    f"  %r = pcg.relu %h {mark}: {t_h} -> {t_h}",
                    f'  %loss = pcg.reduce %r kind "sum" dims [0, 1] : {t_h} -> !pcg.tensor<f32>',
                ]
            )
        )

    plain, marked = estimate(text("")), estimate(text("{recompute} "))
    assert row(marked, "r").bwd_compute_s == pytest.approx(
        row(plain, "r").bwd_compute_s + row(plain, "r").fwd_compute_s
    )
    # saved: x (16000 B) and the relu's result (4000 B) / x and the relu's input h (4000 B)
    assert plain.devices[0].memory.activations == marked.devices[0].memory.activations == 20000
    assert row(marked, "h").memory == 4000 and row(marked, "r").memory == 0


def test_gpus_reserve_framework_memory() -> None:
    assert preset("dgx-a100:1").kind_of(0).reserved == GPU_RESERVED
    assert preset("cpu:2").kind_of(0).reserved == 0


@pytest.mark.parametrize(("second", "each_us"), [("layers.0.b", 52.5), ("layers.1.b", 55)])
def test_zero_weights_of_one_layer_share_one_collective(second: str, each_us: float) -> None:
    """Two 1 MB ZeRO-3 weights of one layer move in one bucket, as the program runs them
    (`patterns.zero_buckets`): one 2 MB all-gather (100 us + one 5 us latency), half of it
    priced to each; the same weights in two layers are two buckets of 55 us each."""
    attrs = "{view = #pcg.view<start 0, [inter 1]>, zero = 3 : i64}"
    e = estimate(
        data_parallel(
            [
                f'  %a = pcg.weight key "layers.0.a" {attrs} : {WC}',
                f'  %b = pcg.weight key "{second}" {attrs} : {WC}',
                line("w", "pcg.add %a, %b", "inter 1", f"{WC}, {WC} -> {WC}"),
            ],
            "%w",
        ),
        optimizer="adam",
    )
    for key in ("a", "b"):
        w = row(e, key)
        assert w.fwd_comm_s == pytest.approx(each_us * US)
        assert w.bwd_comm_s == pytest.approx(each_us * US)  # the reduce-scatter, bucketed alike


def test_recompute_regions_follow_the_program_blocks() -> None:
    """relu(linear(.)) twice, weights of blocks layers.0 and layers.1, every op recompute: the
    run is cut into one checkpoint region per block as the program cuts it
    (`patterns.block_cuts`; equal crossing bytes after h0 and r0, so after h0), and each region
    keeps its input: x (16000 B) and h0 (4000 B), not x only as one region over the run."""
    t_in, t_h, w1 = "!pcg.tensor<4x1000xf32>", "!pcg.tensor<4x250xf32>", "!pcg.tensor<250x250xf32>"
    text = graph(
        "\n".join(
            [
                f'  %x = pcg.input key "x" : {t_in}',
                '  %w0 = pcg.weight key "layers.0.w" : !pcg.tensor<250x1000xf32>',
                f'  %w1 = pcg.weight key "layers.1.w" : {w1}',
                f"  %h0 = pcg.linear %x, %w0 {{recompute}} : {t_in}, !pcg.tensor<250x1000xf32> -> {t_h}",
                f"  %r0 = pcg.relu %h0 {{recompute}} : {t_h} -> {t_h}",
                f"  %h1 = pcg.linear %r0, %w1 {{recompute}} : {t_h}, {w1} -> {t_h}",
                f"  %r1 = pcg.relu %h1 {{recompute}} : {t_h} -> {t_h}",
                f'  %loss = pcg.reduce %r1 kind "sum" dims [0, 1] : {t_h} -> !pcg.tensor<f32>',
            ]
        )
    )
    e = estimate(text)
    assert e.devices[0].memory.activations == 16000 + 4000
    assert row(e, "h0").memory == 4000 and row(e, "r1").memory == 0
