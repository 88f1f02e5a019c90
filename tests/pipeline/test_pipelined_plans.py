"""Pipelined plans: graph conversion keeps them, and the interpreter computes in micro-batches
what the un-pipelined graph computes (loss, outputs and every weight's gradient)."""

from __future__ import annotations

import os
from functools import cache

import pytest
import torch
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

from unityc.codegen import emit_program
from unityc.dialects.container import graph_function
from unityc.dialects.diagnostics import LocatedError
from unityc.dialects.pcg import InputOp, WeightOp
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.pipeline import check_pipeline, microbatch_module
from unityc.dialects.plan import Pipeline
from unityc.dialects.source import make_context, parse_source, read_module
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.interpreter import assemble, int_bounds, run_graph
from unityc.interpreter.functions import SourceValues
from unityc.interpreter.pipeline import run_microbatched
from unityc.machine import load_machine
from unityc.search.gpipe import PipelineError, gpipe_plan

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def text(module: ModuleOp) -> str:
    from io import StringIO

    out = StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue()


DEEP_MLP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "deep_mlp.py") + ":make"


@cache
def imported(model: str, batch: int) -> ModuleOp:
    return import_model(ModelSpec(model, batch=batch))


def plan(module: ModuleOp, machine: str, schedule: str, stages: int, microbatches: int) -> ModuleOp:
    pipeline = Pipeline(schedule, microbatches, 2 if schedule == "interleaved-1f1b" else 1)
    result = gpipe_plan(from_module(module), load_machine(machine), pipeline, stages)
    return to_module(result.graph)


def losses_and_grads(module: ModuleOp, pipelined: bool) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """Outputs and weight gradients in float64 from seeded sources (the same for every plan)."""
    fn = graph_function(module)
    sources = SourceValues(0, None, int_bounds(module), torch.float64)
    feeds: dict[str, torch.Tensor] = {}
    for op in fn.body.block.ops:
        if isinstance(op, InputOp | WeightOp):
            t = op.result.type
            assert isinstance(t, TensorType)
            value = sources.value(op.attrs()["key"], t, "input" if isinstance(op, InputOp) else "weight")
            feeds[op.attrs()["key"]] = value.clone().requires_grad_(isinstance(op, WeightOp))
    if pipelined:
        outputs = run_microbatched(module, feeds=feeds, float_dtype=torch.float64)
    else:
        pieces, _ = run_graph(module, feeds=feeds, float_dtype=torch.float64)
        outputs = [assemble(p) for p in pieces]
    weights = {k: v for k, v in feeds.items() if v.requires_grad}
    grads = torch.autograd.grad(outputs[0], list(weights.values()), allow_unused=True)
    return outputs, {k: g for k, g in zip(weights, grads, strict=True) if g is not None}


def assert_same(pipelined: ModuleOp, reference: ModuleOp) -> None:
    got, got_grads = losses_and_grads(pipelined, True)
    want, want_grads = losses_and_grads(reference, False)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12)
    assert got_grads.keys() == want_grads.keys() and got_grads
    for key, g in got_grads.items():
        torch.testing.assert_close(g, want_grads[key], rtol=1e-9, atol=1e-12, msg=f"gradient of {key}")


def test_conversion_keeps_stages_and_schedule():
    module = plan(read_module(os.path.join(EXAMPLES, "mlp.mlir")), "cpu:2", "1f1b", 2, 4)
    again = to_module(from_module(module))
    assert text(again) == text(module)
    graph = from_module(again)
    assert {n.stage for n in graph.nodes.values()} == {0, 1}
    assert check_pipeline(graph_function(again)) == (Pipeline("1f1b", 4), 2)


@pytest.mark.parametrize(
    ("machine", "schedule", "stages", "microbatches"),
    [
        ("cpu:2", "gpipe", 2, 4),
        ("cpu:4", "1f1b", 2, 2),
        ("cpu:2", "interleaved-1f1b", 4, 2),
        ("cpu:4", "1f1b", 4, 4),
    ],
)
def test_mlp_example_pipelined_equals_unpipelined(machine, schedule, stages, microbatches):
    reference = read_module(os.path.join(EXAMPLES, "mlp.mlir"))
    pipelined = plan(reference, machine, schedule, stages, microbatches)
    check_pipeline(graph_function(pipelined))
    assert_same(pipelined, reference)


