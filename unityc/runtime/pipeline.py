"""Pipelined programs: each stage of the plan is an nn.Module run by `torch.distributed.pipelining`.

A generated pipelined program defines `stage_k(ctx, w, x, *received) -> tuple` per stage (the
ops of stage k on this rank's pieces of one micro-batch: `received` is what the previous stage
sent, the result what the next one receives; the last stage returns the graph's outputs, the
loss first) and a `Pipeline` value: the schedule, the micro-batch count and the ranks of each
stage. Stage k runs on the ranks of its group, k mod (stages / virtual stages); groups have equal
sizes, and rank i of every group forms pipeline i (its own process group): a group of g ranks
runs g pipelines side by side, each on its own shard of the batch (data parallelism inside a
stage), and the weights held in copies get their gradients all-reduced after the schedule.
A stage may also run collectives among its group's ranks (tensor parallelism inside a stage):
each micro-batch's forward starts its own token chain, whose end is tied (times zero) to the
stage's output, so the backward `PipelineStage` runs reaches every collective's dual in the
reverse forward order; a loss held in copies over a group seeds the backward from copy 0 only.

Every rank calls `schedule.step` with its pieces of the inputs as one keyword argument, `inputs`
(a dict: input names never meet the schedule's own keywords, `target`, `losses`, ...), which the
schedule splits into micro-batches along dim 0 (micro-batch m = chunk m of each piece, as the
plan defines it) and hands to each of its stages. The loss is the mean of the micro-batches'
losses: the schedule's loss function divides each micro-batch's loss by M (and the gradients are
not rescaled), so loss and gradients are the whole batch's. Outputs other than the loss are
each micro-batch's pieces concatenated along dim 0, again as the plan defines them. With gradient
accumulation (`Plan.accumulation` = k) the schedule runs k times per step, on chunk a of each
piece (micro-batches a*M to a*M + M - 1), each loss divided by M*k, and the gradients of weight
copies are reduced once after the last.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from unityc.runtime.context import Context
from unityc.runtime.plan import Plan
from unityc.runtime.saved import SavedBytes
from unityc.runtime.zero import Zero

StageFunction = Callable[..., tuple]
SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved-1f1b": ScheduleInterleaved1F1B}


@dataclass(frozen=True)
class Pipeline:
    """How a pipelined plan runs: its schedule, micro-batches and the ranks of each stage."""

    schedule: str
    microbatches: int
    stage_ranks: tuple[tuple[int, ...], ...]
    """The ranks of stage k's group (sorted); stages of one rank group repeat its ranks."""

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule '{self.schedule}' (known: {', '.join(SCHEDULES)})")
        if self.microbatches < 1:
            raise ValueError(f"micro-batches must be at least 1, got {self.microbatches}")
        if len({len(r) for r in self.stage_ranks}) > 1:
            raise ValueError("every stage's group must have as many ranks")

    @property
    def stages(self) -> int:
        return len(self.stage_ranks)

    @property
    def rank_groups(self) -> int:
        return len(set(self.stage_ranks))

    def chains(self) -> list[tuple[int, ...]]:
        """Pipeline i: rank i of every rank group, in stage order."""
        groups = self.stage_ranks[: self.rank_groups]
        return [tuple(g[i] for g in groups) for i in range(len(groups[0]))]

    def stages_of(self, rank: int) -> list[int]:
        return [k for k, ranks in enumerate(self.stage_ranks) if rank in ranks]


@dataclass(frozen=True)
class Pipelined:
    """What a pipelined program hands to `rt.main` (whose model, `module.DistributedModel`,
    runs the schedule): its pipeline and stage functions."""

    pipeline: Pipeline
    stages: tuple[StageFunction, ...]


