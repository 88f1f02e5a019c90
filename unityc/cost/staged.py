"""The estimate of a pipelined plan: `stage = k` on its ops, `unityc.schedule`,
`unityc.microbatches` (and `unityc.virtual_stages`) on its graph function.

1. The plan is priced for one micro-batch (`microbatch_graph`: inputs' dim 0 divided by M, every
   type inferred again, a reshape's leading size with it), op by op with the per-node pricing
   every estimate uses (`steps.build_steps`): so a small micro-batch pays the kernel latency
   and the collectives' latency as it would.
2. Each stage becomes a `pipeline.StageCost`: its ops' forward and backward compute (on each op's
   busiest device) and the collectives inside its device group, in program order, summed; a
   transfer from the group of the stage before is the link's (`send_s` of that stage, its dual
   `send_back_s` of this one); a transfer from any other stage is charged to the reading stage
   itself. A weight's gradient sync (stage replication) and optimizer step belong to its own
   stage. A weight read on several stages is held by each (`search.pipeline.untie`: nodes of
   one key): its copies' gradients are summed by one all-reduce per piece over every holder once
   per iteration (`_tied_reduce`), which each holding stage waits for.
3. `pipeline.simulate_pipeline` runs the schedule: the iteration time, each group's bubble, the
   micro-batches in flight. A device's activations are one micro-batch's times the peak in flight
   on its group (1F1B: min(S - k, M) on stage k; GPipe: M), but for the bf16 weight copies made
   once per step (`steps.Builder.step_copies`); 2BW adds a second copy of the weights.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from unityc.cost.accumulation import accumulation_note, per_backward
from unityc.cost.backward import saved_readers
from unityc.cost.memory import DeviceMemory, check_optimizer
from unityc.cost.modes import compute_model
from unityc.cost.pipeline import PipelineRun, StageCost, simulate_pipeline
from unityc.cost.pricing import Placed, Placement, copy_collectives, phase, piece
from unityc.cost.profile import ProfileCache
from unityc.cost.result import DeviceRow, Estimate, OpRow
from unityc.cost.roles import tied_keys
from unityc.cost.schedule import Comm, Step
from unityc.cost.steps import build_steps
from unityc.cost.units import format_bytes
from unityc.dialects.plan import MICROBATCHES, SCHEDULE
from unityc.graph import Graph
from unityc.graph.microbatch import microbatch_graph
from unityc.machine.spec import Machine


def is_pipelined(graph: Graph) -> bool:
    return SCHEDULE in getattr(graph, "function_attrs", {})


def graph_schedule(graph: Graph) -> tuple[str, int, int]:
    """(schedule, micro-batches, virtual stages) of a pipelined graph."""
    pipeline = graph.plan.pipeline
    if pipeline is None:
        raise ValueError(f"a pipelined plan needs {SCHEDULE} (a string) and {MICROBATCHES} = M : i64")
    return pipeline.schedule, pipeline.microbatches, pipeline.virtual_stages


def stages_of(graph: Graph) -> dict[int, int]:
    """Each node's stage; every node of a pipelined plan has one."""
    out: dict[int, int] = {}
    for nid, node in graph.nodes.items():
        if node.stage is None:
            raise ValueError(f"{node.op} (node {nid}) of a pipelined plan has no stage")
        out[nid] = node.stage
    return out


def _inside(c: Comm, group: set[int]) -> bool:
    return set(c.devices) <= group


