"""The cost model's adapter: a mapped PCG (a `Graph`, or an xDSL module) -> an `Estimate`.

It turns every node into a `schedule.Step` (`steps.build_steps`, using the per-node pricing of
`pricing.py`, shared with the search's machine-mapping DP), simulates the iteration
(`schedule.simulate`; k accumulation steps by `accumulation.py`), takes each device's peak memory
(`peaks.py`) and sums the parts into an `Estimate` (`result.py`); a pipelined plan goes to
`staged.py`. `estimate_module` converts the module with `graph.from_module`
and estimates that graph. Conventions:

* **Placement**: a task runs on the device its op's machine view gives its result coordinate
  (`#pcg.view`; global device = the device `node offset` nodes and `device offset` devices
  from the view's start, see `Machine.global_device`). An op with no view runs all its tasks on
  device 0, one after the other.
* **Data movement**: a parallel op moves pieces from its producer's devices to its own
  (`communication.parallel_groups`); a pcg op whose operand piece lives on another device than
  the task reading it gets a point-to-point transfer (reported in the notes: a plan should make
  such moves explicit).
* **Gradients**: weights want gradients, inputs and constants do not; an op has a backward if
  one of its results carries the loss's gradient (the loss is the graph's first output) and one
  of its operands wants one. A weight held with copy degree > 1 and used directly gets its
  gradient all-reduced across its copies, in the program's buckets during the backward
  (`schedule.buckets`); a weight replicated by `parallel.replicate` gets the replicate's backward
  (a reduce) instead.
* **Roofline bound**: the model's training FLOPs (every pcg op on logical shapes, forward and
  backward, plus the optimizer) over the machine's total peak FLOP/s for each op's dtype.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from unityc.cost.accumulation import accumulated, accumulation_note
from unityc.cost.attention_bytes import attention_task_bytes
from unityc.cost.backward import gradient_flags, saved_values
from unityc.cost.communication import collective_time
from unityc.cost.memory import DeviceMemory, check_optimizer
from unityc.cost.modes import COST_MODES, compute_model, profile_model, roofline_model
from unityc.cost.peaks import device_memory, peaks
from unityc.cost.pricing import ComputeModel, piece, placement
from unityc.cost.profile import ProfileCache
from unityc.cost.result import DeviceRow, Estimate, OpRow
from unityc.cost.roles import ROLE_THRESHOLD
from unityc.cost.schedule import buckets, simulate
from unityc.cost.staged import estimate_pipelined, is_pipelined
from unityc.cost.steps import build_steps, node_attrs, node_form_of
from unityc.cost.units import format_bytes
from unityc.dialects.container import graph_function
from unityc.dialects.pcg_types import PcgOp
from unityc.graph import Graph, from_module
from unityc.graph.microbatch import microbatch_graph
from unityc.machine.spec import Machine

__all__ = [
    "COST_MODES",
    "ComputeModel",
    "DeviceRow",
    "Estimate",
    "OpRow",
    "accumulation_note",
    "attention_task_bytes",
    "build_steps",
    "compute_model",
    "estimate_graph",
    "estimate_module",
    "gradient_flags",
    "graph_function",
    "node_attrs",
    "node_form_of",
    "piece",
    "placement",
    "profile_model",
    "roofline_model",
    "saved_values",
]
"""The names other floors import from here (each defined once, in the module named above)."""


def estimate_module(
    module: ModuleOp,
    machine: Machine,
    cost: str = "roofline",
    optimizer: str = "sgd",
    profile: ProfileCache | None = None,
) -> Estimate:
    """Estimate one training iteration of the graph in `module` on `machine`."""
    check_optimizer(optimizer)
    compute_model(cost, profile)
    for op in graph_function(module).body.block.ops:
        if not isinstance(op, func.ReturnOp | PcgOp):
            raise ValueError(f"estimate cannot price '{op.name}': only pcg and parallel ops are known")
    return estimate_graph(from_module(module), machine, cost, optimizer, profile)


def estimate_graph(
    graph: Graph,
    machine: Machine,
    cost: str = "roofline",
    optimizer: str = "sgd",
    profile: ProfileCache | None = None,
    roles: bool | None = None,
) -> Estimate:
    """Estimate one training iteration of `graph` (its nodes' views place it) on `machine`; a
    pipelined plan (`stage` on its ops) by its schedule (`cost/staged.py`). `roles`: price one
    device per role (`cost/roles.py`; the same estimate, at a cost that does not grow with the
    devices), or every device; None: by roles on machines of more than `ROLE_THRESHOLD`."""
    by_roles = machine.num_devices > ROLE_THRESHOLD if roles is None else roles
    if is_pipelined(graph):
        return estimate_pipelined(graph, machine, cost, optimizer, profile, roles=by_roles)
    check_optimizer(optimizer)
    k = graph.plan.accumulation
    priced = microbatch_graph(graph, k) if k > 1 else graph  # one micro-batch: its activations
    b, order, steps, rows = build_steps(priced, machine, compute_model(cost, profile), optimizer, by_roles)
    loss = priced.outputs[0] if priced.outputs else None
    loss_id = b.vid(loss) if loss is not None and loss in b.ids else None
    grad_buckets = buckets(
        steps, lambda devices, nbytes: collective_time("all_reduce", nbytes, devices, machine)
    )
    schedule = simulate(steps, b.mult, loss_id, grad_buckets, machine.shared_cores)
    if k > 1:
        schedule = accumulated(schedule, priced, order, steps, b.mult, loss_id, k)
    for c in (
        *(c for s in steps for c in (*s.fwd_comm, *s.bwd_comm, *s.grad_sync)),
        *(g.comm for g in grad_buckets),
    ):
        for d in c.devices:
            b.memory[d]["buffers"] = max(b.memory[d]["buffers"], c.nbytes)
    peaks_of = peaks(b, order)
    used = sorted(set(schedule.timelines) | set(b.memory))
    devices = tuple(
        DeviceRow(
            device=d,
            kind=machine.kind_of(d).name,
            compute_s=schedule.timelines[d].compute_s if d in schedule.timelines else 0.0,
            comm_s=schedule.timelines[d].comm_s if d in schedule.timelines else 0.0,
            busy_s=schedule.timelines[d].busy_s if d in schedule.timelines else 0.0,
            memory=device_memory(b.memory[d], peaks_of.get(d, (0.0, 0.0)), machine.kind_of(d).reserved),
            capacity=machine.kind_of(d).memory,
            count=b.count(d),
        )
        for d in used
    ) or (DeviceRow(0, machine.kind_of(0).name, 0.0, 0.0, 0.0, DeviceMemory(), machine.kind_of(0).memory),)
    notes: list[str] = []
    if b.unplaced:
        notes.append(f"{b.unplaced} op(s) without a machine view run on device 0")
    if b.transfers:
        notes.append(
            f"{b.transfers} operand piece(s) read from another device without a parallel op (priced as p2p)"
        )
    if profile is not None and cost == "profile":
        notes.append(
            f"profile: {profile.hits} op(s) priced from the profile, "
            f"{profile.misses} fell back to the roofline"
        )
    for dev in devices:
        if dev.memory.total > dev.capacity:
            like = f" (and {dev.count - 1} more of its role)" if dev.count > 1 else ""
            notes.append(
                f"device {dev.device}{like} needs {format_bytes(dev.memory.total)}, "
                f"more than its {format_bytes(dev.capacity)}"
            )
    if k > 1:
        notes.insert(0, accumulation_note(graph, k, k))
    return Estimate(
        machine=machine,
        cost=cost,
        optimizer=optimizer,
        rows=tuple(rows),
        devices=devices,
        iteration_s=schedule.iteration_s,
        forward_s=schedule.forward_s,
        backward_s=schedule.backward_s,
        plan_flops=k * sum(r.flops for r in rows),
        model_flops=k * (b.model_flops - b.update_flops) + b.update_flops,
        roofline_s=k * (b.roofline_s - b.update_roofline_s) + b.update_roofline_s,
        notes=tuple(notes),
        buckets=schedule.buckets
        if b.roles is None
        else b.roles.count_collectives(g.comm for g in grad_buckets),
        sync_after_s=schedule.sync_after_s,
        roles=b.roles,
    )
