"""The `megatron-lm` baseline's choices (search/megatron_lm.py): the tensor degree splits whole
heads, selective recomputation finds the attention core of fused and unfused attention, and
the fewest stages that fit are taken (more stages only where fewer do not fit)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module
from unityc.machine.presets import preset
from unityc.search.megatron_lm import attention_core, megatron_lm_plan, tensor_degree
from unityc.search.plans import Pricing

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from transformer_shapes import t5, transformer


def test_tensor_degree_splits_whole_heads() -> None:
    machine = preset("dgx-a100:2")
    assert tensor_degree(transformer(1, 64, 8, 128, 100, 8, 4, kv_heads=2), machine) == 2
    assert tensor_degree(transformer(1, 96, 12, 128, 100, 8, 4), machine) == 4
    assert tensor_degree(transformer(1, 128, 64, 128, 100, 8, 4, kv_heads=8), machine) == 8


def test_attention_core_of_fused_attention() -> None:
    graph = from_module(import_model(ModelSpec("bert", "small", batch=2)))
    core = attention_core(graph)
    assert core and {graph.nodes[n].op for n in core} == {"pcg.attention"}


def test_attention_core_of_unfused_attention() -> None:
    graph = t5(1, 32, 4, 8, 64, 100, 8, 2)  # attention spelled out: batch matmuls and softmax
    core = attention_core(graph)
    ops = sorted(graph.nodes[n].op for n in core)
    softmaxes = sum(n.op == "pcg.softmax" for n in graph.nodes.values())
    assert softmaxes > 0
    assert ops.count("pcg.softmax") == softmaxes
    assert ops.count("pcg.batch_matmul") == 2 * softmaxes  # scores and context, per attention
    assert not any(graph.nodes[n].op in ("pcg.linear", "pcg.layer_norm") for n in core)


def test_fewest_stages_that_fit() -> None:
    graph = transformer(4, 32, 4, 64, 128, 16, 8)
    pricing = Pricing(optimizer="adam")
    roomy = megatron_lm_plan(graph, preset("cpu:8"), pricing)
    assert roomy.estimate.fits and "pipeline 1," in roomy.note and "selective" in roomy.note
    tight = preset("cpu:8").with_memory(0.95 * roomy.estimate.peak_memory)
    fewer = megatron_lm_plan(graph, tight, pricing)
    assert fewer.estimate.fits and "pipeline 1," not in fewer.note
    assert fewer.estimate.peak_memory <= tight.kinds[0].memory


def test_fewer_microbatches_than_stages_run_gpipe() -> None:
    """Batch 2 on 8 devices at tensor 2: every pipelined layout has fewer micro-batches (B / d)
    than stages, which torch's 1F1B (and the plan verifier) refuses; Megatron-LM's 1F1B runs
    them as GPipe's schedule (all forwards as warm-up), and so do the baseline's plans."""
    graph = transformer(8, 32, 2, 64, 128, 16, 2)
    pricing = Pricing(optimizer="adam")
    roomy = megatron_lm_plan(graph, preset("cpu:8"), pricing)
    tight = megatron_lm_plan(graph, preset("cpu:8").with_memory(0.6 * roomy.estimate.peak_memory), pricing)
    for plan in (roomy, tight):
        pipeline = plan.graph.plan.pipeline
        stages = 1 + max(node.plan.stage or 0 for node in plan.graph.nodes.values())
        assert pipeline is not None and pipeline.problem_with(stages) is None, plan.note
        assert pipeline.schedule == "gpipe" and pipeline.microbatches < stages, plan.note
    assert "pipeline 4" in tight.note


def test_materialize_refuses_what_the_loader_refuses() -> None:
    from unityc.search.layers import PipelineError, Stage
    from unityc.search.layout import Layout
    from unityc.search.pipeline import materialize

    graph = transformer(4, 32, 2, 64, 128, 16, 2)
    stages = tuple(Stage(k, k + 1, k, 1) for k in range(4))
    with pytest.raises(PipelineError, match="1f1b needs at least as many micro-batches"):
        materialize(graph, preset("cpu:4"), stages, "1f1b", Layout(pipeline=4, microbatches=2), 4)