def estimate_pipelined(
    graph: Graph,
    machine: Machine,
    cost: str = "roofline",
    optimizer: str = "sgd",
    profile: ProfileCache | None = None,
    schedule: str | None = None,
    roles: bool = False,
) -> Estimate:
    """Estimate one iteration of a pipelined plan (see the module docstring); `schedule`
    overrides the plan's (e.g. "2bw", which the IR does not name). `roles`: price one device
    per role (`cost/roles.py`: a stage's group is the representatives of its roles; the same
    estimate as per device, at a cost that does not grow with the devices)."""
    check_optimizer(optimizer)
    named, M, v = graph_schedule(graph)
    schedule = schedule or named
    if schedule == "2bw" and v != 1:
        raise ValueError("2bw runs one stage per rank group (no virtual stages)")
    stage = stages_of(graph)
    S = max(stage.values(), default=0) + 1
    G = S // v
    acc = graph.plan.accumulation
    micro = microbatch_graph(graph, M * acc)
    b, order, steps, rows = build_steps(micro, machine, compute_model(cost, profile), optimizer, roles)
    groups: dict[int, set[int]] = defaultdict(set)
    for nid in order:
        groups[stage[nid] % G].update(b.where.get((nid, 0), {}).values())
    fwd = [0.0] * S
    bwd = [0.0] * S
    send = [0.0] * S
    back = [0.0] * S
    sync = [0.0] * S
    update = [0.0] * S
    # compute, comm per micro-batch; once
    per_device: defaultdict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    steps = _tied_reduce(micro, machine, order, steps, b, stage)
    synced: set[int] = set()
    producer_stage = {b.vid(r): stage[r[0]] for r in b.where}
    for nid, step in zip(order, steps, strict=True):
        k = stage[nid]
        own = groups[k % G]
        fwd[k] += max((s for _, s in step.fwd_compute), default=0.0)
        bwd[k] += max((s for _, s in step.bwd_compute), default=0.0)
        for d, s in (*step.fwd_compute, *step.bwd_compute):
            per_device[d][0] += s
        sources = {producer_stage.get(o, k) for o in step.operands}
        previous = k - 1 in sources
        inner_f = [c for c in step.fwd_comm if _inside(c, own)]
        inner_b = [c for c in step.bwd_comm if _inside(c, own)]
        fwd[k] += phase(inner_f)
        bwd[k] += phase(inner_b)
        for c in (*inner_f, *inner_b):
            for d in c.devices:
                per_device[d][1] += c.seconds
        cross_f = [c for c in step.fwd_comm if not _inside(c, own)]
        cross_b = [c for c in step.bwd_comm if not _inside(c, own)]
        for c in (*cross_f, *cross_b):
            for d in c.devices:
                per_device[d][1] += c.seconds
        if previous and k > 0:
            send[k - 1] += phase(cross_f)
            back[k] += phase(cross_b)
        else:
            fwd[k] += phase(cross_f)
            bwd[k] += phase(cross_b)
        # ZeRO-3 weights gathered again for each micro-batch's backward, ZeRO-2/3 gradients
        # reduce-scattered after it (the program's hook runs per backward), the rest once
        scattered = per_backward(step, micro.nodes[nid].zero)  # a prefix of its grad_sync
        bwd[k] += phase(step.bwd_gather) + phase(scattered)
        for c in (*step.bwd_gather, *scattered):
            for d in c.devices:
                per_device[d][1] += c.seconds
        once = (*step.grad_reduce, *step.grad_sync[len(scattered) :])
        sync[k] += phase(once)
        update[k] += max((s for _, s in step.update), default=0.0)
        for c in once:
            if id(c) in synced:  # a tied weight's all-reduce, met again on another holding stage
                continue
            synced.add(id(c))
            for d in c.devices:
                per_device[d][3] += c.seconds
        for d, s in step.update:
            per_device[d][2] += s
    activations = _stage_activations(micro, order, b, stage, S)
    costs = [
        StageCost(
            fwd[k], bwd[k], send[k], back[k], sync[k], update[k], max(activations[k].values(), default=0.0)
        )
        for k in range(S)
    ]
    run = simulate_pipeline(costs, schedule, M, v)
    if acc > 1:  # acc schedules one after another, the gradient sync and update after the last
        extra = (acc - 1) * run.backward_s
        run = replace(
            run,
            iteration_s=run.iteration_s + extra,
            forward_s=run.forward_s + extra,
            backward_s=run.backward_s + extra,
        )
    estimate = _assemble(
        graph, machine, cost, optimizer, profile, b, steps, rows, run, costs, groups, per_device, M * acc
    )
    if acc == 1:
        return estimate
    return replace(estimate, notes=(*estimate.notes, accumulation_note(graph, acc, M * acc)))


