"""The estimate keeps what the norm kernels keep (`tests/codegen/test_norm_kernels.py` measures
the kernels): rms_norm its input and a per-row fp32 rstd, layer_norm its input, mean and rstd,
gated_activation its two operands (not act(gate))."""

from __future__ import annotations

import pytest
from cost_graphs import estimate, graph

X = "!pcg.tensor<8x4x16xf32>"
W = "!pcg.tensor<16xf32>"
ROWS = 8 * 4
WHOLE = ROWS * 16 * 4  # bytes of x, of the norm's result and of the target


def _norm(op: str) -> str:
    bias = f' %b = pcg.weight key "b" : {W}\n' if op == "layer_norm" else ""
    operands = "weight %w bias %b" if op == "layer_norm" else "weight %w"
    types = f"{X}, {W}, {W}" if op == "layer_norm" else f"{X}, {W}"
    return graph(
        f'  %x = pcg.input key "x" : {X}\n  %t = pcg.input key "t" : {X}\n'
        f'  %w = pcg.weight key "w" : {W}\n{bias}'
        f"  %n = pcg.{op} %x {operands} dims 1 eps 1.0e-06 : {types} -> {X}\n"
        f'  %loss = pcg.mse_loss %n, %t reduction "mean" : {X}, {X} -> !pcg.tensor<f32>'
    )


@pytest.mark.parametrize(("op", "stats"), [("rms_norm", 1), ("layer_norm", 2)])
def test_norm_keeps_its_input_and_row_statistics(op: str, stats: int) -> None:
    (d,) = estimate(_norm(op)).devices
    # the norm: x and its statistics; the loss: the norm's result and the target
    assert d.memory.activations == WHOLE + stats * 4 * ROWS + 2 * WHOLE


def test_gated_activation_keeps_its_two_operands() -> None:
    text = graph(
        f'  %g = pcg.input key "g" : {X}\n  %u = pcg.input key "u" : {X}\n  %t = pcg.input key "t" : {X}\n'
        f'  %w = pcg.weight key "w" : {W}\n'
        f"  %s = pcg.rms_norm %g weight %w dims 1 eps 1.0e-06 : {X}, {W} -> {X}\n"
        f'  %a = pcg.gated_activation %s, %u act "silu" : {X}, {X} -> {X}\n'
        f'  %loss = pcg.mse_loss %a, %t reduction "mean" : {X}, {X} -> !pcg.tensor<f32>'
    )
    (d,) = estimate(text).devices
    # rms_norm: g + rstd; gated: s and u; the loss: its input and the target
    assert d.memory.activations == WHOLE + 4 * ROWS + 2 * WHOLE + 2 * WHOLE
