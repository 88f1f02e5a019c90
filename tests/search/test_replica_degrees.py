"""The Megatron plans (`plans.megatron_plans`, read by the `megatron` and `galvatron` baselines
and the joint search's whole-graph plans) give every data-parallel replica a sample, as
Megatron-LM requires (none where no tensor degree can: the baseline is refused by name); more
replicas than samples left the layout a sequence split and the rest replicated, a plan of as
many roles as devices (priced per device: minutes for Llama-2-70B at 4,096 GPUs,
`benchmarks/llm_scale_results.md`)."""

from __future__ import annotations

from functools import cache

from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.search.plans import Pricing, input_batch, megatron_plans


@cache
def bert(batch: int) -> Graph:
    return from_module(import_model(ModelSpec("bert", "small", batch=batch)))


def test_megatron_plans_skip_degrees_with_more_replicas_than_samples() -> None:
    machine = load_machine("dgx-a100:1")  # tensor degrees 8, 4, 2: data 1, 2, 4
    assert input_batch(bert(2)) == 2
    notes = [p.note for p in megatron_plans(bert(2), machine, Pricing(optimizer="adam"))]
    assert notes and all("tensor 2" not in n for n in notes)
    assert {n.split(",")[0].split(";")[0] for n in notes} == {"data 1 x tensor 8", "data 2 x tensor 4"}
