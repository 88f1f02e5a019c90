# ruff: noqa: E501  (lines of IR)
"""bf16-mixed in the cost model: each value is priced in the element type autocast gives it
(contractions bf16, losses fp32, others the widest type they read; weights fp32), so compute
and activation traffic shrink while gradients, optimizer state and gradient reductions do not;
a trained weight only contractions read is a bf16 piece beside its fp32 master
(`memory.is_bf16_piece`): 2 bytes an element more weights, no autocast copy of it."""

from __future__ import annotations

from functools import cache

import pytest
from cost_graphs import parse

from unityc.cost.estimate import Estimate, estimate_graph
from unityc.dialects.precision import BF16_MIXED, PRECISION, precision_attrs
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module, to_module
from unityc.graph.precision import priced_graph, run_dtypes
from unityc.machine import load_machine
from unityc.passes.gpipe import GpipePass
from unityc.search.baselines import data_parallel, megatron

GRAPH = """
func.func @main() -> !pcg.tensor<f32> attributes {unityc.precision = "bf16-mixed"} {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %t = pcg.input key "t" : !pcg.tensor<8xi64>
  %w = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32>
  %b = pcg.weight key "bias" : !pcg.tensor<32xf32>
  %g = pcg.weight key "ln.weight" : !pcg.tensor<32xf32>
  %h = pcg.linear %x, %w : !pcg.tensor<8x16xf32>, !pcg.tensor<32x16xf32> -> !pcg.tensor<8x32xf32>
  %r = pcg.relu %h : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32>
  %n = pcg.layer_norm %r weight %g dims 1 eps 1.0e-05 : !pcg.tensor<8x32xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x32xf32>
  %a = pcg.add %n, %b : !pcg.tensor<8x32xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x32xf32>
  %l = pcg.cross_entropy %a, %t reduction "mean" : !pcg.tensor<8x32xf32>, !pcg.tensor<8xi64> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
"""


def test_values_take_the_element_types_autocast_gives_them() -> None:
    graph = from_module(parse(GRAPH))
    dtypes = run_dtypes(graph)
    by_op = {graph.nodes[nid].attr("key") or graph.nodes[nid].op: dtypes[(nid, 0)] for nid in graph.nodes}
    assert by_op == {
        "x": "f32",
        "t": "i64",
        "fc.weight": "f32",  # master weights stay fp32
        "bias": "f32",
        "ln.weight": "f32",
        "pcg.linear": "bf16",  # a contraction
        "pcg.relu": "bf16",  # what it reads
        "pcg.layer_norm": "bf16",  # its input's (as autocast on CPU)
        "pcg.add": "f32",  # bf16 + an fp32 weight promotes
        "pcg.cross_entropy": "f32",  # losses in fp32
    }
    graph.function_attrs.pop(PRECISION)
    assert set(run_dtypes(graph).values()) == {"f32", "i64"}
    assert priced_graph(graph) is graph


@cache
def _wide_mlp() -> Graph:
    wide = (("in_features", "1024"), ("hidden_dims", "[4096, 4096]"))  # compute-bound on GPUs
    return from_module(import_model(ModelSpec("mlp", "small", batch=256, overrides=wide)))


def _mlp(precision: str) -> Graph:
    graph = _wide_mlp().copy()
    graph.function_attrs.update(precision_attrs(precision))
    return graph


def _rows(e: Estimate, kind: str) -> list:
    return [r for r in e.rows if r.kind == kind]


@pytest.mark.parametrize("machine", ["dgx-a100:1", "dgx-h100:1"])
def test_bf16_shrinks_compute_and_activation_traffic_not_gradient_reductions(machine: str) -> None:
    spec = load_machine(machine)
    plans = {p: megatron(_mlp(p), spec) for p in ("fp32", BF16_MIXED)}
    fp32, bf16 = (estimate_graph(plans[p].graph, spec) for p in ("fp32", BF16_MIXED))
    # contractions at the bf16 tensor rate: several times faster
    linear = sum(r.fwd_compute_s + r.bwd_compute_s for r in _rows(fp32, "pcg.linear"))
    linear_bf16 = sum(r.fwd_compute_s + r.bwd_compute_s for r in _rows(bf16, "pcg.linear"))
    assert linear_bf16 < linear / 1.9
    # the row-parallel partial sums are all-reduced in bf16: half the bytes
    moved = sorted(r.comm_bytes for r in fp32.rows if r.kind == "parallel.all_reduce")
    moved_bf16 = sorted(r.comm_bytes for r in bf16.rows if r.kind == "parallel.all_reduce")
    assert moved and moved_bf16 == [b / 2 for b in moved]
    # gradients and optimizer state (and so their reductions) stay fp32; the linears' weights
    # and biases are bf16 pieces beside their fp32 masters: 6 bytes an element, not 4
    for a, b in zip(fp32.devices, bf16.devices, strict=True):
        assert (a.memory.gradients, a.memory.optimizer) == (b.memory.gradients, b.memory.optimizer)
        assert b.memory.weights == pytest.approx(1.5 * a.memory.weights)
    assert bf16.iteration_s < fp32.iteration_s


def test_gradient_reductions_stay_fp32_and_copies_are_counted() -> None:
    """Data parallel: the gradient all-reduce of every weight moves fp32 bytes in either
    precision; saved activations halve: each weight read by a contraction is a bf16 piece (held
    as a weight, 2 bytes an element beside its fp32 master), no autocast copy of it is kept."""
    spec = load_machine("dgx-a100:1")
    fp32, bf16 = (data_parallel(_mlp(p), spec).estimate for p in ("fp32", BF16_MIXED))
    sync = [r.comm_bytes for r in _rows(fp32, "pcg.weight")]
    assert sync and sync == [r.comm_bytes for r in _rows(bf16, "pcg.weight")]
    weights = fp32.devices[0].memory.weights
    activations, activations_bf16 = fp32.devices[0].memory.activations, bf16.devices[0].memory.activations
    # the MLP's weights are all read by linears: bf16 pieces, no copies among the activations;
    # half the bytes but for the loss's fp32 copy of the bf16 logits (`memory.upcast_operand`)
    assert activations / 2 < activations_bf16 < 0.65 * activations
    assert bf16.devices[0].memory.weights == pytest.approx(1.5 * weights)


@pytest.mark.parametrize("microbatches", [2, 4])
def test_a_pipeline_stage_holds_bf16_pieces_not_copies_per_micro_batch(microbatches: int) -> None:
    """GPipe keeps every micro-batch in flight, and every micro-batch reads the weights' bf16
    pieces, cast from the fp32 masters once per step (`runtime.zero.Master`): a stage's
    activations are the micro-batches' (as many rows in all as one batch: as in fp32, at bf16),
    its weights 2 bytes an element more, whatever the micro-batches."""
    spec = load_machine("dgx-a100:2")
    stage: dict[str, tuple[float, float]] = {}
    for precision in ("fp32", BF16_MIXED):
        module = to_module(_mlp(precision))
        GpipePass(machine="dgx-a100:2", stages=2, microbatches=microbatches).apply(None, module)  # type: ignore[arg-type]
        first = estimate_graph(from_module(module), spec).devices[0].memory
        stage[precision] = (first.weights, first.activations)
    (weights, activations), (weights_bf16, activations_bf16) = stage["fp32"], stage[BF16_MIXED]
    assert activations_bf16 == pytest.approx(activations / 2, rel=0.05)
    assert weights_bf16 == pytest.approx(1.5 * weights)
