"""Peak memory per device over one iteration, from the steps' builder (`steps.StepBuilder`):
forward ends with every saved activation live, backward frees them as it goes while gradients
appear; gathered ZeRO-3 weights and unreduced ZeRO-2/3 gradients are held for a moment."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from unityc.cost.backward import has_backward, recompute_regions, saved_by, would_save
from unityc.cost.memory import DeviceMemory
from unityc.cost.steps import StepBuilder
from unityc.graph import Ref


def peaks(b: StepBuilder, order: Sequence[int]) -> dict[int, tuple[float, float]]:
    """Per device, (the peak over the iteration of what is not persistent: live saved
    activations + gradients made so far + transient bytes; the transient bytes then). Forward
    ends with every saved activation live, plus at most one op's gathered ZeRO-3 weights;
    backward then runs in reverse, each op holding its results' and operands' gradients,
    its gathered weights and unreduced ZeRO-2/3 gradients and, if recomputed, what every op
    of its checkpoint region (`recompute_regions`: one block) would have kept (an attention
    recomputing only its core: the core's internals, `StepBuilder.core_held`), then freeing
    the activations no earlier op needs, while the weights' gradients appear; the end holds every gradient."""
    graph = b.graph
    saved = saved_by(graph, order, b.gets_grad)
    region = recompute_regions(graph, order)
    members: dict[int, list[int]] = defaultdict(list)
    for nid, first in region.items():
        members[first].append(nid)
    live: dict[int, float] = defaultdict(float)
    last: dict[Ref, int] = {}  # a saved value is freed after the backward of its first saver
    for nid in order:
        for v in saved.get(nid, ()):
            last.setdefault(v, nid)
    for v in last:
        for device, nbytes in b.bytes_on(v).items():
            live[device] += nbytes
    for nid, per_device in b.internal.items():
        if not graph.nodes[nid].recompute:
            for device, nbytes in per_device.items():
                live[device] += nbytes
    best: dict[int, tuple[float, float]] = {d: (nbytes, 0.0) for d, nbytes in live.items()}

    def consider(moment: Mapping[int, float], transient: Mapping[int, float]) -> None:
        for device in set(moment) | set(transient):
            total = moment.get(device, 0.0) + transient.get(device, 0.0)
            if total > best.get(device, (0.0, 0.0))[0]:
                best[device] = (total, transient.get(device, 0.0))

    for nid in order:  # forward: gathered ZeRO-3 weights while their reader runs
        consider(live, gathered(b, nid, gradient=False))
    grads: dict[int, float] = defaultdict(float)
    seen: set[int] = set()
    for nid in reversed(order):
        node = graph.nodes[nid]
        if not has_backward(graph, nid, b.gets_grad):
            continue
        transient = gathered(b, nid, gradient=True)
        for r in (*((nid, i) for i in range(len(node.types))), *node.operand_refs()):
            if r in b.gets_grad and graph.nodes[r[0]].op != "pcg.weight":
                for device, nbytes in b.bytes_on(r, micro_batches=False).items():
                    transient[device] += nbytes
        if node.recompute:  # its region (one block) made again: all it would keep is live
            for m in members[region[nid]]:
                for v in would_save(graph, m, b.gets_grad):
                    for device, nbytes in b.bytes_on(v, micro_batches=False).items():
                        transient[device] += nbytes
                for device, nbytes in b.internal.get(m, {}).items():
                    transient[device] += nbytes / max(b.mult[b.vid((m, 0))], 1)
        for device, nbytes in b.core_held.get(nid, {}).items():  # its core made again (one micro-batch)
            transient[device] += nbytes
        consider({d: live.get(d, 0.0) + grads.get(d, 0.0) for d in set(live) | set(grads)}, transient)
        for r in node.operand_refs():
            if r[0] in b.weights and r[0] not in seen:
                seen.add(r[0])
                for device, held in b.weights[r[0]].held.items():
                    grads[device] += held.get("gradients", 0.0)
        for v in saved.get(nid, ()):
            if last.get(v) == nid:
                for device, nbytes in b.bytes_on(v).items():
                    live[device] -= nbytes
        if not node.recompute:
            for device, nbytes in b.internal.get(nid, {}).items():
                live[device] -= nbytes
    consider(grads, {})
    return best


def gathered(b: StepBuilder, nid: int, gradient: bool) -> dict[int, float]:
    """Bytes op `nid` holds for a moment beyond the shards of the ZeRO weights it reads: the
    gathered ZeRO-3 weights, and in backward the unreduced ZeRO-2/3 gradients."""
    out: dict[int, float] = defaultdict(float)
    for r in b.graph.nodes[nid].operand_refs():
        parts = b.weights.get(r[0])
        if parts is None or parts.full is None:
            continue
        for device, full in parts.full.items():
            held = parts.held[device]
            if b.graph.nodes[r[0]].zero == 3:
                out[device] += full - held["weights"]
            if gradient and "gradients" in held:
                out[device] += full - held["gradients"]
    return out


def device_memory(parts: Mapping[str, float], peak: tuple[float, float], reserved: float) -> DeviceMemory:
    """A device's memory: its persistent parts, and its peak (`peaks`: what is not
    persistent at the worst moment, with the transient bytes then)."""
    memory = DeviceMemory(**parts, reserved=reserved, transient=peak[1])
    persistent = memory.weights + memory.optimizer + memory.buffers + reserved
    return replace(memory, peak=persistent + peak[0])


__all__ = ["device_memory", "gathered", "peaks"]
