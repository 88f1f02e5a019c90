"""Recomputed runs of ops become one `torch.utils.checkpoint` region per block of the model
(`codegen.memory.blocks`), as `torch.utils.checkpoint` is used per layer: the embeddings, each
encoder layer and the head are their own regions, cut at the residual stream, so a layer's
region saves only its input. (One checkpoint over the whole forward recomputed everything at
once in backward: no lower peak, and 8-10 % more CPU than torch's per-layer checkpoint on a
Llama.) The torchrun tests of recomputed plans (`test_torchrun_zero.py`) run these regions
under --check. Selective recomputation (only the attention marked) writes no region: each
attention's kernel checkpoints its core alone (`recompute_core=True`,
`codegen.memory.core_recomputed`), as the memory and cost models count it
(`cost.backward.core_recomputed`); under full recomputation an attention that collectives cut
into a region of its own stays a region, recomputed whole."""

from __future__ import annotations

import re

import pytest
from xdsl.dialects.builtin import StringAttr

from unityc.codegen import emit_program
from unityc.codegen.analysis import analyze
from unityc.codegen.memory import core_recomputed
from unityc.cost import backward
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.machine.presets import preset
from unityc.search.baselines import zero
from unityc.search.layout import FULL, SELECTIVE
from unityc.search.megatron_lm import Config, build
from unityc.search.pipeline import plain_graph
from unityc.search.plans import Pricing
from unityc.search.unity import UnityOptions


def test_every_encoder_layer_is_one_region_that_saves_its_input() -> None:
    module = import_model(ModelSpec("bert", "small", batch=4, overrides=(("layers", "3"),)))
    planned = zero(from_module(module), preset("cpu:2"), UnityOptions(optimizer="sgd"), None, 0, True)
    planned.graph.module_attrs["unityc.machine"] = StringAttr("cpu:2")
    program = emit_program(to_module(planned.graph), source="bert-recompute")
    call = r"^    (.*) = checkpoint\(_recompute_\d+((?:, \w+)*), use_reentrant=False\)$"
    calls = re.findall(call, program, re.M)
    assert len(calls) == 3 + 2, program  # the embeddings, 3 layers, the head and loss
    for outputs, args in calls[1:-1]:  # a layer: the residual stream in, the residual stream out
        assert len(args.split(", ")) == 2, (outputs, args)
        assert outputs.count(",") == 1, (outputs, args)
    bodies = re.split(r"^    def _recompute_\d+", program, flags=re.M)[2:-1]
    for k, body in enumerate(bodies):
        keys = set(re.findall(r'w\["layers\.(\d+)\.', body))
        assert keys == {str(k)}, (k, keys)


@pytest.mark.parametrize("tensor", [1, 2], ids=["data", "tensor-sequence"])
def test_selective_checkpoints_only_the_core_where_the_model_says(tensor: int) -> None:
    """GPT-2 (attention dropout: the hand-written kernel, whose probabilities the core keeps)."""
    graph = plain_graph(from_module(import_model(ModelSpec("hf:gpt2", "small", batch=4))))
    layers = sum(n.op == "pcg.attention" for n in graph.nodes.values())
    for recompute in (SELECTIVE, FULL):
        config = Config(tensor, 1, 2 // tensor, 1, 1, recompute, sequence=tensor > 1)
        plan = build(graph, preset("cpu:2"), config, Pricing(optimizer="sgd"))
        plan.graph.module_attrs["unityc.machine"] = StringAttr("cpu:2")
        module = to_module(plan.graph)
        modelled = backward.core_recomputed(plan.graph, plan.graph.topological())
        assert len(core_recomputed(analyze(module))) == len(modelled)
        program = emit_program(module, source=f"gpt2-{recompute}")
        if recompute == SELECTIVE:
            assert len(modelled) == layers
            assert program.count("recompute_core=True") == layers
            assert "checkpoint(_recompute_" not in program
        else:
            assert not modelled
            assert "recompute_core=True" not in program
            assert "checkpoint(_recompute_" in program
