"""Pipelined programs: each stage of the plan is an nn.Module run by `torch.distributed.pipelining`.

A generated pipelined program defines `stage_k(ctx, w, x, *received) -> tuple` per stage (the
ops of stage k on this rank's pieces of one micro-batch: `received` is what the previous stage
sent, the result what the next one receives; the last stage returns the graph's outputs, the
loss first) and a `Pipeline` value: the schedule, the micro-batch count and the ranks of each
stage. Stage k runs on the ranks of its group, k mod (stages / virtual stages); groups have equal
sizes, and rank i of every group forms pipeline i (its own process group): a group of g ranks
runs g pipelines side by side, each on its own shard of the batch (data parallelism inside a
stage), and the weights held in copies get their gradients all-reduced after the schedule.

Every rank calls `schedule.step` with its pieces of the inputs as keyword arguments, which the
schedule splits into micro-batches along dim 0 (micro-batch m = chunk m of each piece, as the
plan defines it) and hands to each of its stages. The loss is the mean of the micro-batches'
losses: the schedule's loss function divides each micro-batch's loss by M (and the gradients are
not rescaled), so loss and gradients are the whole batch's. Outputs other than the loss are
each micro-batch's pieces concatenated along dim 0, again as the plan defines them.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from unityc.runtime.context import Context
from unityc.runtime.plan import Plan
from unityc.runtime.train import Trainer

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
    """What a pipelined program hands to `rt.main`: its pipeline and stage functions."""

    pipeline: Pipeline
    stages: tuple[StageFunction, ...]

    @property
    def trainer(self) -> type[Trainer]:
        """What `rt.main` runs the program with."""
        return PipelineTrainer


class StageModule(nn.Module):
    """One stage as `PipelineStage` runs it: the generated function on this rank's weights, the
    micro-batch's inputs (keyword arguments) and constants, and what the previous stage sent.
    The last stage keeps each micro-batch's outputs (detached) for the step's results."""

    def __init__(
        self,
        fn: StageFunction,
        ctx: Context,
        weights: dict[str, torch.Tensor],
        constants: dict[str, Any],
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ):
        super().__init__()
        self.fn, self.ctx, self.weights, self.constants = fn, ctx, weights, constants
        self.autocast = autocast
        """The plan's precision (bf16-mixed: the stage's forward under autocast)."""
        self.outputs: list[tuple[Any, ...]] = []
        self.calls = 0

    def forward(self, *received: torch.Tensor, **inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        step, self.ctx.step = (
            self.ctx.step,
            self.ctx.step * 1_000_003 + self.calls,
        )  # dropout differs per micro-batch
        try:
            with self.autocast():
                out = self.fn(self.ctx, self.weights, {**self.constants, **inputs}, *received)
        finally:
            self.ctx.step = step
        self.calls += 1
        self.outputs.append(tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in out))
        return out


class PipelineTrainer(Trainer):
    """A `Trainer` whose step runs the pipeline schedule (see the module docstring)."""

    def __init__(self, plan: Plan, program: Pipelined, args: argparse.Namespace, *rest: Any) -> None:
        super().__init__(plan, program.stages[0], args, *rest)
        self.pipeline = pipeline = program.pipeline
        self.agree(
            pipeline.stages == len(program.stages),
            f"{len(program.stages)} stage functions for {pipeline.stages} stages",
        )
        chains = pipeline.chains()
        groups = self.comm.new_groups(chains)  # a collective: every rank creates every group
        mine = next(c for c in chains if self.rank in c)
        constants = {k: v for k, v in self.data.items() if k not in plan.inputs}
        self.inputs = {k: v for k, v in self.data.items() if k in plan.inputs}
        self.modules = [
            StageModule(program.stages[k], self.ctx, self.weights, constants, self.autocast)
            for k in pipeline.stages_of(self.rank)
        ]
        stages = [
            PipelineStage(module, k, pipeline.stages, self.device, group=groups[mine])
            for module, k in zip(self.modules, pipeline.stages_of(self.rank), strict=True)
        ]
        self.is_last = pipeline.stages - 1 in pipeline.stages_of(self.rank)
        m = pipeline.microbatches
        schedule = SCHEDULES[pipeline.schedule]
        loss = _loss_of_microbatch(m)
        if pipeline.schedule == "interleaved-1f1b":
            self.schedule = schedule(stages, m, loss_fn=loss, scale_grads=False)
        else:
            (stage,) = stages
            self.schedule = schedule(stage, m, loss_fn=loss, scale_grads=False)

    def step(self, step: int) -> tuple[list[Any], list[torch.Tensor | None]]:
        """The schedule over every micro-batch (forward and backward), then the gradient sync of
        weight copies and the optimizer step."""
        self.ctx.begin_step(step)
        for module in self.modules:
            module.outputs.clear()
            module.calls = 0
        self.at(f"step {step + 1}: pipeline schedule")
        losses: list[torch.Tensor] = []
        target = torch.zeros(self.pipeline.microbatches, device=self.device)  # the loss is the stage's own
        self.schedule.step(target=target, losses=losses, return_outputs=False, **self.inputs)
        return self._outputs(losses), self.update(step)

    def _outputs(self, losses: list[torch.Tensor]) -> list[Any]:
        count = len(self.plan.outputs)
        if not self.is_last:
            return [None] * count
        last = self.modules[-1].outputs[
            -self.pipeline.microbatches :
        ]  # the first step runs a warm-up forward
        loss = torch.stack([x.detach() for x in losses]).sum() if losses else None
        rest = [_concat([mb[i] for mb in last]) for i in range(1, count)]
        return [loss, *rest]


def _loss_of_microbatch(microbatches: int) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    """The schedule's loss: the stage's first output (this rank's piece of the micro-batch's
    loss) over M, so that the micro-batches' losses and gradients add up to the batch mean."""

    def loss(output: Any, target: torch.Tensor) -> torch.Tensor:
        first = output[0] if isinstance(output, tuple | list) else output
        return first / microbatches

    return loss


def _concat(pieces: Sequence[Any]) -> torch.Tensor | None:
    if any(p is None for p in pieces):
        return None
    return torch.cat(list(pieces), dim=0)


__all__ = ["Pipeline", "PipelineTrainer", "Pipelined", "StageModule"]
