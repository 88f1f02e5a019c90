"""The memory levers of a plan in the program: ZeRO stages of weights, the persistent bytes the
memory model predicts per rank, and the checkpointed regions of `recompute` ops.

* `zero_stages`: weight key -> ZeRO stage, for `PLAN.zero` (`unityc.runtime.zero` runs them);
* `frozen_weights`: the weights the model does not train, for `PLAN.frozen`;
* `bf16_pieces`: the weights held as bf16 pieces with fp32 masters (shards under ZeRO), for
  `PLAN.bf16_pieces` (`cost.memory.is_bf16_piece`, the cost model's side of one rule);
* `predicted_memory`: optimizer -> rank -> (weights, gradients, optimizer state) bytes, by
  `cost.memory.persistent_bytes` (the one formula the estimate uses too), for `PLAN.memory`:
  `--check` compares every rank's bytes with it;
* `regions`: maximal runs of `recompute` ops in program order (source ops in between do not
  break a run), each written as one function run by `torch.utils.checkpoint`;
* `core_recomputed`: the attentions whose region would be the attention alone
  (`patterns.recomputes_core`, selective recomputation): no region, the kernel checkpoints only
  its core (`runtime.kernels.attention`'s `recompute_core`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from xdsl.ir import SSAValue

from unityc.codegen.analysis import Analysis, CodegenError, read_in_bf16
from unityc.cost.memory import OPTIMIZERS, persistent_bytes
from unityc.cost.pricing import piece
from unityc.dialects.node import SOURCE_OPS
from unityc.dialects.pcg import AttentionOp
from unityc.dialects.pcg_types import PcgOp
from unityc.dialects.plan import op_plan
from unityc.dialects.precision import BF16_MIXED
from unityc.runtime.patterns import block_cuts, layer_of, recomputes_core

SOURCES = SOURCE_OPS


def zero_stage(op: PcgOp) -> int:
    return op_plan(op).zero


def frozen_weights(a: Analysis) -> list[str]:
    """The keys of the weights the model does not train (`pcg.weight ... frozen`), for
    `PLAN.frozen`: the program computes no gradient for them and never updates them."""
    return [str(op.attrs()["key"]) for op in a.ops if op.name == "pcg.weight" and op.attrs()["frozen"]]  # type: ignore[attr-defined]


def zero_stages(a: Analysis) -> dict[str, int]:
    return {str(op.attrs()["key"]): zero_stage(op) for op in a.ops if zero_stage(op)}  # type: ignore[attr-defined]


def bf16_pieces(a: Analysis) -> list[str]:
    """The keys of the weights held as bf16 pieces (`runtime.zero`), for `PLAN.bf16_pieces`."""
    return [str(op.attrs()["key"]) for op in a.ops if _bf16_piece(a, op)]  # type: ignore[attr-defined]


def _bf16_piece(a: Analysis, op: PcgOp) -> bool:
    """Under bf16-mixed, a trained weight (not ZeRO-3) every reader of which (through views) runs
    in bf16 under autocast: the rule of `cost.memory.is_bf16_piece`, on the program's analysis."""
    if op.name != "pcg.weight" or a.precision != BF16_MIXED or zero_stage(op) > 2:
        return False
    return a.value(op.results[0]).grad and read_in_bf16(a, op.results[0])


def predicted_memory(a: Analysis) -> dict[str, dict[int, tuple[int, int, int]]]:
    out: dict[str, dict[int, tuple[int, int, int]]] = {}
    for optimizer in OPTIMIZERS:
        per_rank: dict[int, list[int]] = {}
        for op in a.ops:
            if op.name != "pcg.weight":
                continue
            v = a.value(op.results[0])
            p = piece(v.type)
            assert p is not None
            size = p.nbytes // max(p.numel, 1)
            held_bf16 = _bf16_piece(a, op)
            kept = persistent_bytes(
                p.numel, size, v.type.copy_degree, zero_stage(op), optimizer, v.grad, held_bf16
            )  # fmt: skip
            for rank in v.held:
                row = per_rank.setdefault(rank, [0, 0, 0])
                row[0] += int(kept.weights)
                row[1] += int(kept.gradients)
                row[2] += int(kept.optimizer)
        out[optimizer] = {rank: (w, g, o) for rank, (w, g, o) in sorted(per_rank.items())}
    return out


@dataclass
class Region:
    """A run of recompute ops: its ops, the sources read only inside it, what it reads from
    outside (arguments) and what others read from it (results)."""

    ops: list[PcgOp] = field(default_factory=list)
    sources: list[PcgOp] = field(default_factory=list)
    gathers: list[PcgOp] = field(default_factory=list)
    """All-gathers read only inside it: run inside it too (again in backward), so the region
    keeps the piece gathered, not the gathered tensor (issue 38 item 4; the memory model's side
    is `cost.backward.pulled_gathers`)."""
    inputs: list[SSAValue] = field(default_factory=list)
    outputs: list[SSAValue] = field(default_factory=list)


def regions(a: Analysis) -> dict[PcgOp, Region]:
    """The region of every op in one (its first op and the ops of its region map to it); a
    block that only recomputes an attention's core (`core_recomputed`) is none."""
    kept = [block for block in _blocks(a) if not _core_only(block)]
    return _regions(a, [Region(ops=block) for block in kept])


def core_recomputed(a: Analysis) -> set[PcgOp]:
    """The attentions that recompute only their core (`patterns.recomputes_core`): a
    `recompute` block that is one attention (Megatron-LM's selective recomputation) runs
    outside any checkpoint region, its kernel checkpointing the scores, softmax, dropout and
    times V (the memory and cost models' side: `cost.backward.core_recomputed`)."""
    return {block[0] for block in _blocks(a) if _core_only(block)}