class _ContiguousGrad(torch.autograd.Function):
    """The identity, whose backward makes the gradient contiguous (it is sent to the stage before)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


class StageModule(nn.Module):
    """One stage as `PipelineStage` runs it: the generated function on this rank's weights (as
    the forward reads them: ZeRO-3 pieces gathered, `zero.py`), the micro-batch's inputs (one dict,
    keyword `inputs`) and constants, and what the previous stage sent. The last stage keeps each
    micro-batch's outputs (detached) for the step's results."""

    def __init__(
        self,
        fn: StageFunction,
        ctx: Context,
        zero: Zero,
        constants: dict[str, Any],
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
        saved: SavedBytes | None = None,
    ):
        super().__init__()
        self.fn, self.ctx, self.zero, self.constants = fn, ctx, zero, constants
        self.autocast = autocast
        """The plan's precision (bf16-mixed: the stage's forward under autocast)."""
        self.saved = saved
        """--saved-bytes: the rank's counter of what each micro-batch's forward saves."""
        self.outputs: list[tuple[Any, ...]] = []
        self.calls = 0

    def forward(
        self, *received: torch.Tensor, inputs: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, ...]:
        step, self.ctx.step = (
            self.ctx.step,
            self.ctx.step * 1_000_003 + self.calls,
        )  # dropout differs per micro-batch
        start = self.ctx.token = self.ctx.new_token()  # this micro-batch's own token chain
        try:
            data = {**self.constants, **(inputs or {})}
            if _inferring():  # received integers (indices, targets) are torch.empty's: zeros instead
                received = tuple(
                    torch.zeros_like(r) if isinstance(r, torch.Tensor) and not r.is_floating_point() else r
                    for r in received
                )
            received = tuple(_ContiguousGrad.apply(r) if isinstance(r, torch.Tensor) else r for r in received)
            with self.autocast(), self.zero.saving(self.saved):
                out = self.fn(self.ctx, self.zero.forward_weights, data, *received)
        finally:
            self.ctx.step = step
        self.calls += 1
        # What a stage sends is contiguous, activations here and gradients by `_ContiguousGrad`:
        # torch's stage builds the receive buffers from shape inference, strides included, and
        # gloo receives only into a contiguous tensor (ConvNeXt's channels-last permute made a
        # boundary value, and its gradient, strided).
        out = tuple(o.contiguous() if isinstance(o, torch.Tensor) else o for o in out)
        self.outputs.append(tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in out))
        if self.ctx.token is not start:  # collectives ran: their duals run in this micro-batch's backward
            out = _tied(out, self.ctx.token)
        return out


def stage_schedule(
    program: Pipelined,
    plan: Plan,
    ctx: Context,
    zero: Zero,
    constants: dict[str, Any],
    autocast: Callable[[], contextlib.AbstractContextManager],
    seeds_loss: bool,
    saved: SavedBytes | None = None,
) -> tuple[list[StageModule], Any, bool]:
    """This rank's stage modules, the schedule that runs them (`torch.distributed.pipelining`),
    and whether this rank runs the last stage. A collective: every rank creates every
    pipeline's process group. `saved`: --saved-bytes' counter, shared by the stage modules."""
    pipeline, comm = program.pipeline, ctx.comm
    chains = pipeline.chains()
    groups = comm.new_groups(chains)
    mine = next(c for c in chains if comm.rank in c)
    ks = pipeline.stages_of(comm.rank)
    modules = [StageModule(program.stages[k], ctx, zero, constants, autocast, saved) for k in ks]
    stages = [
        PipelineStage(module, k, pipeline.stages, comm.device, group=groups[mine])
        for module, k in zip(modules, ks, strict=True)
    ]
    is_last = pipeline.stages - 1 in ks
    m = pipeline.microbatches
    schedule = SCHEDULES[pipeline.schedule]
    loss = _loss_of_microbatch(m * plan.accumulation, seeds_loss)
    if pipeline.schedule == "interleaved-1f1b":
        return modules, schedule(stages, m, loss_fn=loss, scale_grads=False), is_last
    (stage,) = stages
    return modules, schedule(stage, m, loss_fn=loss, scale_grads=False), is_last


def run_schedule(
    schedule: Any,
    modules: list[StageModule],
    pipeline: Pipeline,
    plan: Plan,
    inputs: dict[str, torch.Tensor],
    is_last: bool,
    backward: bool = True,
) -> list[Any]:
    """One step's forward and backward (`backward` false: forward only, the schedule's `eval`)
    over every micro-batch of this rank's pieces of the batch (`inputs`); returns this rank's
    pieces of the step's outputs (`pipeline_outputs`)."""
    for module in modules:
        module.outputs.clear()
        module.calls = 0
    target = torch.zeros(pipeline.microbatches, device=modules[0].ctx.device)  # the loss is the stage's own
    accumulation = plan.accumulation
    for part in range(accumulation):  # gradient accumulation: the schedule once per chunk
        chunk = {k: v.chunk(accumulation, dim=0)[part] for k, v in inputs.items()}
        # One `inputs` keyword, so no input name collides with the schedule's own (`target`);
        # none on a rank without inputs (torch cannot split an empty dict into micro-batches).
        given = {"inputs": chunk} if chunk else {}
        run = schedule.step if backward else schedule.eval
        run(target=target, losses=[], return_outputs=False, **given)
    return pipeline_outputs(modules, pipeline, plan, is_last)


