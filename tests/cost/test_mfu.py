"""The estimated MFU of the plan reports (`cost.report.Utilization`): 6 x parameters x tokens
over the machine's peak at the plan's precision x the iteration time."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from unityc.cost.report import Utilization
from unityc.dialects.precision import precision_attrs
from unityc.machine.presets import preset

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from transformer_shapes import transformer


def test_parameters_tokens_and_peak_at_the_precision() -> None:
    graph = transformer(2, 32, 4, 64, 128, 16, 8)
    numel = sum(math.prod(n.types[0].shape) for n in graph.nodes.values() if n.op == "pcg.weight")
    fp32 = Utilization.of_graph(graph, preset("dgx-a100:1"))
    assert (fp32.parameters, fp32.tokens, fp32.peak_flops) == (numel, 8 * 16, 8 * 19.5e12)
    graph.function_attrs.update(precision_attrs("bf16-mixed"))
    bf16 = Utilization.of_graph(graph, preset("dgx-a100:2"))
    assert bf16.peak_flops == 16 * 312e12
    assert bf16.of(1.0) == pytest.approx(6 * numel * 128 / (16 * 312e12))
    assert bf16.of(0.0) == 0.0


def test_a_weight_held_in_copies_counts_once() -> None:
    """A pipeline's untied embedding: two weight nodes of one key."""
    graph = transformer(2, 32, 4, 64, 128, 16, 8)
    tied = graph.copy()
    embed = next(n for n in tied.nodes.values() if n.attr("key") == "embed.weight")
    tied.add_node(embed)
    machine = preset("cpu:1")
    assert Utilization.of_graph(tied, machine).parameters == Utilization.of_graph(graph, machine).parameters


def test_the_llama2_70b_anchor() -> None:
    """1,720,320 A100-80GB GPU-hours for 2 T tokens of a 70 B model: about 43.5 %."""
    u = Utilization(70 * 10**9, 2 * 10**12, 312e12)
    assert u.of(1_720_320 * 3600) == pytest.approx(0.435, abs=0.001)


MOE = """builtin.module {
  func.func @main() -> (!pcg.tensor<f32>) {
    %router = pcg.weight key "router" : !pcg.tensor<4x32xf32>
    %gate_up = pcg.weight key "experts.gate_up" : !pcg.tensor<4x128x32xf32>
    %down = pcg.weight key "experts.down" : !pcg.tensor<4x32x64xf32>
    %x = pcg.input key "x" : !pcg.tensor<32x32xf32>
    %ids = pcg.input key "input_ids" : !pcg.tensor<2x16xi64>
    %logits = pcg.linear %x, %router : !pcg.tensor<32x32xf32>, !pcg.tensor<4x32xf32> -> !pcg.tensor<32x4xf32>
    %p = pcg.softmax %logits dim -1 : !pcg.tensor<32x4xf32> -> !pcg.tensor<32x4xf32>
    %top = pcg.topk %p k 2 : !pcg.tensor<32x4xf32> -> !pcg.tensor<32x2xi64>
    %gates = pcg.take %p, %top dim 1 : !pcg.tensor<32x4xf32>, !pcg.tensor<32x2xi64> -> !pcg.tensor<32x2xf32>
    %y = pcg.experts %x, %top, %gates, %gate_up, %down activation "silu" : !pcg.tensor<32x32xf32>,
      !pcg.tensor<32x2xi64>, !pcg.tensor<32x2xf32>, !pcg.tensor<4x128x32xf32>, !pcg.tensor<4x32x64xf32>
      -> !pcg.tensor<32x32xf32>
    %loss = pcg.reduce %y kind "mean" dims [0, 1] : !pcg.tensor<32x32xf32> -> !pcg.tensor<f32>
    func.return %loss : !pcg.tensor<f32>
  }
}
"""


def test_a_mixture_of_experts_counts_its_active_parameters() -> None:
    """Top-2 of 4 experts: half of each expert weight a token passes through, the router whole;
    so too in a plan of the model (the weights reach the experts through the plan's ops)."""
    from unityc.cost.report import mfu_line
    from unityc.dialects.source import make_context, parse_source
    from unityc.graph import from_module
    from unityc.search.baselines import data_parallel

    graph = from_module(parse_source(make_context(), MOE, "moe"))
    total = 4 * 32 + 4 * 128 * 32 + 4 * 32 * 64
    active = 4 * 32 + (4 * 128 * 32 + 4 * 32 * 64) // 2
    u = Utilization.of_graph(graph, preset("dgx-a100:1"))
    assert (u.parameters, u.total_parameters, u.tokens) == (active, total, 32)
    assert u.flops == 6 * active * 32
    plan = data_parallel(graph, preset("cpu:2"))
    assert Utilization.of_graph(plan.graph, preset("dgx-a100:1")) == u
    assert f"6 x {active:,} active of {total:,} parameters" in mfu_line(u, plan.estimate)


def test_dense_parameters_are_all_active() -> None:
    u = Utilization(100, 10, 1.0)
    assert u.total_parameters == u.parameters == 100
    with pytest.raises(ValueError, match="fewer parameters in all"):
        Utilization(100, 10, 1.0, 50)
