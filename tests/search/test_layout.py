"""The parallel layout value (`search/layout.py`): named axes validated, hashable and printed
with care; the one enumeration (`tilings`); and the recipe for a new axis followed for a toy one
(README.md, "Add a parallel dimension"): one field and one `AXES` row, no strategy code for an
axis that splits the batch, a clear refusal for one no strategy hook lays out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
from search_graphs import mlp

from unityc.machine.presets import cpu, dgx_a100, dgx_h100
from unityc.runtime.expert_ranks import expert_group_ranks
from unityc.search import experts
from unityc.search.experts import expert_degrees, graph_experts, with_experts
from unityc.search.layout import FULL, SELECTIVE, Axis, Layout, tilings
from unityc.search.strategies import megatron_graph, megatron_layouts


def test_validated() -> None:
    for bad, why in [
        (dict(data=0), "data must be a positive integer"),
        (dict(tensor=True), "tensor must be a positive integer"),
        (dict(microbatches=0), "microbatches must be"),
        (dict(sequence=True), "needs tensor >= 2"),
        (dict(zero=4), "ZeRO stage is 0, 1, 2 or 3"),
        (dict(recompute="some"), "recompute is one of"),
        (dict(data=4, expert=3), r"expert 3 does not divide the data x context ranks \(4\)"),
    ]:
        with pytest.raises(ValueError, match=why):
            Layout(**bad)  # type: ignore[arg-type]
    assert Layout(data=4, context=2, expert=8).devices == 8  # carved out of data x context


def test_value() -> None:
    a = Layout(data=4, tensor=2, sequence=True)
    assert a == Layout(tensor=2, data=4, sequence=True) and hash(a) == hash(Layout(4, 2, sequence=True))
    assert a != Layout(data=4, tensor=2)
    assert repr(a) == "Layout(data=4, tensor=2, sequence=True)" and repr(Layout()) == "Layout()"
    assert a.axes == (("data", 4), ("context", 1), ("tensor", 2), ("pipeline", 1))
    assert (a.devices, a.replicas, a.group) == (8, 4, 8)
    staged = Layout(data=2, tensor=2, pipeline=2, virtual=2, microbatches=4, zero=1, recompute=SELECTIVE)
    assert staged.within_stage == Layout(data=2, tensor=2) and staged.group == 4
    # the text the megatron-lm report and its plan reuse (`megatron_lm._try`) key on
    assert staged.describe() == (
        "data 2 x tensor 2 x pipeline 2, 2 chunks per stage group, interleaved-1f1b, 4 micro-batches "
        "of 1 per replica, ZeRO-1, selective recomputation"
    )
    assert (
        Layout(data=2, context=2, recompute=FULL)
        .describe()
        .startswith("data 2 x tensor 1 x pipeline 1 x context 2,")
    )


def test_tilings() -> None:
    assert list(tilings(8, {"tensor": [4, 2, 1]})) == [
        Layout(data=2, tensor=4),
        Layout(data=4, tensor=2),
        Layout(data=8),
    ]
    got = [(x.tensor, x.pipeline, x.data) for x in tilings(8, {"tensor": [2], "pipeline": range(1, 5)})]
    assert got == [(2, 1, 4), (2, 2, 2), (2, 4, 1)]  # (3 stages do not divide)
    base = Layout(tensor=2, sequence=True, zero=1)
    assert all(x.sequence and x.zero == 1 for x in tilings(4, {"tensor": [2]}, base=base))
    with pytest.raises(ValueError, match="no mesh axis expert"):
        list(tilings(8, {"expert": [2]}))
    with pytest.raises(ValueError, match="takes the devices left"):
        list(tilings(8, {"data": [2]}))


# --- the recipe, followed for a toy axis --------------------------------------------------------


@dataclass(frozen=True, repr=False)
class ToyLayout(Layout):
    """A toy axis: replica groups splitting the batch once more (as HSDP's outer axis would).
    The recipe's steps: (1) the field, (2) its row in AXES; (3) the strategy hook: none, since
    an axis splitting the batch joins `replicas`; (4) its degrees in the caller's `tilings`."""

    toy: int = 1
    AXES: ClassVar[tuple[Axis, ...]] = (Axis("toy", "batch"), *Layout.AXES)


@dataclass(frozen=True, repr=False)
class RingLayout(Layout):
    """A toy axis splitting the sequence: it needs a strategy hook, which has not been written."""

    ring: int = 1
    AXES: ClassVar[tuple[Axis, ...]] = (*Layout.AXES, Axis("ring", "sequence"))


def test_toy_axis() -> None:
    toy = ToyLayout(toy=2, data=2, tensor=2)
    assert repr(toy) == "ToyLayout(data=2, tensor=2, toy=2)"  # printed, compared, hashed with it
    assert toy != ToyLayout(data=2, tensor=2) and (toy.devices, toy.replicas) == (8, 4)
    with pytest.raises(ValueError, match="toy must be a positive integer"):
        ToyLayout(toy=0)
    assert [x.toy for x in tilings(8, {"toy": [1, 2], "tensor": [2]}, base=ToyLayout())] == [1, 2]
    # the strategy reads it through `replicas`: toy 2 x data 2 lays out as data 4
    graph = mlp(layers=3)
    assert (
        megatron_graph(graph, toy).structural_hash()
        == megatron_graph(graph, Layout(data=4, tensor=2)).structural_hash()
    )
    with pytest.raises(ValueError, match="no strategy lays out the ring axis yet"):
        megatron_layouts(graph, RingLayout(data=2, ring=2))
    # the expert axis has its hook (issue 40): a graph without experts lays out as its replicas
    assert (
        megatron_graph(graph, Layout(data=2, expert=2, tensor=2)).structural_hash()
        == megatron_graph(graph, Layout(data=2, tensor=2)).structural_hash()
    )


# --- the expert axis: placed within a node first, degree 1 for a dense graph ---------------------


def test_expert_degrees_within_a_node_first() -> None:
    assert expert_degrees(dgx_a100(4), 8) == [8, 4, 2, 1]
    assert expert_degrees(dgx_a100(4), 8, tensor=2) == [4, 2, 8, 1]  # beside tensor 2; 8: two nodes
    assert expert_degrees(dgx_h100(16), 64) == [8, 4, 2, 16, 32, 64, 1]  # then whole nodes
    assert expert_degrees(dgx_h100(16), 6) == [2, 1] and expert_degrees(cpu(4), 8) == [4, 2, 1]
    assert expert_degrees(dgx_a100(4), 0) == [1]  # a dense graph


def test_expert_groups_follow_the_runtime() -> None:
    layout = Layout(data=4, tensor=2, expert=2)
    assert layout.expert_groups() == expert_group_ranks(8, 2, 2)
    ep, edp = layout.expert_groups()
    assert ep[0] == [0, 2] and edp[0] == [0, 4]  # the tensor stride, within a node of 8
    assert layout.describe().startswith("data 4 x tensor 2 x pipeline 1, expert 2,")


def test_dense_graphs_keep_expert_degree_one(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, machine = mlp(layers=3), dgx_a100(1)
    layouts = list(tilings(8, {"tensor": [4, 2, 1]}))
    assert graph_experts(graph) == 0 and list(with_experts(layouts, graph, machine)) == layouts
    # a dense graph has no expert op: an expert degree lays it out as its data replicas do
    carved = megatron_graph(graph, Layout(data=2, expert=2)).structural_hash()
    assert carved == megatron_graph(graph, Layout(data=2)).structural_hash()
    # a graph with 4 experts: each layout with each degree dividing its data ranks, beside tensor
    monkeypatch.setattr(experts, "graph_experts", lambda g: 4)
    got = [(x.tensor, x.expert) for x in with_experts(layouts, graph, machine)]
    assert got == [(4, 2), (4, 1), (2, 4), (2, 2), (2, 1), (1, 4), (1, 2), (1, 1)]