def tied_placement(graph: Graph, nodes: list[int], where: Mapping) -> dict[tuple[int, ...], int]:  # type: ignore[type-arg]
    """The pieces of one weight held by several `nodes` (their placements in `where`) as copies
    of one tensor: node j's copy c becomes copy (copies before node j) + c, as the program's
    layout of the weight numbers them."""
    merged: dict[tuple[int, ...], int] = {}
    offset = 0
    for nid in nodes:
        for coord, device in where[(nid, 0)].items():
            merged[(*coord[:-1], offset + coord[-1])] = device
        offset += graph.nodes[nid].types[0].copy_degree
    return merged


def _tied_reduce(
    micro: Graph,
    machine: Machine,
    order: list[int],
    steps: list[Step],
    b,  # type: ignore[no-untyped-def]
    stage: Mapping[int, int],
) -> list[Step]:
    """`steps` where the copies of a weight held on several stages have their gradients summed
    by one all-reduce per piece over every rank holding it, once per iteration (Megatron-LM's
    embedding group; the program's copy groups of the weight), instead of each node's own: each
    node's step carries the same collectives (each holding stage waits for them)."""
    position = {nid: i for i, nid in enumerate(order)}
    out = list(steps)
    for nodes in tied_keys(micro).values():
        nodes = sorted(nodes, key=lambda n: stage[n])
        t = micro.nodes[nodes[0]].types[0]
        p = piece(t)
        assert p is not None
        if (nodes[0], 0) not in b.gets_grad or any(micro.nodes[n].zero for n in nodes):
            continue  # not trained, or ZeRO (which the program refuses for such a weight)
        if b.roles is None:
            merged: Placement = tied_placement(micro, nodes, b.where)
        else:  # the copies of every node side by side, on the representatives' pieces
            merged = Placed(np.concatenate([b.arrays[n] for n in nodes], axis=-1), b.rep_mask)
        reduce, _ = b.comms(copy_collectives(machine, "all_reduce", merged, p.nbytes))
        for nid in nodes:
            out[position[nid]] = replace(out[position[nid]], grad_reduce=reduce)
    return out


def _stage_activations(
    micro: Graph, order: list[int], b, stage: Mapping[int, int], S: int
) -> list[dict[int, float]]:  # type: ignore[no-untyped-def]
    """Per stage, per device: bytes one micro-batch leaves saved for the backward, on the
    devices keeping each saved tensor (`StepBuilder.kept_on`: a stage boundary value on the
    reading stage's devices), counted in the stage of the op keeping it, with the tensors ops
    keep besides their operands and results (`StepBuilder.internal`: attention's q, k, v and
    output, norm statistics, masks): the stages' shares of what a group keeps, by which the
    schedule's in-flight forwards weigh (`_assemble`)."""
    out: list[dict[int, float]] = [defaultdict(float) for _ in range(S)]
    for v, savers in saved_readers(micro, order, b.gets_grad).items():
        p = piece(b.graph.type_of(v))  # in the element type the program keeps it
        assert p is not None
        held = set(b.where[v].values())
        kept: dict[int, int] = {}  # device -> the stage keeping the tensor there
        for nid in savers:
            devices = set(b.where[(nid, 0)].values())
            kept.update((d, stage[nid]) for d in (held if devices & held else devices))
        for d, k in kept.items():
            out[k][d] += p.nbytes
    for nid, held in b.internal.items():  # attention's internals, norm statistics, masks, copies
        if b.graph.nodes[nid].recompute or nid not in stage:
            continue  # made again in backward
        once = b.step_copies_of.get(nid, {})  # a weight's bf16 copy: once per step, not per micro-batch
        for d, nbytes in held.items():
            out[stage[nid]][d] += nbytes - once.get(d, 0.0)
    return out


