"""Progress a person can follow: every `--log-every N` steps rank 0 prints the loss, the learning
rate, samples and tokens per second and model FLOPs utilization over the interval, beside the cost
model's predicted iteration time. `--profile DIR` records a torch.profiler trace per rank
(`DIR/rank-<r>.json`, Chrome trace format: open it in Perfetto or chrome://tracing).

MFU = the model's training FLOPs per iteration (recorded in the plan by the cost model: forward,
backward and update on logical shapes) / (measured seconds per iteration x the machine's peak
FLOP/s, all devices together).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch

from unityc.runtime.plan import Plan


class Progress:
    """Accumulates step times between log lines (rank 0 prints)."""

    def __init__(self, plan: Plan, every: int, total: int):
        self.plan, self.every, self.total = plan, every, total
        self.seconds = 0.0
        self.steps = 0

    def due(self, step: int, first: int) -> bool:
        """Whether step `step` (0-based) ends an interval: every N-th, the first and the last."""
        done = step + 1
        return done == first + 1 or done == self.total or (self.every > 0 and done % self.every == 0)

    def add(self, seconds: float) -> None:
        self.seconds += seconds
        self.steps += 1

    def line(self, step: int, loss: float, lr: float | None) -> str:
        plan = self.plan
        per_step = self.seconds / max(1, self.steps)
        parts = [f"step {step + 1}: loss {loss:.6f}"]
        if lr is not None:
            parts.append(f"lr {lr:.3g}")
        if per_step > 0:
            parts.append(f"{per_step * 1e3:.1f} ms/step")
            parts.append(f"{plan.samples / per_step:.1f} samples/s")
            if plan.tokens:
                parts.append(f"{plan.tokens / per_step:.0f} tokens/s")
            if plan.flops and plan.peak_flops:
                parts.append(f"MFU {100 * plan.flops / (per_step * plan.peak_flops):.2f}%")
            if plan.predicted_s:
                parts.append(f"predicted {plan.predicted_s * 1e3:.1f} ms/step")
        self.seconds, self.steps = 0.0, 0
        return ", ".join(parts)


@contextlib.contextmanager
def profiled(directory: str | None, rank: int, device: torch.device) -> Iterator[None]:
    """A torch.profiler trace of what runs inside, written to DIR/rank-<rank>.json."""
    if directory is None:
        yield
        return
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, record_shapes=False) as prof:
        yield
    Path(directory).mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(Path(directory) / f"rank-{rank}.json"))
