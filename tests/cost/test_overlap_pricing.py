"""Sequence parallelism's backward collectives priced as the program runs them (`cost.overlap`,
`runtime.regather.Overlapped`): the all-gather a column-parallel linear runs again in backward
is exposed only for what outlasts its input-gradient matmul, and a gather's only reader's
reduce-scatter for what outlasts its weight-gradient matmul; the memory does not change."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import unityc.cost.steps as steps_module
from unityc.cost.compute import Piece, backward_work
from unityc.cost.estimate import estimate_graph
from unityc.cost.modes import compute_model
from unityc.cost.overlap import exposed, matmul_shares
from unityc.cost.schedule import Comm
from unityc.cost.steps import build_steps
from unityc.graph import Graph
from unityc.machine.presets import preset
from unityc.search.megatron_lm import Config, build
from unityc.search.plans import Pricing

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from transformer_shapes import transformer


def test_a_collective_is_exposed_for_what_outlasts_its_matmul() -> None:
    c = Comm((0, 1), 3.0)
    assert exposed([c], {0: 2.0, 1: 1.0})[0].seconds == 2.0  # the member that finishes first
    assert exposed([c], {0: 5.0, 1: 4.0})[0].seconds == 0.0
    assert exposed([c], {0: 5.0})[0].seconds == 3.0  # a member not computing beside it
    assert exposed([c], {}) == (c,)


def test_the_matmuls_beside_are_the_input_and_weight_gradients() -> None:
    x, w, b = Piece((2, 16, 8), "f32"), Piece((12, 8), "f32"), Piece((12,), "f32")
    y = Piece((2, 16, 12), "f32")
    bwd = backward_work("pcg.linear", {}, [x, w, b], [y])
    dgrad, wgrad = matmul_shares("pcg.linear", {}, [x, w, b], 0, bwd)
    assert dgrad == wgrad == pytest.approx(2 * 2 * 16 * 8 * 12 / bwd.flops)
    assert 2 * dgrad < 1  # and the bias gradient
    assert matmul_shares("pcg.linear", {}, [x, w, b], 1, bwd) == (0.0, 0.0)  # a gathered weight
    wq = Piece((8, 8), "f32")
    attention = [x, x, x, wq, wq, wq, wq, None, None, None, None, None]
    bwd = backward_work("pcg.attention", {"heads": 2}, attention, [x])
    q, none = matmul_shares("pcg.attention", {"heads": 2}, attention, 0, bwd)
    assert q == pytest.approx(2 * x.numel * 8 / bwd.flops) and none == 0.0  # three readers
    assert matmul_shares("pcg.attention", {"heads": 2, "context_degree": 2}, attention, 0, bwd) == (0, 0)


def plan() -> Graph:
    """A two-layer GPT on one DGX A100: tensor 4 x data 2, sequence parallel, selective."""
    graph = transformer(2, 256, 4, 1024, 128, 512, 8)
    layout = Config(4, 1, 2, 1, 1, "selective", True)
    return build(graph, preset("dgx-a100:1"), layout, Pricing(optimizer="adam")).graph


def test_backward_collectives_hide_behind_their_matmuls(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = plan()
    machine = preset("dgx-a100:1")
    model = compute_model("roofline", None)
    b, order, overlapped, _ = build_steps(graph, machine, model, "adam")
    with_overlap = estimate_graph(graph, machine, optimizer="adam")
    monkeypatch.setattr(steps_module, "matmul_shares", lambda *args: (0.0, 0.0))
    _, _, exposed_steps, _ = build_steps(graph, machine, model, "adam")
    without = estimate_graph(graph, machine, optimizer="adam")

    gathers = [i for i, nid in enumerate(order) if b.graph.nodes[nid].op == "parallel.all_gather"]
    hidden_gathers = hidden_scatters = 0
    for i, (a, e) in enumerate(zip(overlapped, exposed_steps, strict=True)):
        for mine, plain in zip(a.bwd_gather, e.bwd_gather, strict=True):
            assert mine.seconds <= plain.seconds
            hidden_gathers += mine.seconds < plain.seconds
        for mine, plain in zip(a.bwd_comm, e.bwd_comm, strict=True):
            assert mine.seconds <= plain.seconds
            if mine.seconds < plain.seconds:
                assert i in gathers and order[i] in b.reduce_beside
                hidden_scatters += 1
        assert a.fwd_comm == e.fwd_comm  # forward collectives stay exposed
    assert hidden_gathers >= 4  # each layer's attention and first MLP linear
    assert hidden_scatters >= 2  # each layer's MLP gather (the attention's has three readers)
    assert with_overlap.iteration_s < without.iteration_s
    assert [d.memory for d in with_overlap.devices] == [d.memory for d in without.devices]
