"""What the backward needs: which tensors want and receive a gradient (`gradient_flags`), which
ops have a backward, and what each keeps from forward for it (`saved_by`, `would_save`,
`saved_values`; recomputation keeps only a region's inputs)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from unityc.cost.compute import NOT_DIFFERENTIABLE, SOURCES
from unityc.cost.memory import autocast_copy_bytes, saves, weight_view
from unityc.cost.pricing import type_info
from unityc.dialects.pcg import AttentionOp
from unityc.graph import Graph, Ref
from unityc.runtime.patterns import block_cuts, layer_of, recomputes_core


def gradient_flags(
    graph: Graph, order: Sequence[int], requires: Iterable[Ref] = (), roots: Iterable[Ref] | None = None
) -> tuple[set[Ref], set[Ref]]:
    """(tensors that depend on a trained weight, tensors that receive a gradient; a `frozen`
    weight wants none, as the program computes none for it). Gradients flow back
    from `roots` (default: the loss, the first output); `requires` adds tensors that want a
    gradient without being weights (a subgraph's inputs, in the search). No gradient passes a
    not-differentiable op (`pcg.stop_gradient`: a float result that wants none)."""
    requires_grad: set[Ref] = set(requires)
    for nid in order:
        node = graph.nodes[nid]
        floats = [(nid, i) for i, t in enumerate(node.types) if type_info(t).is_float]
        if (node.op == "pcg.weight" and not node.attr("frozen")) or (
            not node.is_source
            and node.op not in NOT_DIFFERENTIABLE
            and any(r in requires_grad for r in node.operand_refs())
        ):
            requires_grad.update(floats)
    gets_grad = {r for r in (graph.outputs[:1] if roots is None else roots) if r in requires_grad}
    for nid in reversed(order):
        node = graph.nodes[nid]
        if any((nid, i) in gets_grad for i in range(len(node.types))):
            gets_grad.update(r for r in node.operand_refs() if r in requires_grad)
    return requires_grad, gets_grad


def recompute_regions(graph: Graph, order: Sequence[int]) -> dict[int, int]:
    """The checkpoint region of every `recompute` op (node id -> its region's first node id),
    cut as the program cuts them (`unityc.codegen.memory.regions`): runs of consecutive
    recompute ops in `order`, each cut into one region per block of the model
    (`patterns.block_cuts` over the blocks of the weights the ops read and the bytes crossing
    each position, one piece per device). A block that only recomputes an attention's core
    (`core_recomputed`) is no region."""
    out: dict[int, int] = {}
    for block in _recompute_blocks(graph, order):
        if not _core_only(graph, block):
            out.update((nid, block[0]) for nid in block)
    return out


def core_recomputed(graph: Graph, order: Sequence[int]) -> set[int]:
    """The attentions that recompute only their core (`patterns.recomputes_core`: a recompute
    block that is one attention, Megatron-LM's selective recomputation; the program's side is
    `unityc.codegen.memory.core_recomputed`): each keeps what it would keep without
    recomputation but its core's internals (`memory.attention_core_saved_bytes`), and runs its
    core's forward again in backward, not its projections (`steps.StepBuilder`)."""
    return {block[0] for block in _recompute_blocks(graph, order) if _core_only(graph, block)}


def _core_only(graph: Graph, block: list[int]) -> bool:
    node = graph.nodes[block[0]]
    if node.op != "pcg.attention" or node.operands[0] is None:
        return False
    types = [None if r is None else graph.type_of(r) for r in node.operands]
    split = AttentionOp.context_split(dict(node.attrs), types) is not None
    source = graph.nodes[node.operands[0][0]]
    while source.op.startswith("parallel.") and source.operands[0] is not None:
        source = graph.nodes[source.operands[0][0]]
    fed = source.op not in SOURCES and source.recompute
    return recomputes_core([graph.nodes[nid].op for nid in block], split, fed)


def _recompute_blocks(graph: Graph, order: Sequence[int]) -> list[list[int]]:
    """The runs of consecutive `recompute` ops in `order`, each cut into its blocks."""
    readers: dict[Ref, list[int]] = {}
    for nid in order:
        for r in graph.nodes[nid].operand_refs():
            readers.setdefault(r, []).append(nid)
    runs: list[list[int]] = []
    current: list[int] | None = None
    for nid in order:
        node = graph.nodes[nid]
        if node.op in SOURCES:
            continue
        if not node.recompute:
            current = None
            continue
        if current is None:
            current = []
            runs.append(current)
        current.append(nid)
    blocks: list[list[int]] = []
    for run in runs:
        cuts = block_cuts([_block_of(graph, nid) for nid in run], _values(graph, run, readers))
        blocks.extend(run[start:end] for start, end in zip([0, *cuts], [*cuts, len(run)], strict=True))
    return blocks


def _block_of(graph: Graph, nid: int) -> str | None:
    """The block of the first weight op `nid` reads (`layer_of` of its key), or None."""
    for r in graph.nodes[nid].operand_refs():
        source = graph.nodes[r[0]]
        if source.op == "pcg.weight":
            return layer_of(str(source.attr("key")))
    return None


def _values(graph: Graph, run: list[int], readers: dict[Ref, list[int]]) -> Iterator[tuple[int, int, float]]:
    """(position made, position last read, bytes of one piece) of each value the run makes (read
    after the run, or a graph output: read at the end), as `block_cuts` takes them."""
    index = {nid: i for i, nid in enumerate(run)}
    outputs = set(graph.outputs)
    for nid in run:
        for k, t in enumerate(graph.nodes[nid].types):
            r = (nid, k)
            ends = [index.get(u, len(run)) for u in readers.get(r, ())]
            last = len(run) if r in outputs else max(ends, default=index[nid])
            yield index[nid], last, type_info(t).piece.nbytes


def saved_by(graph: Graph, order: Sequence[int], gets_grad: set[Ref]) -> dict[int, tuple[Ref, ...]]:
    """Per op with a backward, the tensors it keeps from forward for it (weights excluded). A
    `recompute` op keeps only its operands made outside its checkpoint region
    (`recompute_regions`: the region's inputs, which `torch.utils.checkpoint` keeps, so one
    hidden state per block boundary); the rest it makes again in backward. An attention that
    recomputes only its core (`core_recomputed`: in no region) keeps what it would keep without
    recomputation."""
    out: dict[int, tuple[Ref, ...]] = {}
    region = recompute_regions(graph, order)
    pulled = pulled_gathers(graph, order, region)
    for nid in order:
        node = graph.nodes[nid]
        if not node.recompute or nid not in region:
            out[nid] = would_save(graph, nid, gets_grad)
        elif has_backward(graph, nid, gets_grad):
            kept = (
                (graph.nodes[o[0]].operands[0] or o) if o[0] in pulled else o
                for o in node.operand_refs()
                if not weight_view(graph, o) and region.get(o[0]) != region[nid]
            )
            out[nid] = tuple(dict.fromkeys(o for o in kept if region.get(o[0]) != region[nid]))
    return out


def pulled_gathers(graph: Graph, order: Sequence[int], region: dict[int, int]) -> dict[int, int]:
    """The all-gathers a checkpoint region runs itself (node id -> the region's first node id):
    those whose output only ops of one region read (`codegen.memory.Region.gathers`): the region
    keeps the gathered piece and gathers it again when it recomputes in backward."""
    readers: dict[int, set[int | None]] = {}
    for nid in order:
        for r in graph.nodes[nid].operand_refs():
            if graph.nodes[r[0]].op == "parallel.all_gather":
                readers.setdefault(r[0], set()).add(region.get(nid))
    outputs = {r[0] for r in graph.outputs}
    return {
        g: next(iter(regions))  # type: ignore[misc]
        for g, regions in readers.items()
        if len(regions) == 1 and None not in regions and g not in outputs
    }


def has_backward(graph: Graph, nid: int, gets_grad: set[Ref]) -> bool:
    node = graph.nodes[nid]
    return node.op not in SOURCES and any((nid, i) in gets_grad for i in range(len(node.types)))


def would_save(graph: Graph, nid: int, gets_grad: set[Ref]) -> tuple[Ref, ...]:
    """What op `nid`'s backward keeps from forward without recomputation: weights and their views
    excluded (`memory.weight_view`), and what it reads through autocast's cast (to bf16,
    `memory.cast_operand`, or to fp32, `memory.upcast_operand`: it keeps the copy,
    `steps.autocast_copies`)."""
    if not has_backward(graph, nid, gets_grad):
        return ()
    node = graph.nodes[nid]
    rule = saves(node.op, dict(node.attrs))
    if rule == "operands":
        kept = (
            o
            for o in node.operand_refs()
            if not weight_view(graph, o) and not autocast_copy_bytes(graph, nid, o)
        )
        return tuple(dict.fromkeys(regathered(graph, o, gets_grad) or o for o in kept))
    if rule == "result":
        return tuple((nid, i) for i in range(len(node.types)))
    return ()


def regathered(graph: Graph, r: Ref, gets_grad: set[Ref]) -> Ref | None:
    """The piece an op outside a checkpoint region keeps in place of value `r` (None: `r`
    itself): of a sequence-parallel all-gather whose input wants a gradient, that input (the
    program keeps the shard and gathers it again in backward, `runtime.regather`; the codegen
    side is `codegen.emit.regathers`). Under bf16-mixed a bf16 op reading it keeps the shard's
    bf16 copy, once for all its readers (`steps.StepBuilder.autocast_copies`)."""
    node = graph.nodes[r[0]]
    if node.op != "parallel.all_gather":
        return None
    source = node.operands[0]
    return source if source is not None and source in gets_grad else None


def saved_values(graph: Graph, order: Sequence[int], gets_grad: set[Ref]) -> dict[Ref, None]:
    """The tensors some backward keeps from forward (in a stable order)."""
    saved: dict[Ref, None] = {}
    for refs in saved_by(graph, order, gets_grad).values():
        saved.update((r, None) for r in refs)
    return saved


def saved_readers(graph: Graph, order: Sequence[int], gets_grad: set[Ref]) -> dict[Ref, list[int]]:
    """The tensors some backward keeps from forward (in `saved_values`' order), each with the
    ops whose backward keeps it."""
    out: dict[Ref, list[int]] = {}
    for nid, refs in saved_by(graph, order, gets_grad).items():
        for r in refs:
            out.setdefault(r, []).append(nid)
    return out


__all__ = [
    "core_recomputed",
    "gradient_flags",
    "has_backward",
    "pulled_gathers",
    "regathered",
    "saved_by",
    "saved_readers",
    "saved_values",
    "would_save",
]
