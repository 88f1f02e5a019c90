"""`-t torch` for a pipelined plan: one function per stage, run by `torch.distributed.pipelining`.

The stages' code is written from the plan of one micro-batch (`microbatch_module`: the kernels
see micro-batch shapes, a loss divides by the micro-batch's count), stage by stage with the
`Writer` of unpipelined programs; `PLAN` describes the whole batch (the pieces each rank loads).
A value a later stage reads crosses each stage boundary up to its last reader (the last stage
returns the graph's outputs): stage k's function takes what crosses into it and returns what
crosses out. Rank i of one rank group sends to rank i of the next (`runtime/pipeline.py`), so a
crossing value must be held on every rank of its stage's group, and a task of a later stage reads
the piece its own pipeline brings. Inside a stage the ranks of its group may talk (tensor
parallelism: the stage's collectives and transfers are in its code, their process groups in
PLAN's, which every rank creates); every rank of a group runs the group's stages on the same
micro-batches in the schedule's one order, so their collectives meet. A stage that talks to a rank
outside its group is refused, located at the op. A weight held by several stages (one
`pcg.weight` of its key per stage reading it) is one weight in PLAN whose copies span those
stages (`_tied_sources`): loaded equal, its gradients summed over its copy groups after the
schedule, one key in checkpoints.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from unityc.codegen.analysis import Analysis, CodegenError, analyze
from unityc.codegen.emit import INDENT, Writer
from unityc.codegen.memory import zero_stage
from unityc.dialects.container import graph_function
from unityc.dialects.pcg_types import PcgOp, TensorType
from unityc.dialects.pipeline import (
    check_pipeline,
    graph_ops,
    microbatch_module,
    pipeline_of,
    stage_of,
)
from unityc.dialects.plan import Pipeline


def is_pipelined(module: ModuleOp) -> bool:
    return pipeline_of(graph_function(module)) is not None


def emit_pipelined(
    module: ModuleOp,
    a: Analysis,
    machine: str | None,
    source: str,
    measures: dict[str, float],
    accumulation: int = 1,
) -> str:
    """The program of a pipelined plan (`a`: its analysis for the whole batch; `measures`: what
    its progress lines compare with, as for any plan; `accumulation`: the schedule runs that
    many times per step on as many chunks of the batch, the gradients summed)."""
    from unityc.codegen import program_head  # the package imports this module

    fn = graph_function(module)
    checked = check_pipeline(
        fn, lambda op: set(a.value(op.results[0]).where.values()) if op.results else None
    )
    assert checked is not None
    pipeline, count = checked
    micro = microbatch_module(module, pipeline.microbatches * accumulation)
    origin: dict[Operation, Operation] = dict(
        zip(graph_ops(graph_function(micro)), graph_ops(fn), strict=True)
    )
    head = functools.partial(program_head, accumulation=accumulation)
    try:
        return _emit(a, analyze(micro, machine), pipeline, count, source, head, measures)
    except CodegenError as e:
        raise CodegenError(str(e), origin.get(e.op, e.op) if e.op is not None else None) from None


def _emit(
    a: Analysis,
    m: Analysis,
    pipeline: Pipeline,
    count: int,
    source: str,
    program_head: Callable[..., list[str]],
    measures: dict[str, float],
) -> str:
    stages = {op: stage_of(op) for op in m.ops}
    stage = {op: k for op, k in stages.items() if k is not None}
    assert len(stage) == len(stages)  # check_pipeline: every op of a pipelined plan has a stage
    groups = _rank_groups(m, stage, pipeline.rank_groups(count))
    crossing = _crossings(m, stage, count)
    _check_held(m, stage, groups, crossing)
    functions: list[str] = []
    tables: dict[str, tuple[int, ...]] = {}
    collective_groups: dict[tuple[int, ...], None] = {}  # the stages' own (tensor parallelism)
    recompute_regions = 0
    for k in range(count):
        received = crossing[k - 1] if k else []
        sent = crossing[k] if k < count - 1 else list(m.outputs)
        ops = [op for op in m.ops if stage[op] == k]
        writer = Writer(_stage_view(m, stage, groups, k, received, ops, sent))
        lines = _stage_code(writer, ops, k, groups[k % len(groups)])
        tables.update(writer.tables)
        collective_groups.update(writer.groups)
        recompute_regions += writer.regions
        functions += _function(m, k, groups[k % len(groups)], received, sent, lines, k == count - 1)
    sources = Writer(_tied_sources(a))  # PLAN's tables: the whole batch's weights and inputs
    sources.plan_sources(m)  # (and one micro-batch's constants)
    sources.tables = tables
    sources.groups.update(collective_groups)  # PLAN's process groups: every rank creates them
    sources.regions = recompute_regions  # the program imports torch.utils.checkpoint if any
    stage_ranks = tuple(groups[k % len(groups)] for k in range(count))
    summary = (
        f"Pipelined: {count} stages, schedule {pipeline.schedule}, {pipeline.microbatches} micro-batches; "
        f"stage k on ranks {', '.join(map(str, stage_ranks))} (by k)."
    )
    about = [
        "Every rank runs this file. `stage_k` computes this rank's pieces of stage k for one micro-batch",
        "from what the previous stage sent (its arguments after `x`) and returns what the next stage",
        "receives (the last stage: the outputs, the loss first); torch.distributed.pipelining runs the",
        "stages under the schedule, rank i of each stage's group forming pipeline i.",
    ]
    names = ", ".join(f"stage_{k}" for k in range(count)) + ("," if count == 1 else "")
    return "\n".join(
        [
            *program_head(a, sources, source, summary, about, measures),
            f"PIPELINE = rt.Pipeline({pipeline.schedule!r}, {pipeline.microbatches}, {stage_ranks!r})",
            "",
            "",
            *functions,
            f"PROGRAM = rt.Pipelined(PIPELINE, ({names}))",
            "",
            'if __name__ == "__main__":',
            "    sys.exit(rt.main(PLAN, PROGRAM, build=build_reference))",
            "",
        ]
    )


def _tied_sources(a: Analysis) -> Analysis:
    """`a` where a weight held by several `pcg.weight` ops (one per stage reading it,
    `search.pipeline.untie`) is one weight whose copies are all of theirs (op j's copy c is copy
    (copies before op j) + c): every copy loads the same values, and its copy groups (the ranks
    holding one piece, across the stages) all-reduce its gradients after the schedule, so the
    copies update identically; PLAN and checkpoints know one key. The ops must agree on shape,
    element type, sharding and partial sums, and hold no ZeRO shards."""
    by_key: dict[str, list[PcgOp]] = {}
    for op in a.ops:
        if op.name == "pcg.weight":
            by_key.setdefault(str(op.attrs()["key"]), []).append(op)  # type: ignore[attr-defined]
    values = dict(a.values)
    dropped: set[PcgOp] = set()
    for key, ops in by_key.items():
        if len(ops) == 1:
            continue
        first = a.value(ops[0].results[0])
        t = first.type
        held: dict[int, tuple[int, ...]] = {}
        copies = 0
        for op in ops:
            v = a.value(op.results[0])
            u = v.type
            if (u.shape, u.element_type, u.shard, u.sum_degree) != (
                t.shape, t.element_type, t.shard, t.sum_degree
            ):  # fmt: skip
                raise CodegenError(
                    f"pcg.weight '{key}' is held on several stages with different layouts ({t} and {u}): "
                    "-t torch sums the gradients of equal copies",
                    op,
                )
            if zero_stage(op):
                raise CodegenError(f"pcg.weight '{key}' held on several stages cannot be ZeRO-sharded", op)
            overlap = set(held) & set(v.held)
            if overlap:
                raise CodegenError(
                    f"pcg.weight '{key}' is held twice on rank(s) {sorted(overlap)}: a rank holds one "
                    "piece of a weight",
                    op,
                )
            held.update({r: (*c[:-1], copies + c[-1]) for r, c in v.held.items()})
            copies += u.copy_degree
            dropped.add(op)
        merged = TensorType(t.shape, t.element_type, t.shard, t.sum_degree, copies)
        where = {c: r for r, c in held.items()}
        values[ops[0].results[0]] = replace(first, type=merged, where=where, held=held)
        dropped.discard(ops[0])
    return replace(a, values=values, ops=[op for op in a.ops if op not in dropped])


def _rank_groups(m: Analysis, stage: dict[PcgOp, int], count: int) -> list[tuple[int, ...]]:
    """The ranks of each rank group (the devices its stages' ops run on), checked to be equal in
    size and ordered so that rank i of every group, in group order, is a rising pipeline."""
    ranks: list[set[int]] = [set() for _ in range(count)]
    first: list[PcgOp | None] = [None] * count
    for op in m.ops:
        g = stage[op] % count
        ranks[g] |= set(m.value(op.results[0]).where.values())
        first[g] = first[g] or op
    groups = [tuple(sorted(r)) for r in ranks]
    for g, ranks_g in enumerate(groups):
        if len(ranks_g) != len(groups[0]):
            raise CodegenError(
                f"rank group {g} has {len(ranks_g)} ranks but group 0 has {len(groups[0])}: -t torch runs "
                "pipelines of equal groups (rank i of each group forms pipeline i)",
                first[g],
            )
        if g and any(b <= a for a, b in zip(groups[g - 1], ranks_g, strict=True)):
            raise CodegenError(
                f"rank group {g} (ranks {list(ranks_g)}) does not follow group {g - 1} (ranks "
                f"{list(groups[g - 1])}): -t torch needs each group's ranks above the previous group's",
                first[g],
            )
    return groups


def _crossings(m: Analysis, stage: dict[PcgOp, int], count: int) -> list[list[SSAValue]]:
    """For each boundary k (between stage k and k + 1), the values crossing it, in op order."""
    last: dict[SSAValue, int] = {}
    for op in m.ops:
        for v in op.operands:
            last[v] = max(last.get(v, -1), stage[op])
    for v in m.outputs:
        last[v] = count - 1
    crossing: list[list[SSAValue]] = [[] for _ in range(max(count - 1, 0))]
    for op in m.ops:
        for r in op.results:
            for k in range(stage[op], last.get(r, -1)):
                crossing[k].append(r)
    return crossing


def _check_held(
    m: Analysis, stage: dict[PcgOp, int], groups: list[tuple[int, ...]], crossing: list[list[SSAValue]]
) -> None:
    for values in crossing:
        for v in values:
            op = v.owner
            assert isinstance(op, PcgOp)
            group = groups[stage[op] % len(groups)]
            held = tuple(sorted(m.value(v).held))
            if held != group:
                raise CodegenError(
                    f"{op.name} of stage {stage[op]}: its result crosses to a later stage but is held on "
                    f"ranks {list(held)}, not on every rank of its group {list(group)}: each rank of a stage "
                    "sends its own piece down its pipeline",
                    op,
                )


def _stage_view(
    m: Analysis,
    stage: dict[PcgOp, int],
    groups: list[tuple[int, ...]],
    k: int,
    received: list[SSAValue],
    ops: list[PcgOp],
    sent: list[SSAValue],
) -> Analysis:
    """The analysis as stage k sees it: its `ops`, whose outputs are what it `sent`s on (so its
    recompute runs end with it); a value it receives is held by the rank of this stage's group
    that its pipeline brings it to (rank i of the producer's group -> rank i of this one)."""
    here = groups[k % len(groups)]
    values = dict(m.values)
    for v in received:
        op = v.owner
        assert isinstance(op, PcgOp)
        there = groups[stage[op] % len(groups)]
        value = m.value(v)
        where = {c: here[there.index(r)] for c, r in value.where.items()}
        values[v] = replace(value, where=where, held={here[there.index(r)]: c for r, c in value.held.items()})
    return replace(m, values=values, ops=ops, outputs=sent)


def _stage_code(writer: Writer, ops: list[PcgOp], k: int, ranks: tuple[int, ...]) -> list[str]:
    """Stage k's lines (recompute runs under `torch.utils.checkpoint`, gathered ZeRO-3 weights
    dropped after their last reader, as in any program); its collectives and transfers stay among
    its group's `ranks` (every rank of the group runs the stage's micro-batches in the schedule's
    one order, so they meet)."""

    def inside(op: PcgOp) -> None:
        outside = sorted(writer.peers - set(ranks))
        writer.peers.clear()
        if outside:
            raise CodegenError(
                f"{op.name} of stage {k} talks to ranks {outside} outside its group {list(ranks)}: "
                "-t torch keeps each stage's communication inside its group (values reach later "
                "stages down their pipelines)",
                op,
            )

    writer.peers.clear()
    writer.write(ops, inside)
    return writer.lines


def _function(
    m: Analysis,
    k: int,
    ranks: tuple[int, ...],
    received: list[SSAValue],
    sent: list[SSAValue],
    lines: list[str],
    last: bool,
) -> list[str]:
    params = "".join(f", {m.value(v).var}" for v in received)
    results = ", ".join(m.value(v).var for v in sent) + ("," if len(sent) == 1 else "")
    what = "the outputs, the loss first" if last else "what the next stage receives"
    return [
        f"def stage_{k}(ctx: rt.Context, w: dict[str, torch.Tensor], x: dict[str, torch.Tensor]{params}) "
        "-> tuple:",
        f'{INDENT}"""Stage {k} on ranks {", ".join(map(str, ranks))}, one micro-batch; returns {what}."""',
        f"{INDENT}rank = ctx.rank",
        *lines,
        f"{INDENT}return ({results})",
        "",
        "",
    ]