def _assemble(
    graph: Graph,
    machine: Machine,
    cost: str,
    optimizer: str,
    profile: ProfileCache | None,
    b,  # type: ignore[no-untyped-def]
    steps: list[Step],
    rows: list[OpRow],
    run: PipelineRun,
    costs: list[StageCost],
    groups: Mapping[int, set[int]],
    per_device: Mapping[int, list[float]],
    M: int,
) -> Estimate:
    factor: dict[int, float] = {}
    for g in run.groups:
        one = sum(costs[s].activation_bytes for s in g.stages)
        ratio = g.inflight_bytes / one if one > 0 else float(g.inflight)
        for d in groups.get(g.group, ()):
            factor[d] = ratio
    for s in steps:
        for c in (*s.fwd_comm, *s.bwd_comm, *s.after_backward):
            for d in c.devices:
                b.memory[d]["buffers"] = max(b.memory[d]["buffers"], c.nbytes)
    devices = []
    for d in sorted(set(b.memory) | set(per_device)):
        mem = dict(b.memory[d])
        once = b.step_copies.get(d, 0.0)  # bf16 weight copies: one per step, not per micro-batch
        mem["activations"] = (mem.get("activations", 0.0) - once) * factor.get(d, 1.0) + once
        if run.schedule == "2bw":
            mem["weights"] = 2 * mem.get("weights", 0.0)
        compute_s, comm_s, update_s, sync_s = per_device.get(d, [0.0] * 4)
        devices.append(
            DeviceRow(
                device=d,
                kind=machine.kind_of(d).name,
                compute_s=M * compute_s + update_s,
                comm_s=M * comm_s + sync_s,
                busy_s=M * (compute_s + comm_s) + update_s + sync_s,
                memory=DeviceMemory(**mem),
                capacity=machine.kind_of(d).memory,
                count=b.count(d),
            )
        )
    scaled = [
        replace(
            r,
            fwd_compute_s=M * r.fwd_compute_s,
            bwd_compute_s=M * r.bwd_compute_s,
            fwd_comm_s=M * r.fwd_comm_s,
            bwd_comm_s=r.bwd_comm_s if r.kind == "pcg.weight" else M * r.bwd_comm_s,
            flops=M * r.flops,
        )
        for r in rows
    ]
    notes = [
        f"pipelined: {run.stages} stages, {run.schedule}, {M} micro-batches"
        + (f", {run.virtual} virtual stages per group" if run.virtual > 1 else "")
    ]
    if run.schedule == "2bw":
        notes.append(
            "2bw: weights double buffered, each gradient applied one batch late (not the exact gradients)"
        )
    if b.transfers:
        notes.append(f"{b.transfers} operand piece(s) moved between devices without a parallel op (p2p)")
    if b.unplaced:
        notes.append(f"{b.unplaced} op(s) without a machine view run on device 0")
    for row in devices:
        if row.memory.total > row.capacity:
            like = f" (and {row.count - 1} more of its role)" if row.count > 1 else ""
            notes.append(
                f"device {row.device}{like} needs {format_bytes(row.memory.total)}, "
                f"more than its {format_bytes(row.capacity)}"
            )
    flops = b.model_flops - b.update_flops
    return Estimate(
        machine=machine,
        cost=cost,
        optimizer=optimizer,
        rows=tuple(scaled),
        devices=tuple(devices),
        iteration_s=run.iteration_s,
        forward_s=run.forward_s,
        backward_s=run.backward_s,
        plan_flops=sum(r.flops for r in scaled),
        model_flops=M * flops + b.update_flops,
        roofline_s=M * (b.roofline_s - b.update_roofline_s) + b.update_roofline_s,
        notes=tuple(notes),
        pipeline=run,
        roles=b.roles,
    )


__all__ = [
    "estimate_pipelined",
    "graph_schedule",
    "is_pipelined",
    "stages_of",
]
