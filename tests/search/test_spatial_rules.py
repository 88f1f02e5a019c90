"""The CNN rules (`rewrites/library/spatial.rules`, issue 29) let the search compose a plan per op
that no whole-graph seed is: on a deep U-Net with one 64x64 image (31 M parameters, most in the
low-resolution layers) on 8 A100s, every spatial or data-parallel seed all-reduces all 31 M
gradients, so without these rules the answer is the one-device plan (2.48 ms). With them the
search splits only the last, highest-resolution block's two convolutions 4 ways, Megatron-style
on channels (the first on its output channels, its batch norm and ReLU on those channel shards,
the second on its input channels, partial sums reduced), and keeps the rest on one device:
2.37 ms."""

from __future__ import annotations

import math

import pytest
from search_graphs import assert_same_outputs

from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, Node, from_module
from unityc.machine.presets import preset
from unityc.passes.unity_search import load_rules
from unityc.rewrites.match import compile_rules, rewrites
from unityc.rewrites.parser import load_library
from unityc.search.plans import Pricing, finish, one_device_plan
from unityc.search.unity import UnityOptions, unity_search

SETTINGS = (("image", "64"), ("base_channels", "64"), ("depth", "4"))


def _split(plan: Graph, node: Node) -> bool:
    """Whether the convolution runs in pieces (any operand or its result sharded or summed)."""
    types = [plan.type_of(o) for o in node.operands if o is not None] + [node.types[0]]
    return any(math.prod(t.shard) * t.sum_degree > 1 for t in types)


def test_the_search_splits_only_the_high_resolution_convolutions() -> None:
    graph = from_module(import_model(ModelSpec("unet", "small", 1, SETTINGS)))
    machine = preset("dgx-a100:1")
    result = unity_search(graph, machine, load_rules(""), UnityOptions(pipelines=False, budget=8))
    serial = one_device_plan(graph, machine, Pricing())
    assert result.source == "search"
    assert result.estimate.iteration_s < serial.estimate.iteration_s
    convs = [n for n in result.plan.nodes.values() if n.op == "pcg.conv2d"]
    split = [n for n in convs if _split(result.plan, n)]
    assert split and len(split) < len(convs), len(split)  # no whole-graph layout mixes them
    biggest = max(math.prod(n.types[0].shape[2:]) for n in convs)
    for node in split:
        assert math.prod(node.types[0].shape[2:]) == biggest


def test_a_rule_nested_on_a_split_convolution_needs_the_devices_of_both() -> None:
    """The "infeasible mapping" on unet small after the chain rule then a width (or height) rule:
    both apply to the first convolution, so its 2-way output-channel split is split 2 ways again on
    width, 4 tasks. On 2 devices that cannot be placed, and `finish` says which op; on 4 it is
    a valid plan computing what the model computes."""
    names = ("conv_bn_relu_channel_parallel", "conv2d_width_parallel")
    base = from_module(import_model(ModelSpec("unet", "small", None, ())))
    compiled = {c.rule.name: c for c in compile_rules([r for r in load_library() if r.name in names])}
    graph = base
    for name in names:
        graph = next(new for _, new in rewrites(graph, [compiled[name]], degrees=(2,)))
    with pytest.raises(ValueError, match=r"runs as 4 tasks, more than 2 devices can hold"):
        finish("nested", graph, preset("cpu:2"), Pricing())
    plan = finish("nested", graph, preset("cpu:4"), Pricing()).graph
    nested = [n for n in plan.nodes.values() if n.op == "pcg.conv2d" and n.types[0].shard == (1, 2, 1, 2)]
    assert nested, "no convolution split on both channels and width"
    assert_same_outputs(base, plan)
