"""No gradient passes `pcg.stop_gradient` (what a model detaches or computes under no_grad): a
weight read only through one wants a gradient but gets none, so the cost model prices no
backward of the ops before it."""

from __future__ import annotations

from helpers import Graph

from unityc.cost.backward import gradient_flags
from unityc.dialects import pcg
from unityc.graph.convert import from_module


def test_a_weight_read_only_through_a_stop_gradient_gets_no_gradient() -> None:
    g = Graph()
    x = g.input("x", [4, 8])
    frozen_path = g.weight("cycle.weight", [8, 8])
    trained = g.weight("head.weight", [8, 8])
    stopped = g.op(pcg.StopGradientOp, [g.op(pcg.LinearOp, [x, frozen_path, None])])
    h = g.op(pcg.LinearOp, [g.op(pcg.TanhOp, [stopped]), trained, None])
    loss = g.op(pcg.ReduceOp, [h], kind="mean", dims=[0, 1])
    graph = from_module(g.module([loss]))
    order = graph.topological()
    requires, gets = gradient_flags(graph, order)
    refs = {graph.nodes[nid].op: (nid, 0) for nid in order}
    by_key = {graph.nodes[nid].attr("key"): (nid, 0) for nid in order if graph.nodes[nid].op == "pcg.weight"}
    assert by_key["head.weight"] in gets
    assert by_key["cycle.weight"] in requires and by_key["cycle.weight"] not in gets
    assert refs["pcg.stop_gradient"] not in requires  # nothing after it wants cycle's gradient
