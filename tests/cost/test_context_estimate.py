"""Cost and memory of context-parallel attention (`pcg.attention` with `context`): the ring's
sends priced beyond the block compute they overlap, the all-to-all by alpha-beta, the FLOPs of
the whole sequence's attention shared by the context group, and no S² probabilities kept."""

from __future__ import annotations

import pytest
from cost_graphs import estimate, graph

from unityc.cost.estimate import OpRow

S, C = 256, 2
X = f"!pcg.tensor<2x{S}x16xf32, shard [1, {C}, 1]>"
W, WKV = f"!pcg.tensor<16x16xf32, copy {C}>", f"!pcg.tensor<8x16xf32, copy {C}>"
VIEW = "{view = #pcg.view<start 0, [intra 1]>}"


WHOLE = (
    f"!pcg.tensor<2x{S}x16xf32>",
    "!pcg.tensor<16x16xf32>",
    "!pcg.tensor<8x16xf32>",
    "{view = #pcg.view<start 0>}",
)


def plan(context: str | None) -> str:
    """One grouped-query self-attention layer and a summed loss: split over the sequence on 2
    devices (`context` names the exchange), or whole on device 0 (None)."""
    x, w, wkv, view = (X, W, WKV, VIEW) if context else WHOLE
    exchange = f' context "{context}"' if context else ""
    loss = f"!pcg.tensor<f32, sum {C}>" if context else "!pcg.tensor<f32>"
    operands = f"{x}, {x}, {x}, {w}, {wkv}, {wkv}, {w}"
    lines = [
        f'%x = pcg.input key "x" {view} : {x}',
        f'%t = pcg.input key "t" {view} : {x}',
        f'%wq = pcg.weight key "wq" {view} : {w}',
        f'%wk = pcg.weight key "wk" {view} : {wkv}',
        f'%wv = pcg.weight key "wv" {view} : {wkv}',
        f'%wo = pcg.weight key "wo" {view} : {w}',
        f"%a = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo heads 4 kv_heads 2{exchange} {view}"
        f" : {operands} -> {x}",
        f'%p = pcg.mse_loss %a, %t reduction "sum" {view} : {x}, {x} -> {loss}',
    ]
    if not context:
        return graph("\n".join(lines), returned="%p")
    whole = "!pcg.tensor<f32>"
    lines.append(f"%loss = parallel.reduce %p degree {C} {{view = #pcg.view<start 0>}} : {loss} -> {whole}")
    return graph("\n".join(lines))


def attention_row(context: str | None) -> OpRow:
    return next(r for r in estimate(plan(context)).rows if r.kind == "pcg.attention")


@pytest.mark.parametrize("exchange", ["ring", "all-to-all"])
def test_context_attention_shares_the_work_and_prices_its_exchange(exchange: str) -> None:
    whole, split = attention_row(None), attention_row(exchange)
    assert split.flops == pytest.approx(whole.flops)  # every query still attends every key
    assert split.fwd_compute_s < 0.6 * whole.fwd_compute_s  # each device does half
    assert split.bwd_comm_s > 0 and (split.fwd_comm_s > 0) == (exchange == "all-to-all")
    # summed over the two devices, each its rows' share: no more than the whole attention keeps
    # (which, fused too, keeps no S x S probabilities either)
    assert split.memory <= whole.memory


def test_ring_sends_hide_behind_block_compute_on_fast_links() -> None:
    """On the two-node spec's 100 GB/s links a 2x128-row K/V block (8 KiB) takes ~1 us while a
    block's attention takes longer: only the last dK/dV hop of the backward is exposed."""
    ring, a2a = attention_row("ring"), attention_row("all-to-all")
    assert ring.fwd_comm_s == 0
    assert 0 < ring.bwd_comm_s < a2a.bwd_comm_s
