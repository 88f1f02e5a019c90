"""The mapping DP prices an op at a view, and a parallel op's move, on one device per role of
their own pieces above `DP_ROLE_THRESHOLD` devices (`opcost.Prices._by_roles`,
`roles.placement_reps`): every node and edge cost of BERT's data-parallel and Megatron plans, at
every candidate view, is the per-device one to the last bit, on a homogeneous machine of 16
nodes and on a mixed one; and the representatives are few whatever the machine's size."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from unityc.cost.estimate import roofline_model
from unityc.cost.roles import placement_reps
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.graph.simplify import fuse_collectives, reduce_loss, simplify
from unityc.machine import load_machine
from unityc.search import galvatron
from unityc.search.opcost import Prices
from unityc.search.plans import Pricing, data_parallel_plan
from unityc.search.strategies import data_parallel_graph, megatron_graph
from unityc.search.views import Block, View, view_array

MIXED = (
    """name = "mixed-128"
[kinds.v100]
flops_tflops = { f32 = 15.7, f16 = 125.0 }
memory_bandwidth_gbs = 900
memory_gib = 16
[kinds.a100]
flops_tflops = { f32 = 19.5, bf16 = 312.0, f16 = 312.0 }
memory_bandwidth_gbs = 2039
memory_gib = 80
[links]
intra_socket = { bandwidth_gbs = 50, latency_us = 2 }
cross_socket = { bandwidth_gbs = 32, latency_us = 4 }
inter_node = { bandwidth_gbs = 25, latency_us = 6 }
"""
    + 8
    * """
[[nodes]]
devices_per_socket = 8
kinds = ["a100", "a100", "a100", "a100", "v100", "v100", "v100", "v100"]
[[nodes]]
sockets = 2
devices_per_socket = 4
kind = "v100"
"""
)
"""16 nodes of 8 devices, two kinds mixed within and across nodes, one- and two-socket nodes."""


@cache
def plans(devices: int) -> dict[str, Graph]:
    graph = from_module(import_model(ModelSpec("bert", "small", batch=devices)))
    plans = {"data": data_parallel_graph(graph, devices)}
    plans |= {f"megatron {t}": megatron_graph(graph, devices // t, t) for t in (8, 2)}
    return {name: fuse_collectives(reduce_loss(simplify(g))) for name, g in plans.items()}


@pytest.mark.parametrize("machine_name", ["dgx-a100:16", "mixed"])
def test_node_and_edge_costs_by_roles_are_the_per_device_ones(machine_name: str, tmp_path: Path) -> None:
    if machine_name == "mixed":
        (tmp_path / "mixed.toml").write_text(MIXED)
        machine_name = str(tmp_path / "mixed.toml")
    m = load_machine(machine_name)
    for name, graph in plans(m.num_devices).items():
        by_roles, every = Prices(m, roofline_model(), "adam"), Prices(m, roofline_model(), "adam")
        by_roles.by_roles, every.by_roles = True, False  # (by roles by default above 512 devices)
        p, q = by_roles._problem(graph, {}, (), None), every._problem(graph, {}, (), None)
        block = Block(0, m.num_devices)
        views = {nid: by_roles._views(p, nid, block) for nid in p.ops}
        nodes = edges = 0
        for nid in p.ops:
            for view in views[nid]:
                assert by_roles._node_cost(p, nid, view) == every._node_cost(q, nid, view), (name, nid, view)
                nodes += 1
                for i, producer, result in p.producers[nid]:
                    t = graph.type_of((producer, result))
                    for pview in views[producer]:
                        a = by_roles._edge_cost(p, t, pview, nid, view, i)
                        assert a == every._edge_cost(q, t, pview, nid, view, i), (name, nid, i, pview, view)
                        edges += 1
        assert nodes > 30 and edges > 30, (name, nodes, edges)


def test_representatives_do_not_grow_with_the_devices() -> None:
    for nodes in (16, 1024):
        m = load_machine(f"dgx-a100:{nodes}")
        n = m.num_devices
        dp = view_array((n, 1, 1), View(0, (1,)))  # a data-parallel activation
        weight = view_array((1, 1, n), View(0, (1,)))  # its weight, one copy per device
        tp = view_array((n // 8, 8, 1), View(0, (8, 1)))  # tensor 8 in a node x data over nodes
        assert placement_reps(m, [dp, weight]).sum() == 1
        assert placement_reps(m, [tp]).sum() == 1


def test_galvatron_gathers_by_roles_are_the_per_device_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Galvatron's per-layer costs price each sharded weight's all-gather over the copy groups
    of its representatives: the same seconds as over every device's."""
    m = load_machine("dgx-a100:16")
    graph = from_module(import_model(ModelSpec("bert", "small", batch=m.num_devices)))
    plan = data_parallel_plan(graph, m, Pricing(optimizer="adam"))
    by_roles = galvatron.layer_costs(plan, m, "adam")
    monkeypatch.setattr(galvatron, "placement_reps", lambda machine, _: np.ones(machine.num_devices, bool))
    every = galvatron.layer_costs(plan, m, "adam")
    assert by_roles == every and any(c.gather > 0 for c in every.values())
