"""The estimate's memory for a tiny 3-D plan (tensor 2 x pipeline 2 x data 2, sequence parallel,
ZeRO-1, 1F1B) against the analytic accounting of Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models") applied to what this program keeps, term by term,
so over-counting regressions are caught (issue 25): every micro-batch's activations kept
instead of the 1F1B in-flight count, activations not divided by the tensor/sequence degree,
attention scores counted where the attention core is recomputed, gradients counted twice,
optimizer state not divided by the ZeRO degree.

In elements (fp32: 4 bytes), b samples per micro-batch and replica, s sequence, h hidden, f FFN,
a heads, t tensor degree, one layer of the first stage keeps (each op's saved operands):
* selective (the attention core recomputed, as Megatron-LM: `patterns.recomputes_core`): the
  two norm inputs (sequence-sharded, sbh/t each), the sequence shards of the all-gathered
  inputs of the attention and of the first MLP linear (sbh/t each: as Megatron, the program
  keeps the shard and gathers again in backward, `runtime.regather`), the GeLU's input and
  output (sbf/t each), and what the core's checkpoint keeps of the attention: q, k, v and the
  core's output (the output projection's input), 3sbh/t + sbh/t: 8sbh/t + 2sbf/t.
* none: the same plus what only the fused attention's core (SDPA, `AttentionOp.kernel`) keeps:
  the fp32 logsumexp per query and head, asb/t: no s^2 term (Korthikanti's 11sbh + 5as^2b less
  the scores and probabilities, which a fused kernel does not keep, and the dropout masks,
  which this graph has none of).
* full (every pcg op recomputed; a region runs the all-gathers only it reads, the other
  collectives cut the runs into regions): the region inputs, all sequence-sharded: the layer's
  input, the two norms' outputs (the gathered inputs' shards), the attention's and the MLP's
  reduce-scattered outputs and the residual between them, 6sbh/t (Megatron: the layer's input
  alone, 2sbh/t in bf16, one region spanning the reduce-scatters too).
The first stage also keeps the token ids (b s int64), not its output for the next stage (the
next stage keeps the copy it receives, `StepBuilder.kept_on`; `tests/codegen/test_saved_bytes.py`
measures it), and holds P micro-batches in flight (1F1B: stage k holds P - k)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from xdsl.dialects.builtin import f32, i64

from unityc.cost.estimate import estimate_graph
from unityc.cost.memory import saves
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.precision import precision_attrs
from unityc.graph import Graph
from unityc.machine.presets import preset
from unityc.search.megatron_lm import Config, build
from unityc.search.plans import Pricing

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from transformer_shapes import transformer

LAYERS, H, A, F, V, S, BATCH = 4, 64, 4, 256, 128, 32, 8
T, P, D, M = 2, 2, 2, 4
B = BATCH // D // M  # samples per micro-batch and replica


def first_stage_parameters() -> tuple[int, int]:
    """(parameters split by the tensor degree, parameters replicated in the tensor group) on a
    device of the first stage: the vocabulary-parallel embedding and LAYERS / P layers (q, k, v,
    o and the MLP column/row parallel; norms and the row-parallel linears' biases replicated)."""
    layers = LAYERS // P
    split = V * H + layers * (4 * H * H + 3 * H + 2 * H * F + F)
    replicated = layers * (2 * 2 * H + 2 * H)
    return split, replicated


def layer_elements(recompute: str) -> int:
    sbh, sbf = S * B * H, S * B * F
    if recompute == "full":
        return 6 * sbh // T
    kept = 4 * sbh // T + 2 * sbf // T
    kept += 2 * 2 * S * B // T  # the two layer norms' fp32 mean and rstd per row (F.layer_norm keeps them)
    kept += 3 * sbh // T + sbh // T  # the attention's q, k, v and core output
    if recompute == "none":
        kept += A * S * B // T
    return kept


@pytest.mark.parametrize("recompute", ["selective", "full", "none"])
def test_first_stage_memory_is_the_analytic_formula(recompute: str) -> None:
    graph = transformer(LAYERS, H, A, F, V, S, BATCH)
    plan = build(graph, preset("cpu:8"), Config(T, P, D, 1, M, recompute, True), Pricing(optimizer="adam"))
    e = plan.estimate
    split, replicated = first_stage_parameters()
    params = split // T + replicated
    first = e.devices[0].memory
    assert first.weights == 4 * params  # fp32, each device its tensor shard
    assert first.gradients == 4 * params  # one fp32 gradient per weight element, not two
    assert first.optimizer == 2 * 4 * (split // T // D + replicated // (T * D))  # Adam's m, v / ZeRO-1 copies
    per_microbatch = 8 * B * S + 4 * (LAYERS // P) * layer_elements(recompute)
    assert e.pipeline is not None and e.pipeline.groups[0].inflight == P
    assert first.activations == P * per_microbatch  # 1F1B: P in flight on the first stage, not M
    assert (
        first.total == first.weights + first.gradients + first.optimizer + first.activations + first.buffers
    )


def test_interleaving_holds_megatrons_in_flight_count() -> None:
    """Interleaved 1F1B with v chunks: the first group holds (1 + (P-1)/(P v)) x P micro-batches
    of its L/P layers (Narayanan et al. 2021), v P + P - 1 chunk forwards."""
    graph = transformer(LAYERS, H, A, F, V, S, BATCH)
    v = 2
    plan = build(graph, preset("cpu:8"), Config(T, P, D, v, M, "selective", True), Pricing(optimizer="adam"))
    assert plan.estimate.pipeline is not None
    assert plan.estimate.pipeline.groups[0].inflight == v * P + P - 1


def test_bf16_mixed_keeps_autocast_copies_not_fp32_views() -> None:
    """Under bf16-mixed a matmul reading a transposed trained weight (GPT-2's Conv1D) reads the
    weight's bf16 piece (`memory.is_bf16_piece`: 2 bytes an element held beside its fp32
    master, persistent, no activation), an fp32 activation a matmul reads is kept as its bf16
    copy, and the bf16 logits a loss reads as the loss's fp32 copy."""
    g = Graph()
    x = g.add_source("pcg.input", "x", TensorType((8, 16), f32))
    labels = g.add_source("pcg.input", "labels", TensorType((8,), i64))
    w = g.add_source("pcg.weight", "w", TensorType((32, 16), f32))
    (wt,) = g.add("pcg.transpose", [w], perm=(1, 0))
    (y,) = g.add("pcg.matmul", [x, wt])
    (loss,) = g.add("pcg.cross_entropy", [y, labels], reduction="mean")
    g.outputs = (loss,)
    g.function_attrs.update(precision_attrs("bf16-mixed"))
    memory = estimate_graph(g, preset("cpu:1"), optimizer="adam").devices[0].memory
    assert memory.weights == (2 + 4) * 16 * 32  # the bf16 piece and its fp32 master
    copies = 2 * 8 * 16  # the input's bf16 copy; none of the weight
    # autocast runs the loss in fp32: it keeps an fp32 copy of the bf16 logits (its fp32
    # log-softmax, `memory.upcast_operand`) and the int64 labels
    loss_inputs = 4 * 8 * 32 + 8 * 8
    assert memory.activations == copies + loss_inputs  # not the fp32 view, not the fp32 input


@pytest.mark.parametrize(
    "kind, kept",
    [("sum", "nothing"), ("mean", "nothing"), ("max", "result"), ("min", "result"), ("amax", "operands")],
)
def test_reduce_kinds_keep_what_their_backward_reads(kind: str, kept: str) -> None:
    """A sum's backward only broadcasts the gradient; torch.max/min over a dim keeps its indices
    (as many elements as the result); amax/amin keep the input (and the result)."""
    assert saves("pcg.reduce", {"kind": kind, "dims": [1]}) == kept
    assert saves("pcg.reduce") == "nothing"  # no properties: the sum's rule
