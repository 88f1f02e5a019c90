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
