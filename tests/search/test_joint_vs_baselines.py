"""The joint search is never worse than a baseline it prices (issue 25): Unity's sequential
ablation (algebraic rules for one device first, then the parallelization rules) included, at the
default budget: each segment is also searched with the parallelization rules alone
(`UnityOptions.parallel_pass`), whose candidates join the joint search's; and the `megatron-lm`
plan is among the plans the result is compared with."""

from __future__ import annotations

from dataclasses import replace

import pytest

from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module
from unityc.machine.presets import preset
from unityc.passes.unity_search import load_rules
from unityc.search.baselines import megatron_lm, sequential
from unityc.search.unity import UnityOptions, unity_search


@pytest.mark.parametrize(("model", "machine"), [("mlp", "summit:1"), ("xdl", "dgx-a100:1")])
def test_joint_is_never_slower_than_sequential(model: str, machine: str) -> None:
    graph = from_module(import_model(ModelSpec(model, "small", batch=48)))
    rules = load_rules("")
    options = UnityOptions(pipelines=False)
    m = preset(machine)
    joint = unity_search(graph, m, rules, options)
    alone = unity_search(graph, m, rules, replace(options, parallel_pass=False, whole_graph=False))
    ablation = sequential(graph, m, rules, options)
    assert joint.estimate.iteration_s <= ablation.estimate.iteration_s * (1 + 1e-9)
    assert joint.estimate.iteration_s <= alone.estimate.iteration_s * (1 + 1e-9)


def test_joint_is_never_slower_than_megatron_lm() -> None:
    graph = from_module(import_model(ModelSpec("hf:llama", "small", batch=8)))
    m = preset("cpu:4")
    options = UnityOptions(optimizer="adam", budget=2)
    joint = unity_search(graph, m, load_rules(""), options)
    hand = megatron_lm(graph, m, options)
    assert joint.estimate.iteration_s <= hand.estimate.iteration_s * (1 + 1e-9)
