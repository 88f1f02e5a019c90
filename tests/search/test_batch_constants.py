"""ViT's CLS token is expanded over the batch: the importer spells `cls.expand(B, -1, -1)` as
the token plus a [B, 1, 1] zero constant. That constant runs over the batch like the images do;
taken as a side value (replicated), data parallelism had to gather the batch-sharded patches
for the concat with the CLS tokens, and every layer after it ran on the whole batch on every
device (ViT-H/14 on dgx-a100:1: 2.4 s and 32 GiB per device instead of ~0.3 s). Megatron's
data-parallel groups across nodes did the same. BERT's `token_type_ids` default (zeros
expanded to [B, S]) is the same kind of constant: its embedding lookup was replicated and the
batch gathered for the sum of the embeddings."""

from __future__ import annotations

from functools import cache

import pytest

from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.search.plans import Pricing, data_parallel_plan, megatron_plans
from unityc.search.rebuild import batch_tensors

pytest.importorskip("transformers")


@cache
def imported(model: str) -> Graph:
    return from_module(import_model(ModelSpec(model, "small", batch=8)))


def vit() -> Graph:
    return imported("hf:vit")


def gathers(graph: Graph) -> int:
    return sum(1 for node in graph.nodes.values() if node.op == "parallel.all_gather")


def test_the_cls_expand_constant_runs_over_the_batch() -> None:
    graph = vit()
    (zeros,) = [n for n, node in graph.nodes.items() if node.op == "pcg.constant" and node.types[0].rank == 3]
    assert (zeros, 0) in batch_tensors(graph)


@pytest.mark.parametrize("model", ["hf:vit", "hf:bert"])
def test_data_parallel_gathers_nothing_and_shards_the_activations(model: str) -> None:
    """No batch-sharded value is gathered, and the per-device activations shrink with the degree."""
    graph = imported(model)
    activations = {}
    for n in (2, 4):
        plan = data_parallel_plan(graph, load_machine(f"cpu:{n}"), Pricing(optimizer="adam"))
        assert gathers(plan.graph) == 0, plan.note
        activations[n] = max(d.memory.activations for d in plan.estimate.devices)
    assert activations[4] < 0.6 * activations[2], activations


def test_megatron_across_data_groups_gathers_no_batch() -> None:
    """data 2 x tensor 2: the CLS tokens stay sharded over the data-parallel groups too."""
    plans = megatron_plans(vit(), load_machine("cpu:4"), Pricing(optimizer="adam"))
    plan = next(p for p in plans if p.note.startswith("data 2 x tensor 2"))
    for node in plan.graph.nodes.values():
        if node.op == "parallel.all_gather":
            assert node.attr("dim", None) != 0, plan.note
