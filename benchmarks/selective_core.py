"""Selective recomputation of the attention core against recomputing the whole attention (issue 38).

    python benchmarks/selective_core.py [--seq 1024] [--hidden 512] [--heads 8] [--rounds 5]

One attention layer (`runtime.kernels.attention`, batch 1, causal, fp32 on the CPU, one
thread), forward and backward, three ways: not recomputed; the whole op under
`torch.utils.checkpoint` (what selective recomputation ran before: the q, k, v and output
projections again in backward); only the core checkpointed (`recompute_core=True`, Megatron-LM's
selective recomputation). For each kernel the program picks (`AttentionOp.kernel`): the fused
SDPA one, and the hand-written one that attention dropout needs (GPT-2, GPT-3). Printed per
case: the bytes kept for backward (`runtime.saved.SavedBytes`, the operands excluded), what the
memory model says (`attention_bytes.attention_task_bytes`, less `attention_core_task_bytes` for the
core, 0 + the input for the whole op, which keeps its operands only), and the CPU seconds of a
forward and backward (the median of `--rounds` alternating rounds, `time.process_time`). In
fp32: under CPU autocast the softmax runs in bf16 unless a float mask promotes the scores, where
CUDA's autocast runs it in fp32 (`memory.probability_bytes` counts the latter).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint
from xdsl.dialects.builtin import f32

from unityc.cost.attention_bytes import attention_core_task_bytes, attention_task_bytes
from unityc.dialects.pcg import AttentionOp
from unityc.dialects.pcg_types import TensorType
from unityc.runtime.kernels import attention
from unityc.runtime.saved import SavedBytes

MODES = ("none", "whole", "core")
P = 0.1


def _drop(x: torch.Tensor) -> torch.Tensor:
    """The program's attention dropout (`Context.dropout`): a keep-mask that is a function of the
    element's index, so the recomputation draws the same one."""
    keep = torch.arange(x.numel(), device=x.device).reshape(x.shape) % 10 != 0
    return x * keep * (1 / (1 - P))


def case(seq: int, hidden: int, heads: int, dropout: bool) -> Callable[[str], tuple[int, float]]:
    """A function of the mode: (bytes kept for backward, CPU seconds of forward + backward)."""
    torch.manual_seed(0)
    x = torch.randn(1, seq, hidden, requires_grad=True)
    weights = [(torch.randn(hidden, hidden) / hidden**0.5).requires_grad_() for _ in range(4)]
    kernel = AttentionOp.kernel({"heads": heads, "dropout": P if dropout else None})

    def run(mode: str, x: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
        return attention(
            x, x, x, *w, None, None, None, None, None, heads, causal=0, kernel=kernel,
            dropout=_drop if dropout else None, recompute_core=mode == "core",
        )  # fmt: skip

    def one(mode: str) -> tuple[int, float]:
        began = time.process_time()
        with SavedBytes.of([x, *weights]) as saved:
            if mode == "whole":
                out = checkpoint(run, mode, x, *weights, use_reentrant=False)
            else:
                out = run(mode, x, *weights)
        out.square().mean().backward()
        return saved.bytes, time.process_time() - began

    return one


def modelled(seq: int, hidden: int, heads: int, dropout: bool, mode: str) -> int:
    attrs = {"heads": heads, "causal": True, "dropout": P if dropout else None}
    t = TensorType([1, seq, hidden], f32)
    w = TensorType([hidden, hidden], f32)
    types = [t, t, t, w, w, w, w, None, None, None, None, None, None, None]
    result = TensorType([1, seq, hidden], f32)
    if mode == "whole":
        return 0  # the checkpoint keeps its inputs: the operands, not counted here
    kept = attention_task_bytes(attrs, types, result)
    return kept - attention_core_task_bytes(attrs, types, result) if mode == "core" else kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("| kernel | mode | kept for backward | model | CPU s, forward + backward |")
    print("|---|---|---|---|---|")
    for dropout in (False, True):
        one = case(args.seq, args.hidden, args.heads, dropout)
        for mode in MODES:
            one(mode)  # warm up
        seconds: dict[str, list[float]] = {m: [] for m in MODES}
        kept: dict[str, int] = {}
        for _ in range(args.rounds):
            for mode in MODES:
                kept[mode], s = one(mode)
                seconds[mode].append(s)
        name = "math, attention dropout" if dropout else "sdpa"
        for mode in MODES:
            model = modelled(args.seq, args.hidden, args.heads, dropout, mode)
            median = statistics.median(seconds[mode])
            print(f"| {name} | {mode} | {kept[mode]:,} B | {model:,} B | {median:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
