"""Selective recomputation recomputes only the attention core, in the memory and cost models as
in the program (issue 38): with only the attention marked `recompute` (the `selective` layout,
`megatron_lm.with_megatron_levers`), each attention keeps what it keeps without recomputation
less its core's internals (`attention_bytes.attention_core_task_bytes`: the logsumexp of the fused
kernel; the probabilities, their dropout mask and dropped copy of the math one), and its
backward runs the core's forward again (`compute.attention_core_work`), not the whole op's:
more than the backward without recomputation, less than with the whole attention recomputed.
Under full recomputation (every op marked) an attention between two collectives stays a
region of its own, recomputed whole. The program's side (`codegen.memory.core_recomputed`, the
same rule, `patterns.recomputes_core`) is tested in `tests/codegen/test_recompute_regions.py`."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from unityc.cost.attention_bytes import attention_core_task_bytes
from unityc.cost.backward import core_recomputed
from unityc.cost.result import OpRow
from unityc.graph import Graph
from unityc.machine.presets import preset
from unityc.search.layout import FULL, NONE, SELECTIVE
from unityc.search.megatron_lm import Config, build
from unityc.search.plans import PricedPlan, Pricing

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from transformer_shapes import transformer

LAYERS, H, A, F, V, S, BATCH = 2, 64, 4, 256, 128, 64, 8
MACHINE = "cpu:2"


def _graph(dropout: bool) -> Graph:
    graph = transformer(LAYERS, H, A, F, V, S, BATCH)
    if dropout:  # attention dropout: the hand-written kernel, which keeps the probabilities
        for nid, node in graph.nodes.items():
            if node.op == "pcg.attention":
                graph.nodes[nid] = replace(node, attrs=(*node.attrs, ("dropout", 0.1)))
    return graph


def _plan(graph: Graph, recompute: str, tensor: int = 1) -> PricedPlan:
    config = Config(tensor, 1, 2 // tensor, 1, 1, recompute, sequence=tensor > 1)
    return build(graph, preset(MACHINE), config, Pricing(optimizer="adam"))


def _attention_rows(plan: PricedPlan) -> list[OpRow]:
    rows = [r for r in plan.estimate.rows if r.kind == "pcg.attention"]
    assert len(rows) == LAYERS
    return rows


@pytest.mark.parametrize("dropout", [False, True], ids=["sdpa", "math-dropout"])
def test_selective_keeps_all_but_the_core_and_reruns_only_the_core(dropout: bool) -> None:
    graph = _graph(dropout)
    plain, selective = _plan(graph, NONE), _plan(graph, SELECTIVE)
    order = selective.graph.topological()
    core = core_recomputed(selective.graph, order)
    assert {selective.graph.nodes[n].op for n in core} == {"pcg.attention"} and len(core) == LAYERS
    dropped = 0.0
    for nid in core:
        node = selective.graph.nodes[nid]
        types = [None if r is None else selective.graph.type_of(r) for r in node.operands]
        dropped += attention_core_task_bytes(dict(node.attrs), types, node.types[0])
    assert dropped > 0
    for a, b in zip(plain.estimate.devices, selective.estimate.devices, strict=True):
        assert a.memory.activations - b.memory.activations == pytest.approx(dropped)
    for a, b in zip(_attention_rows(plain), _attention_rows(selective), strict=True):
        assert a.fwd_compute_s < b.fwd_compute_s < 1.1 * a.fwd_compute_s  # the checkpoint's hooks only
        rerun = b.bwd_compute_s - a.bwd_compute_s
        assert 0 < rerun < b.fwd_compute_s  # the core's forward again, not the whole op's


def test_full_recomputation_recomputes_an_attention_between_collectives_whole() -> None:
    """Tensor x sequence parallel: all-gathers and reduce-scatters around each attention cut
    the runs of recomputed ops, so each attention is a region alone; its input's op is
    recomputed too, so it recomputes whole (its backward runs its whole forward again)."""
    graph = _graph(dropout=False)
    plain, full = _plan(graph, NONE, tensor=2), _plan(graph, FULL, tensor=2)
    assert not core_recomputed(full.graph, full.graph.topological())
    for a, b in zip(_attention_rows(plain), _attention_rows(full), strict=True):
        assert b.bwd_compute_s - a.bwd_compute_s >= a.fwd_compute_s
