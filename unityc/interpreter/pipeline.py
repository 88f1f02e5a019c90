"""Runs a plan that cuts its batch into micro-batches (a pipelined plan, gradient accumulation,
or both: `GraphPlan.batch_parts` of them) as its program computes it: the graph of one
micro-batch (`microbatch_module`) once per part, on micro-batch m of every input (chunk m of each
of its pieces along dim 0), the loss the mean of the micro-batches' losses, every other output
its micro-batches put back in place. Gradients through it (feeds that require grad) are those of
the program: the order of the schedule or of the accumulation steps does not change them.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from xdsl.dialects.builtin import ModuleOp

from unityc.dialects import pcg
from unityc.dialects.container import graph_function
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.pipeline import check_pipeline, graph_plan_of, microbatch_module
from unityc.interpreter import assemble, int_bounds, run_graph
from unityc.interpreter.functions import SourceValues


def microbatch(value: torch.Tensor, shards: int, microbatches: int, m: int) -> torch.Tensor:
    """Micro-batch m of a value cut into `shards` pieces along dim 0: chunk m of each piece."""
    rows = value.shape[0] // shards // microbatches
    pieces = value.reshape(shards, microbatches, rows, *value.shape[1:])
    return pieces[:, m].reshape(shards * rows, *value.shape[1:])


def merge(chunks: list[torch.Tensor], shards: int) -> torch.Tensor:
    """The inverse of `microbatch`: micro-batch results put back into each piece's rows."""
    rows = chunks[0].shape[0] // shards
    stacked = torch.stack([c.reshape(shards, rows, *c.shape[1:]) for c in chunks], dim=1)
    return stacked.reshape(shards * len(chunks) * rows, *chunks[0].shape[1:])


def run_microbatched(
    module: ModuleOp,
    seed: int = 0,
    feeds: Mapping[str, torch.Tensor] | None = None,
    float_dtype: torch.dtype | None = None,
) -> list[torch.Tensor]:
    """The logical outputs of a plan run in micro-batches (the loss first); located errors for a
    plan that is neither pipelined nor accumulating, or cannot run in micro-batches."""
    fn = graph_function(module)
    check_pipeline(fn)
    plan = graph_plan_of(fn)
    if plan.pipeline is None and plan.accumulation == 1:
        raise ValueError("the plan runs its batch whole: it has no unityc.schedule nor unityc.accumulation")
    microbatches = plan.batch_parts
    micro = microbatch_module(module, microbatches)
    sources = SourceValues(seed, feeds, int_bounds(module), float_dtype)
    full: dict[str, torch.Tensor] = {}
    shards: dict[str, int] = {}
    for op in fn.body.block.ops:
        if isinstance(op, pcg.InputOp | pcg.WeightOp):
            t = op.result.type
            assert isinstance(t, TensorType)
            key = op.attrs()["key"]
            full[key] = sources.value(key, t, "input" if isinstance(op, pcg.InputOp) else "weight")
            if isinstance(op, pcg.InputOp):
                shards[key] = t.shard[0]
    per_output: list[list[torch.Tensor]] = []
    for m in range(microbatches):
        step = {k: microbatch(v, shards[k], microbatches, m) if k in shards else v for k, v in full.items()}
        outputs, _ = run_graph(micro, feeds=step, float_dtype=float_dtype)
        per_output.append([assemble(o, f"output {i}") for i, o in enumerate(outputs)])
    ret = fn.body.block.last_op
    assert ret is not None
    results = [torch.stack([outs[0] for outs in per_output]).mean(0)]
    for i, v in enumerate(ret.operands[1:], start=1):
        out_type = v.type
        assert isinstance(out_type, TensorType)
        results.append(merge([outs[i] for outs in per_output], out_type.shard[0]))
    return results
