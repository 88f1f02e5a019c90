"""Which ops expert parallelism lays out, and the expert degrees a search or baseline tries:
the experts of an MoE graph (`graph_experts`), degrees placed within a node first as tensor
parallelism is (`expert_degrees`), and each layout with each of them (`with_experts`). The
layout itself (the experts split over the `expert` axis, the tokens as the data replicas hold
them) is `strategies._Megatron._experts`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import replace

from unityc.graph import Graph
from unityc.machine.spec import Machine
from unityc.search.layout import Layout

EXPERT_OPS: frozenset[str] = frozenset({"pcg.experts"})
"""Ops whose experts (the leading dim of their expert weights, operand `EXPERT_WEIGHT`) the
Megatron layout shards over the `expert` axis (`_Megatron._experts`)."""

EXPERT_WEIGHT = 3
"""The operand of an `EXPERT_OPS` op whose dim 0 is its experts (`pcg.experts`'s gate_up)."""


def graph_experts(graph: Graph) -> int:
    """The expert count every expert-sharded op of `graph` divides by (the gcd of their expert
    counts; `EXPERT_OPS`); 0 where it has none (a dense graph)."""
    counts = [
        graph.type_of(ref).shape[0]
        for n in graph.nodes.values()
        if n.op in EXPERT_OPS and (ref := n.operands[EXPERT_WEIGHT]) is not None
    ]
    return math.gcd(*counts) if counts else 0


def expert_degrees(machine: Machine, experts: int, tensor: int = 1) -> list[int]:
    """Expert-parallel degrees for `experts` experts beside tensor degree `tensor`, placed within
    a node first as tensor parallelism is (`runtime.expert_ranks.expert_group_ranks`: tensor
    innermost, then expert): the degrees dividing the experts whose groups fit a node beside
    the tensor group, largest first, then those spanning whole nodes, fewest nodes first; 1
    last. No experts (0): [1]."""
    per_node = math.gcd(machine.nodes[0].num_devices, machine.num_devices)
    if experts < 1 or per_node % tensor:
        return [1]
    width = per_node // tensor
    within = [e for e in range(width, 1, -1) if width % e == 0 and experts % e == 0]
    nodes = machine.num_devices // per_node
    spanning = [width * n for n in range(2, nodes + 1) if nodes % n == 0 and experts % (width * n) == 0]
    return [*within, *spanning, 1]


def with_experts(layouts: Iterable[Layout], graph: Graph, machine: Machine) -> Iterator[Layout]:
    """Each layout with each of `expert_degrees` of the graph's experts that divides its data
    degree (the expert axis is carved out of the data replicas: `pcg.experts`' form splits the
    tokens over data x e, `strategies._Megatron._experts`); a dense graph's layouts as they are."""
    experts = graph_experts(graph)
    for layout in layouts:
        if not experts:
            yield layout
            continue
        for e in expert_degrees(machine, experts, layout.tensor):
            if layout.data % e == 0:
                yield replace(layout, expert=e)
