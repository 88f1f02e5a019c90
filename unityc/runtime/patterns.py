"""The collectives a generated program runs, and each one's dual (the collective that carries
its gradients back). The cost model prices exactly these (`unityc.cost.communication` imports
them from here), and the gradient buckets of weights held in copies, which both sides cut
alike; plain Python, so the compiler can import it without torch.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from itertools import accumulate, pairwise

PATTERNS = (
    "p2p",
    "scatter",
    "gather",
    "broadcast",
    "reduce",
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
)

DUAL = {
    "p2p": "p2p",
    "scatter": "gather",
    "gather": "scatter",
    "broadcast": "reduce",
    "reduce": "broadcast",
    "all_reduce": "all_reduce",
    "reduce_scatter": "all_gather",
    "all_gather": "reduce_scatter",
    "all_to_all": "all_to_all",
}
"""Backward of each pattern: partition/combine are scatter/gather, replicate/reduce are
broadcast/reduce, reduce_scatter/all_gather; p2p, all_reduce and all_to_all are their own."""

BUCKET_BYTES = 25 * 1024 * 1024
"""Gradient bucket size of weights held in copies (DDP's default, 25 MiB): the program
all-reduces each bucket as soon as the backward has produced all of its gradients, and the cost
model prices the same buckets (`unityc.cost.schedule`)."""


def gradient_buckets(pieces: Sequence[tuple[int, str]], limit: int = BUCKET_BYTES) -> list[list[int]]:
    """Indices into `pieces` ((bytes, dtype) of each gradient of one copy group, in the order
    the backward is expected to produce them: the plan's weights reversed), cut into buckets of
    at most `limit` bytes (a piece larger than `limit` is a bucket of its own) and of one dtype.
    Every rank of the group computes the same buckets, so they issue the same collectives in
    the same order."""
    out: list[list[int]] = []
    size = 0
    dtype = None
    for i, (nbytes, kind) in enumerate(pieces):
        if not out or size + nbytes > limit or kind != dtype:
            out.append([])
            size, dtype = 0, kind
        out[-1].append(i)
        size += nbytes
    return out


def layer_of(key: str) -> str:
    """The layer a weight key belongs to, for ZeRO bucketing: the key up to its first numeric
    component (`model.layers.3.mlp.up.weight` -> `model.layers.3`), '' outside numbered layers."""
    parts = key.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return ""


def block_cuts(blocks: Sequence[str | None], values: Iterable[tuple[int, int, float]]) -> list[int]:
    """Where a run of recomputed ops is cut into one checkpoint region per block of the model
    (as `torch.utils.checkpoint` is used per layer): `blocks[p]` is the block (`layer_of` of the
    first weight it reads) of the op at position p, None for an op reading no weight; `values`
    holds (position made, position last read, bytes) of every value the run makes, a value
    read after the run (or an output) last read at `len(blocks)`. Between two consecutive
    weight-reading ops of different blocks, the cut goes after the position where the fewest
    bytes cross (the residual stream), so a region saves the block's input. Returns the start
    positions of the regions after the first. Both the program (`unityc.codegen.memory.blocks`)
    and the memory model (`unityc.cost.backward.recompute_regions`) cut so."""
    delta = [0.0] * (len(blocks) + 1)
    for made, last, nbytes in values:
        delta[made] += nbytes
        delta[last] -= nbytes
    crossing = list(accumulate(delta[:-1]))  # bytes made at or before p that ops after p read
    anchors = [(p, b) for p, b in enumerate(blocks) if b is not None]
    cuts = []
    for (i, before), (j, after) in pairwise(anchors):
        if before != after:
            cuts.append(min(range(i, j), key=lambda p: (crossing[p], p)) + 1)
    return cuts


def recomputes_core(ops: Sequence[str], context_split: bool, input_recomputed: bool) -> bool:
    """Whether a checkpoint region of these ops (their names, in program order; one region cut
    by `block_cuts`) recomputes only an attention's core, as Megatron-LM's selective
    recomputation does: a region that is one `pcg.attention` (the `selective` lever marks only
    the attention) runs its q, k, v and output projections once and checkpoints the core
    (scores, softmax, dropout, times V) inside the kernel (`runtime.kernels.attention`'s
    `recompute_core`), so it keeps the projections' input, q, k, v and the core's output, and
    backward runs the core's forward again, not the projections'. Recomputed whole (keeping
    only its input) where the op making its query input (through collectives) is recomputed
    too (`input_recomputed`: full recomputation, whose regions the collectives cut, so that an
    attention between two is a region of its own), or where it is context-parallel
    (`context_split`: the ring's block kernels). Both the program
    (`unityc.codegen.memory.core_recomputed`) and the memory and cost models
    (`unityc.cost.backward.core_recomputed`) decide by this."""
    return list(ops) == ["pcg.attention"] and not context_split and not input_recomputed


def zero_buckets(weights: Sequence[tuple[Hashable, str]]) -> list[list[int]]:
    """Indices into `weights` ((kind, key) of each ZeRO weight, in plan order; the kind names
    the copy group, stage and dtype) cut into buckets: runs of consecutive weights of one kind
    and layer (`layer_of`). Each bucket moves in ONE all-gather / reduce-scatter in the program
    (`unityc.runtime.zero`), and the cost model prices it so (`unityc.cost.pricing`)."""
    out: list[list[int]] = []
    last: tuple[Hashable, str] | None = None
    for i, (kind, key) in enumerate(weights):
        this = (kind, layer_of(key))
        if not out or this != last:
            out.append([])
        out[-1].append(i)
        last = this
    return out