@pytest.mark.parametrize(("model", "batch"), [("bert", 4), ("hf:gpt2", 4), (DEEP_MLP, 16), ("hf:vit", 4)])
def test_zoo_pipelined_equals_unpipelined(model, batch):
    """(hf:vit: its CLS token expanded over the batch is the token plus a [B, 1, 1] zero splat,
    which each micro-batch cuts to its rows; it was refused: "pcg.concat %cat has no micro-batch
    form".)"""
    reference = imported(model, batch)
    assert_same(plan(reference, "cpu:4", "1f1b", 2, 2), reference)


def test_summed_loss_is_refused():
    with open(os.path.join(EXAMPLES, "mlp.mlir")) as f:
        source = f.read().replace('reduction "mean"', 'reduction "sum"')
    module = plan(parse_source(make_context(), source, "mlp_sum.mlir"), "cpu:2", "gpipe", 2, 2)
    with pytest.raises(LocatedError, match="its reduction is 'sum'"):
        microbatch_module(module, 2)


def test_too_many_stages_are_refused():
    with pytest.raises(PipelineError, match="at most 4 stages"):
        plan(read_module(os.path.join(EXAMPLES, "mlp.mlir")), "cpu:6", "gpipe", 6, 2)


BART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "codegen", "bart_model.py") + ":make"
ROW_CONSTANT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "row_constant.py") + ":make"


def test_bart_position_ids_do_not_stop_micro_batches():
    """BART's encoder position ids (`arange(S).expand(B, S)`) folded at the whole batch's size
    made `gpipe` refuse it ("4 micro-batches do not split the batch of 8 rows"): the lookup of
    constant ids is batch-independent (one row, broadcast), and the constant both encoder and
    decoder read is held by each stage, not sent. The pipelined plan computes what the model does."""
    reference = imported(BART, 8)
    constants = [line for line in text(reference).splitlines() if "pcg.constant" in line]
    assert any(line.endswith("!pcg.tensor<1x8xi64>") for line in constants), constants
    assert not any(line.endswith("!pcg.tensor<8x8xi64>") for line in constants), constants
    assert_same(plan(reference, "cpu:2", "gpipe", 2, 4), reference)


def test_a_batch_dependent_constant_is_refused_by_name():
    """A constant that differs per row cannot be taken whole by a micro-batch: the refusal names
    the op that reads it and the shapes, not a batch that does not split."""
    with pytest.raises(PipelineError) as refused:
        plan(imported(ROW_CONSTANT, 8), "cpu:2", "gpipe", 2, 4)
    message = str(refused.value)
    assert "do not split the batch" not in message, message
    assert "pcg.add %add has no micro-batch form (operands batched [2, 16], [8, 1]" in message, message


SCATTER_BASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scatter_base.py") + ":make"


@pytest.mark.parametrize(
    "batch, constant",
    [
        pytest.param(8, "Layout((2, 8)", id="small-every-element"),
        pytest.param(256, "Constant((0.0,), Layout((64, 8)", id="large-one-value"),
    ],
)
def test_a_batch_sized_splat_constant_takes_micro_batch_rows(batch: int, constant: str) -> None:
    """A zero buffer of the whole batch written into by rows (`slice_scatter`, DeepSeek-V3's
    rotary) leaves a [B, 8] splat constant beside the [B, 16] batched rows in one concat: each
    micro-batch reads the splat's first B/M rows (a splat of the micro-batch's shape; under data
    parallelism it is sharded like the batch, `search.rebuild.batch_tensors`), where it kept the
    whole batch's shape and the concat had no micro-batch form. The interpreter's micro-batches
    compute the model's loss and gradients, and the program's PLAN holds the micro-batch's
    constant (what every micro-batch's stage reads whole). At batch 256 the [256, 8] zero part
    (8 KiB) is a splat literal of one stored value (`dialects/literals.py`), its micro-batch
    form [64, 8] too, and the program's constant is that one value, not 512 of them."""
    reference = imported(SCATTER_BASE, batch)
    assert f"value dense<0.000000e+00> : tensor<{batch}x8xf32>" in text(reference)
    pipelined = plan(reference, "cpu:2", "gpipe", 2, 4)
    micro = text(microbatch_module(pipelined, 4))
    assert f"value dense<0.000000e+00> : tensor<{batch // 4}x8xf32> {{" in micro, micro
    assert_same(pipelined, reference)
    program = emit_program(pipelined, "cpu:2")
    constants = [line for line in program.splitlines() if "Constant(" in line]
    assert constants and all(constant in line for line in constants), constants