def pipeline_outputs(modules: list[StageModule], pipeline: Pipeline, plan: Plan, is_last: bool) -> list[Any]:
    """This rank's pieces of the step's outputs (the last stage's): the loss is the mean of the
    micro-batches' losses, other outputs their pieces concatenated."""
    count = len(plan.outputs)
    if not is_last:
        return [None] * count
    last = modules[-1].outputs[
        -pipeline.microbatches * plan.accumulation :
    ]  # the first step runs a warm-up forward
    losses = [mb[0] for mb in last]
    loss = None if any(x is None for x in losses) else torch.stack(losses).sum() / len(losses)
    rest = [_concat([mb[i] for mb in last]) for i in range(1, count)]
    return [loss, *rest]


def _inferring() -> bool:
    """Whether torch's stage is running its shape inference (`_forward_metadata_inference`, at
    the first step and at each switch between `step` and `eval`): its received tensors are made
    from metadata by `torch.empty`, so their integers may index out of range."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_forward_metadata_inference":
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _tied(out: tuple[Any, ...], token: torch.Tensor) -> tuple[Any, ...]:
    """`out` with the token chain's end tied (times zero) to its first floating output that
    carries a gradient (else its first floating output), so that the backward `PipelineStage`
    runs from the outputs reaches every collective's dual, in the reverse order of the forward
    on every rank (also on ranks whose collectives feed no output). An output without a gradient
    (an additive key mask) stays without one: tied, the next stage would receive it as needing
    one, and SDPA given a mask that needs a gradient runs its math fallback, which keeps the
    S x S probabilities."""
    floating = [i for i, o in enumerate(out) if isinstance(o, torch.Tensor) and o.is_floating_point()]
    if not floating:
        raise ValueError("a pipeline stage with collectives needs a floating-point output")
    i = next((i for i in floating if out[i].requires_grad), floating[0])
    return (*out[:i], out[i] + token.to(out[i].dtype) * 0, *out[i + 1 :])


def _loss_of_microbatch(microbatches: int, seeds: bool) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    """The schedule's loss: the stage's first output (this rank's piece of the micro-batch's
    loss) over M, so that the micro-batches' losses and gradients add up to the batch mean. A
    copy of the loss other than copy 0 (`seeds` false: the loss replicated over a tensor-parallel
    group) seeds zero, else the copies' gradients would add up."""

    def loss(output: Any, target: torch.Tensor) -> torch.Tensor:
        first = output[0] if isinstance(output, tuple | list) else output
        return first / microbatches if seeds else first * 0

    return loss


def _concat(pieces: Sequence[Any]) -> torch.Tensor | None:
    if any(p is None for p in pieces):
        return None
    return torch.cat(list(pieces), dim=0)


__all__ = ["Pipeline", "Pipelined", "StageModule", "run_schedule", "stage_schedule"]
