"""Ring and all-to-all attention on WORLD gloo ranks against single-process attention.

`python ring_attention_worker.py WORLD DIR`: each rank runs every case (exchange, chunking,
masks, dtype, grouped-query heads) through a small attention layer (projections, rotary at
each row's global position, the context-parallel core, the output projection), and compares its
output rows and the gradients of its input rows and of every weight (summed over the ranks) with
the same layer on the whole sequence in one process. Prints one line per case; exit 1 on a
mismatch."""

from __future__ import annotations

import itertools
import math
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from unityc.runtime.ring_attention import Chunking, Masking, ring_attention, ulysses_attention

B, S, E, H, D = 2, 16, 16, 4, 4


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def layer(
    x: torch.Tensor, w: dict[str, torch.Tensor], cos: torch.Tensor, sin: torch.Tensor, groups: int, core: Any
) -> torch.Tensor:
    b, rows, _ = x.shape
    q = (x @ w["q"].T).view(b, rows, H, D).transpose(1, 2)
    k = (x @ w["k"].T).view(b, rows, groups, D).transpose(1, 2)
    v = (x @ w["v"].T).view(b, rows, groups, D).transpose(1, 2)
    out = core(rotate(q, cos, sin), rotate(k, cos, sin), v)
    return out.transpose(1, 2).reshape(b, rows, E) @ w["o"].T


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, masking: Masking, padding: Any, bias: Any
) -> torch.Tensor:
    k, v = (t.repeat_interleave(H // t.shape[1], dim=1) for t in (k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    if bias is not None:
        scores = scores + bias
    pos = torch.arange(S)
    seen = masking.visible(pos, pos)
    keep = torch.ones(B, 1, S, S, dtype=torch.bool)
    if seen is not None:
        keep &= seen
    if padding is not None:
        keep &= padding[:, None, None, :]
    scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ v


def case(
    rank: int, world: int, exchange: str, zigzag: bool, masks: str, dtype: torch.dtype, groups: int
) -> str:
    torch.manual_seed(0)
    x = torch.randn(B, S, E, dtype=dtype)
    w = {
        n: torch.randn(r, E, dtype=dtype) / 4
        for n, r in (("q", E), ("k", groups * D), ("v", groups * D), ("o", E))
    }
    target = torch.randn(B, S, E, dtype=dtype)
    angle = torch.arange(S, dtype=dtype)[:, None] / 10.0 ** (torch.arange(D // 2, dtype=dtype) / (D // 2))
    cos = torch.cat([angle.cos()] * 2, -1)[None, None]
    sin = torch.cat([angle.sin()] * 2, -1)[None, None]
    masking = Masking(causal="causal" in masks, window=5 if "window" in masks else None)
    padding = None
    if "padding" in masks:  # right padding: the second sequence ends 3 tokens early
        padding = torch.ones(B, S, dtype=torch.bool)
        padding[1, S - 3 :] = False
    bias = torch.randn(1, H, S, S, dtype=dtype) if "bias" in masks else None

    def run(
        inputs: torch.Tensor, weights: dict[str, torch.Tensor], c: Any, s: Any, core: Any, rows: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        inputs = inputs.clone().requires_grad_()
        weights = {n: t.clone().requires_grad_() for n, t in weights.items()}
        out = layer(inputs, weights, c, s, groups, core)
        (out * rows).sum().backward()
        assert inputs.grad is not None
        return (out.detach(), inputs.grad, *(weights[n].grad for n in sorted(weights)))

    expected = run(x, w, cos, sin, lambda q, k, v: reference(q, k, v, masking, padding, bias), target)
    chunking = Chunking(world, rank, zigzag)
    fn = ring_attention if exchange == "ring" else ulysses_attention
    local_pad = chunking.shard(padding, 1) if padding is not None else None
    local_bias = chunking.shard(bias, 2) if bias is not None else None

    def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fn(q, k, v, None, chunking, masking, local_pad, local_bias, math=dtype == torch.float64)

    got = run(
        chunking.shard(x, 1),
        w,
        chunking.shard(cos, 2),
        chunking.shard(sin, 2),
        core,
        chunking.shard(target, 1),
    )
    got = list(got)
    for g in got[2:]:  # weight gradients: each rank holds its rows' share
        dist.all_reduce(g)
    want = [chunking.shard(expected[0], 1), chunking.shard(expected[1], 1), *expected[2:]]
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    names = ["output", "grad x", *(f"grad w{n}" for n in sorted(w))]
    worst = max(((g - e).abs().max() / e.abs().max()).item() for g, e in zip(got, want, strict=True))
    bad = [n for n, g, e in zip(names, got, want, strict=True) if (g - e).abs().max() > tol * e.abs().max()]
    label = f"{exchange} zigzag={zigzag} masks={masks} {dtype} kv_heads={groups}"
    if bad:
        raise AssertionError(f"{label}: {', '.join(bad)} differ (worst relative {worst:.2e})")
    return f"{label}: ok (worst relative {worst:.1e})"


def main(rank: int, world: int, folder: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world)
    exchanges, zigzags = ("ring", "all-to-all"), (True, False)
    masks = ("none", "causal+padding", "causal+window+padding", "bias+padding")
    dtypes, kv = (torch.float32, torch.float64), (H, 2, 1)
    for exchange, zigzag, mask, dtype, groups in itertools.product(exchanges, zigzags, masks, dtypes, kv):
        if groups == 1 and (dtype == torch.float32 or mask != "causal+padding"):
            continue  # multi-query: one case per exchange and chunking
        line = case(rank, world, exchange, zigzag, mask, dtype, groups)
        if rank == 0:
            print(line, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world, folder = int(sys.argv[1]), sys.argv[2]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    mp.spawn(main, args=(world, folder), nprocs=world)
