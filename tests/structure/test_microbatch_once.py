"""Micro-batching and pipeline legality are written once (issue 28 item 2): the Graph's adapter
(`graph/microbatch.py`: the cost model and the search) and the xDSL one (`dialects/pipeline.py`:
the verifier, the interpreter and codegen) give the same graph of one micro-batch, the same
stage count and the same refusals, with the same words. Batch norm's rule, settled once: refused
where exactness is asked, priced with micro-batch statistics where it is not."""

from __future__ import annotations

import os
import re
from dataclasses import replace

import pytest
from helpers import BATCH_NORM

from unityc.dialects.container import graph_function
from unityc.dialects.diagnostics import LocatedError
from unityc.dialects.pipeline import MicrobatchError, check_pipeline, microbatch_module
from unityc.dialects.plan import Pipeline
from unityc.dialects.source import make_context, parse_source, read_module
from unityc.graph import Graph, from_module, to_module
from unityc.graph.microbatch import check_plan, microbatch_graph, microbatchable
from unityc.machine import load_machine
from unityc.search.gpipe import gpipe_plan

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def gpipe_mlp(source: str | None = None) -> Graph:
    """The example MLP's gpipe plan: 2 stages x 2-way data parallel, 4 micro-batches, cpu:4."""
    module = read_module(os.path.join(EXAMPLES, "mlp.mlir"))
    if source is not None:
        module = parse_source(make_context(), source, "mlp.mlir")
    return gpipe_plan(from_module(module), load_machine("cpu:4"), Pipeline("gpipe", 4), 2).graph


def without_location(message: str) -> str:
    return re.sub(r"^.*?error: ", "", message.splitlines()[0])


def test_both_forms_build_the_same_micro_batch_and_stages() -> None:
    graph = gpipe_mlp()
    module = to_module(graph)
    assert check_plan(graph) == check_pipeline(graph_function(module)) == (Pipeline("gpipe", 4), 2)
    by_graph = microbatch_graph(graph, 4, exact=True)
    by_module = from_module(microbatch_module(module, 4))
    assert [n.types for n in by_graph.nodes.values()] == [n.types for n in by_module.nodes.values()]
    inputs = {n.attr("key"): n.types[0] for n in by_graph.nodes.values() if n.op == "pcg.input"}
    assert inputs["x"].shape[0] == 4  # 16 rows / 4 micro-batches
    assert microbatch_graph(graph, 4).nodes == by_graph.nodes  # pricing builds the same graph


def test_batch_norm_is_refused_exactly_and_priced_otherwise() -> None:
    module = parse_source(make_context(), BATCH_NORM, "bn.mlir")
    graph = from_module(module)
    with pytest.raises(MicrobatchError) as by_module:
        microbatch_module(module, 2)
    with pytest.raises(ValueError) as by_graph:
        microbatch_graph(graph, 2, exact=True)
    assert "batch norm's statistics span the whole batch" in str(by_graph.value)
    assert without_location(str(by_module.value)) == str(by_graph.value).replace(" %n", "")
    assert not microbatchable(graph)
    priced = microbatch_graph(graph, 2)  # GPipe's semantics: micro-batch statistics
    assert [n.types[0].shape[0] for n in priced.nodes.values() if n.op == "pcg.batch_norm"] == [4]


def test_a_summed_loss_is_refused_alike() -> None:
    with open(os.path.join(EXAMPLES, "mlp.mlir")) as f:
        graph = gpipe_mlp(f.read().replace('reduction "mean"', 'reduction "sum"'))
    with pytest.raises(MicrobatchError) as by_module:
        microbatch_module(to_module(graph), 4)
    with pytest.raises(ValueError) as by_graph:
        check_plan(graph)
    assert "its reduction is 'sum'" in str(by_graph.value)
    assert without_location(str(by_module.value)) == re.sub(r" %\w+", "", str(by_graph.value), count=1)


def test_a_stage_reading_a_later_stage_is_refused_alike() -> None:
    graph = gpipe_mlp()
    late = next(nid for nid, n in graph.nodes.items() if n.op == "pcg.input" and n.attr("key") == "x")
    graph.nodes[late] = replace(graph.nodes[late], plan=graph.nodes[late].plan.with_(stage=1))
    with pytest.raises(ValueError) as by_graph:
        check_plan(graph)
    with pytest.raises(LocatedError) as by_module:
        check_pipeline(graph_function(to_module(graph)))
    assert "reads %x of stage 1: a stage reads only values of its own or earlier" in str(by_graph.value)
    assert without_location(str(by_module.value)) == str(by_graph.value)
