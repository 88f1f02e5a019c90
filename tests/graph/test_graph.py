"""The compact graph: lossless round trips through the pcg dialect, structural hashing,
inference errors, and node-by-node evaluation equal to the reference interpreter."""

from __future__ import annotations

import io

import pytest
import torch
from xdsl.dialects.builtin import f32
from xdsl.printer import Printer

from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.frontend import import_model
from unityc.graph import Graph, from_module, to_module
from unityc.graph.evaluate import evaluate
from unityc.interpreter import assemble, run_graph, scatter
from unityc.models.spec import ModelSpec

ZOO = ["mlp", "bert", "dlrm", "xdl", "candle_uno", "resnext50", "inception_v3"]


def printed(module) -> str:
    out = io.StringIO()
    Printer(out).print_op(module)
    return out.getvalue()


@pytest.fixture(scope="module", params=ZOO)
def zoo_module(request):
    return import_model(ModelSpec(request.param, "small"))


def test_round_trip_prints_identically(zoo_module):
    module = to_module(from_module(zoo_module))
    module.verify()
    assert printed(module) == printed(zoo_module)


def test_evaluate_equals_the_interpreter(zoo_module):
    outputs, sources = run_graph(zoo_module, seed=3, float_dtype=torch.float64)
    graph = from_module(zoo_module)
    feeds = {
        n.attr("key"): scatter(sources.value(n.attr("key"), n.types[0], n.op.split(".")[1]), n.types[0])
        for n in graph.nodes.values()
        if n.op in ("pcg.input", "pcg.weight")
    }
    values = evaluate(graph, feeds, dtype=torch.float64)
    for expected, ref in zip(outputs, graph.outputs, strict=True):
        assert torch.equal(assemble(values[ref]), assemble(expected))


def small_graph(order: str) -> Graph:
    g = Graph()
    t = TensorType([4, 6], f32)
    if order == "xy":
        x, y = g.add_source("pcg.input", "x", t), g.add_source("pcg.input", "y", t)
    else:
        y, x = g.add_source("pcg.input", "y", t), g.add_source("pcg.input", "x", t)
    (a,) = g.add("pcg.relu", [x])
    (b,) = g.add("pcg.add", [a, y])
    g.outputs = (b,)
    return g


def test_structural_hash_ignores_ids_and_order():
    assert small_graph("xy").structural_hash() == small_graph("yx").structural_hash()
    other = small_graph("xy")
    (c,) = other.add("pcg.sigmoid", [other.outputs[0]])
    other.outputs = (c,)
    assert other.structural_hash() != small_graph("xy").structural_hash()


def test_add_infers_degrees_and_rejects_inexact_forms():
    g = Graph()
    x = g.add_source("pcg.input", "x", TensorType([4, 6], f32))
    (p,) = g.add("parallel.partition", [x], dim=1, degree=2)
    (s,) = g.add("pcg.softmax", [p], dim=0)
    assert g.type_of(s).shard == (1, 2)
    with pytest.raises(FormError, match="softmax"):
        g.add("pcg.softmax", [p], dim=1)
    with pytest.raises(KeyError, match="no property"):
        g.add("pcg.relu", [x], dim=1)


def test_redirect_and_prune_drop_dead_nodes():
    g = small_graph("xy")
    (add,) = g.outputs
    x = next((nid, 0) for nid, n in g.nodes.items() if n.attr("key") == "x")
    (s,) = g.add("pcg.sigmoid", [x])
    g.redirect({add: s})
    g.prune()
    assert sorted(n.op for n in g.nodes.values()) == ["pcg.input", "pcg.sigmoid"]
    assert g.outputs == (s,)


def test_topological_order_follows_operands_not_insertion():
    g = small_graph("xy")
    (out,) = g.outputs
    (r,) = g.add("pcg.relu", [out])
    # move the relu's producer after it in insertion order: topological() must still sort it first
    g.nodes = {r[0]: g.nodes[r[0]], **{k: v for k, v in g.nodes.items() if k != r[0]}}
    order = g.topological()
    assert order.index(out[0]) < order.index(r[0])