def _core_only(block: list[PcgOp]) -> bool:
    op = block[0]
    if not isinstance(op, AttentionOp):
        return False
    split = op.context_split(op.attrs(), op.typed_operands()) is not None
    source = op.operands[0].owner
    while isinstance(source, PcgOp) and source.name.startswith("parallel."):
        source = source.operands[0].owner
    fed = isinstance(source, PcgOp) and source.name not in SOURCES and op_plan(source).recompute
    return recomputes_core([o.name for o in block], split, fed)


def _blocks(a: Analysis) -> list[list[PcgOp]]:
    """The runs of `recompute` ops in program order, each cut into its blocks (`blocks`)."""
    runs: list[list[PcgOp]] = []
    current: list[PcgOp] | None = None
    for op in a.ops:
        if op.name in SOURCES:
            continue
        if not op_plan(op).recompute:
            current = None
            continue
        if op.name.startswith("parallel."):
            raise CodegenError(
                f"{op.name} is marked recompute: -t torch recomputes pcg ops only (a region's "
                "collectives would run again in backward)",
                op,
            )
        if current is None:
            current = []
            runs.append(current)
        current.append(op)
    return [block for run in runs for block in blocks(a, run)]


def blocks(a: Analysis, run: list[PcgOp]) -> list[list[PcgOp]]:
    """A run of recompute ops cut into one region per block of the model, as
    `torch.utils.checkpoint` is used per layer: one checkpoint over the whole run would make
    every activation of the run again at once in backward (so no lower peak than no
    recomputation). Consecutive ops reading weights of different blocks (`patterns.layer_of`:
    their keys up to the ModuleList index, as ZeRO's buckets are cut; or none) are separated
    where the fewest bytes cross from the ops before to the ops after (the residual stream), so
    a region saves the block's input."""
    index = {op: i for i, op in enumerate(run)}
    cuts = block_cuts([_block_of(op) for op in run], _values(a, run, index))
    return [run[start:end] for start, end in zip([0, *cuts], [*cuts, len(run)], strict=True)]


def _block_of(op: PcgOp) -> str | None:
    """The block of the first weight `op` reads (`layer_of`), or None."""
    for o in op.operands:
        if isinstance(o.owner, PcgOp) and o.owner.name == "pcg.weight":
            return layer_of(str(o.owner.attrs()["key"]))  # type: ignore[attr-defined]
    return None


def _values(a: Analysis, run: list[PcgOp], index: dict[PcgOp, int]) -> Iterator[tuple[int, int, float]]:
    """(position made, position last read, bytes of one piece) of each value the run makes (read
    after the run, or a plan output: read at the end), as `block_cuts` takes them."""
    outputs = set(a.outputs)
    for op in run:
        for r in op.results:
            readers = [index.get(u.operation, len(run)) for u in r.uses]  # type: ignore[arg-type]
            last = len(run) if r in outputs else max(readers, default=index[op])
            p = piece(a.value(r).type)
            yield index[op], last, p.nbytes if p else 0


def _regions(a: Analysis, runs: list[Region]) -> dict[PcgOp, Region]:
    """Each region's sources (read only inside it), inputs and outputs; every op of a region
    (its sources too) maps to it."""
    out: dict[PcgOp, Region] = {}
    readers = _readers(a)
    outputs = set(a.outputs)
    for region in runs:
        inside = set(region.ops)
        made: set[SSAValue] = {r for op in region.ops for r in op.results}
        for op in a.ops:
            if op.name not in SOURCES or op.results[0] in outputs:
                continue
            if readers[op.results[0]] and readers[op.results[0]] <= inside:
                region.sources.append(op)
        local = made | {s.results[0] for s in region.sources}
        for op in region.ops:
            for o in op.operands:
                owner = o.owner
                if (
                    o not in local
                    and isinstance(owner, PcgOp)
                    and owner.name == "parallel.all_gather"
                    and readers[o] <= inside
                    and o not in outputs
                ):
                    region.gathers.append(owner)
                    local.add(o)
        for op in (*region.gathers, *region.ops):
            for o in op.operands:
                if o not in local and o not in region.inputs:
                    region.inputs.append(o)
        region.outputs = [r for r in made if r in outputs or readers[r] - inside]
        region.outputs.sort(key=lambda r: a.ops.index(r.owner))  # type: ignore[arg-type]
        for op in (*region.ops, *region.sources):
            out[op] = region
    return out


def _readers(a: Analysis) -> dict[SSAValue, set[PcgOp]]:
    readers: dict[SSAValue, set[PcgOp]] = {r: set() for op in a.ops for r in op.results}
    for op in a.ops:
        for o in op.operands:
            readers.setdefault(o, set()).add(op)  # (a pipeline stage reads values made before it)
    return readers


def last_readers(a: Analysis) -> dict[PcgOp, list[SSAValue]]:
    """The ZeRO-3 weights each op reads last (the forward drops the gathered piece after it)."""
    last: dict[SSAValue, PcgOp] = {}
    for op in a.ops:
        for o in op.operands:
            if isinstance(o.owner, PcgOp) and o.owner.name == "pcg.weight" and zero_stage(o.owner) == 3:
                last[o] = op
    out: dict[PcgOp, list[SSAValue]] = {}
    for v, op in last.items():
        if v not in a.outputs:
            out.setdefault(op, []).append(v)
    return out
