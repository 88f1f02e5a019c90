"""Shared by the search tests: the test rules and machines, small graphs, and interpreter checks."""

from __future__ import annotations

import os
from functools import cache

import torch
from xdsl.dialects.builtin import f32, i64

from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, to_module
from unityc.interpreter import assemble, run_graph
from unityc.machine import Machine, load_machine, load_spec_file
from unityc.rewrites.match import CompiledRule, compile_rules
from unityc.rewrites.parser import parse_rules

INPUTS = os.path.join(os.path.dirname(__file__), "Inputs")
RULES = os.path.join(INPUTS, "search.rules")


@cache
def rules() -> list[CompiledRule]:
    with open(RULES) as f:
        return compile_rules(parse_rules(f.read(), RULES).rules)


def machine(name: str) -> Machine:
    """A preset; `slow`: 2 nodes x 2 slow devices on fast links (parallelism always pays);
    `two-nodes`: the cost tests' hand-computable 2 x 2 machine."""
    if name == "slow":
        return load_spec_file(os.path.join(INPUTS, "slow_devices.toml"))
    if name == "two-nodes":
        return load_spec_file(os.path.join(os.path.dirname(__file__), "..", "machine", "two_nodes.toml"))
    return load_machine(name)


def t(*shape: int, dtype=f32) -> TensorType:  # type: ignore[no-untyped-def]
    return TensorType(list(shape), dtype)


def mlp(batch: int = 8, width: int = 8, layers: int = 2) -> Graph:
    """x -> (linear, relu)* -> linear -> cross-entropy."""
    g = Graph()
    x = g.add_source("pcg.input", "x", t(batch, width))
    labels = g.add_source("pcg.input", "labels", t(batch, dtype=i64))
    for i in range(layers):
        w = g.add_source("pcg.weight", f"w{i}", t(width, width))
        (x,) = g.add("pcg.linear", [x, w, None])
        if i < layers - 1:
            (x,) = g.add("pcg.relu", [x])
    (loss,) = g.add("pcg.cross_entropy", [x, labels], reduction="mean")
    g.outputs = (loss,)
    return g


def moe(tokens: int = 16, width: int = 8, experts: int = 4, k: int = 2, ffn: int = 6) -> Graph:
    """x -> linear -> a softmax router's top-k experts (pcg.topk, pcg.take, pcg.experts) plus
    x -> linear -> cross-entropy: one mixture-of-experts layer between two linears."""
    g = Graph()
    x = g.add_source("pcg.input", "x", t(tokens, width))
    labels = g.add_source("pcg.input", "labels", t(tokens, dtype=i64))
    w0 = g.add_source("pcg.weight", "w0", t(width, width))
    router = g.add_source("pcg.weight", "router", t(experts, width))
    gate_up = g.add_source("pcg.weight", "gate_up", t(experts, 2 * ffn, width))
    down = g.add_source("pcg.weight", "down", t(experts, width, ffn))
    w1 = g.add_source("pcg.weight", "w1", t(width, width))
    (h,) = g.add("pcg.linear", [x, w0, None])
    (scores,) = g.add("pcg.linear", [h, router, None])
    (probs,) = g.add("pcg.softmax", [scores], dim=-1)
    (ids,) = g.add("pcg.topk", [probs], k=k)
    (gates,) = g.add("pcg.take", [probs, ids], dim=1)
    (routed,) = g.add("pcg.experts", [h, ids, gates, gate_up, down], activation="silu")
    (y,) = g.add("pcg.add", [h, routed])
    (y,) = g.add("pcg.linear", [y, w1, None])
    (loss,) = g.add("pcg.cross_entropy", [y, labels], reduction="mean")
    g.outputs = (loss,)
    return g


def branches(batch: int = 8, width: int = 8) -> Graph:
    """x -> linear -> relu and x -> linear, added, then cross-entropy (a parallel split)."""
    g = Graph()
    x = g.add_source("pcg.input", "x", t(batch, width))
    labels = g.add_source("pcg.input", "labels", t(batch, dtype=i64))
    wa = g.add_source("pcg.weight", "wa", t(width, width))
    wb = g.add_source("pcg.weight", "wb", t(width, width))
    (a,) = g.add("pcg.linear", [x, wa, None])
    (a,) = g.add("pcg.relu", [a])
    (b,) = g.add("pcg.linear", [x, wb, None])
    (s,) = g.add("pcg.add", [a, b])
    (loss,) = g.add("pcg.cross_entropy", [s, labels], reduction="sum")
    g.outputs = (loss,)
    return g


def assert_same_outputs(original: Graph, plan: Graph, seed: int = 3) -> None:
    """The plan's reassembled outputs equal the original graph's on the same seeded values."""
    expected, _ = run_graph(to_module(original), seed=seed, float_dtype=torch.float64)
    actual, _ = run_graph(to_module(plan), seed=seed, float_dtype=torch.float64)
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual, strict=True):
        torch.testing.assert_close(assemble(a), assemble(e), rtol=1e-9, atol=1e-9)
