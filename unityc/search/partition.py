"""PipeDream's partition DP (§3.1) over a graph's layers (`layers.py`) and the stage costs
it prices (`StageModel`).

A stage's weights' gradients are all-reduced over its group once per iteration, the optimizer
steps its weights once; the tensor leaving its last layer goes point to point to the next group
(B/(M w) rows from each device, over the link between them).

*Partition DP* (`partition`): A(j, d) = the best pipeline of layers [0, j) on devices [0, d):
min over the last stage (layers [i, j) on devices [c, d)) of max(A(i, c), stage time, transfer
time into it), the stage time being M x (forward + backward) + sync + update (the slowest stage
bounds the pipeline in steady state). A stage's memory (weights, gradients, optimizer state, and
its activations times the micro-batches in flight, at most min(M, 1 + the devices after it)
under 1F1B, but for the bf16 weight copies made once per step, `memory.step_weight_copy`) must
fit its devices. Devices are taken in machine order; stages may use fewer than
all devices. `exhaustive_partition` enumerates the same space (tests).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from unityc.cost.communication import collective_time
from unityc.cost.pipeline import StageCost
from unityc.cost.units import format_bytes
from unityc.machine.spec import Machine
from unityc.search.layers import LayerCosts, Partition, PipelineError, Stage, TiedWeight


@dataclass
class StageModel:
    """Stage costs for the partition DP and for pricing partitions without building plans."""

    costs: LayerCosts
    microbatches: int
    schedule: str = "1f1b"
    tensor: int = 1
    """Tensor-parallel degree inside every stage (Megatron layout); 1: data parallel."""
    scale: float = 1.0
    """The share of each device's memory a stage may take (`ladder_partitions`)."""

    @property
    def machine(self) -> Machine:
        return self.costs.machine

    def rows(self, width: int) -> int | None:
        r, rest = divmod(self.costs.batch, self.microbatches * width)
        return r if r >= 1 and not rest else None

    def cost(
        self, first: int, last: int, start: int, width: int, next_width: int | None = None
    ) -> StageCost | None:
        """Layers [first, last) on devices [start, start + width); None if the batch does not split.
        With `next_width`, its send to the next stage (on the devices right after it)."""
        if self.tensor > 1:
            return self._tensor_cost(first, last, start, width, next_width)
        rows = self.rows(width)
        if rows is None or not self.costs.feasible(start, rows):
            return None
        devices = list(range(start, start + width))
        kinds = list({self.machine.kind_of(d).name: d for d in devices}.values())
        total = self.costs.total
        fwd = max(total(d, rows, "fwd", first, last) for d in kinds)
        bwd = max(total(d, rows, "bwd", first, last) for d in kinds)
        weights = total(kinds[0], rows, "weights", first, last)
        _, update, moved, tied_sync = self._tied_share(
            self.costs.tied(kinds[0], rows), first, last, start, width
        )
        sync = collective_time("all_reduce", weights - moved, devices, self.machine) if width > 1 else 0.0
        update += max(total(d, rows, "update", first, last) for d in kinds)
        send = 0.0 if next_width is None else self.transfer(last, start + width, next_width)
        return StageCost(
            fwd, bwd, send, 0.0, sync + tied_sync, update, total(kinds[0], rows, "saved", first, last)
        )

    def _tied_share(
        self, tied: Sequence[TiedWeight], first: int, last: int, start: int, width: int
    ) -> tuple[float, float, float, float]:
        """What the tied weights add to layers [first, last) on devices [start, start + width):
        (bytes of the copies it holds beyond the profile's, their update seconds, bytes the
        group's own gradient sync no longer moves, seconds of the copies' all-reduce). A stage
        holding some of a weight's readers holds a copy; if other stages hold readers too, its
        gradient is all-reduced over every holder once per iteration (as the program does):
        priced with the other holders on the devices of the other end of the pipeline (the
        first stage's, or the last's), where the embedding and the head of a model sit."""
        held = update = moved = seconds = 0.0
        D = self.machine.num_devices
        for t in tied:
            here = {k for k in t.layers if first <= k < last}
            if not here:
                continue
            owner = first <= min(t.layers) < last
            if not owner:
                held += t.nbytes
                update += t.update_s
            if here == t.layers:
                continue
            if owner:
                moved += t.nbytes
                seconds -= t.sync_s
            other = D - width if owner else 0
            offsets = range(width) if t.offsets is None else t.offsets
            devices = sorted({start + o for o in offsets} | {other + o for o in offsets})
            seconds += collective_time("all_reduce", t.nbytes, devices, self.machine)
        return held, update, moved, seconds

    def _tensor_profile(self, width: int) -> dict[str, list[float]] | None:
        rows, rest = divmod(self.costs.batch, self.microbatches)
        if rest or width % self.tensor:
            return None
        try:
            return self.costs.of_tensor(width, self.tensor, rows)
        except PipelineError:
            return None

    def _tensor_cost(
        self, first: int, last: int, start: int, width: int, next_width: int | None
    ) -> StageCost | None:
        p = self._tensor_profile(width)
        if p is None:
            return None

        def total(what: str) -> float:
            return p["sum_" + what][last] - p["sum_" + what][first]

        send = 0.0 if next_width is None else self.transfer(last, start + width, next_width)
        rows = self.costs.batch // self.microbatches
        _, update, _, sync = self._tied_share(
            self.costs.tied(0, rows, width, self.tensor), first, last, start, width
        )
        return StageCost(
            total("fwd"),
            total("bwd"),
            send,
            0.0,
            total("sync") + sync,
            total("update") + update,
            total("saved"),
        )

    def transfer(self, boundary: int, start: int, width: int) -> float:
        """The activation after layer `boundary` - 1 into a stage on devices [start, start +
        width): each of its devices receives its B/(M w) rows over the link from the device before."""
        link = self.machine.link(start - 1, start) if start > 0 else None
        if link is None or boundary < 1:
            return 0.0
        if self.tensor > 1:  # the activation is whole on each device of the group: sent once
            p = self._tensor_profile(width)
            return 0.0 if p is None else link.latency + p["out"][boundary - 1] / link.bandwidth
        rows = self.rows(width)
        if rows is None:
            return 0.0
        return link.latency + self.costs.of(start, rows)["out"][boundary - 1] / link.bandwidth

    def memory(self, first: int, last: int, width: int, inflight: int) -> float:
        if self.tensor > 1:
            p = self._tensor_profile(width)
            assert p is not None
            weights = p["sum_weights"][last] - p["sum_weights"][first]
            micro_rows = self.costs.batch // self.microbatches
            tied = self.costs.tied(0, micro_rows, width, self.tensor)
            weights += self._tied_share(tied, first, last, 0, width)[0]
            saved = p["sum_saved"][last] - p["sum_saved"][first]
            copies = p["sum_copies"][last] - p["sum_copies"][first]  # one per step, not in flight
            return self.costs.state_bytes(weights) + inflight * (saved - copies) + copies
        rows = self.rows(width)
        assert rows is not None and self.costs.feasible(0, rows)
        total = self.costs.total
        weights = total(0, rows, "weights", first, last)
        weights += self._tied_share(self.costs.tied(0, rows), first, last, 0, width)[0]
        saved, copies = (total(0, rows, k, first, last) for k in ("saved", "copies"))
        return self.costs.state_bytes(weights) + inflight * (saved - copies) + copies

    def capacity(self, start: int, width: int) -> float:
        return self.scale * min(self.machine.kind_of(d).memory for d in range(start, start + width))

    def memory_share(self, stages: Sequence[Stage]) -> float:
        """The largest share of its devices' memory a stage of the partition takes (by this
        model, at scale 1)."""
        D = self.machine.num_devices
        return max(
            self.memory(st.first, st.last, st.width, self.inflight(D - st.start - st.width))
            / (self.capacity(st.start, st.width) / self.scale)
            for st in stages
        )

    def stage_time(self, c: StageCost) -> float:
        return self.microbatches * (c.forward_s + c.backward_s) + c.sync_s + c.update_s

    def inflight(self, devices_after: int) -> int:
        if self.schedule == "gpipe":
            return self.microbatches
        return min(self.microbatches, 1 + devices_after)


def partition(
    model: StageModel,
    devices: int | None = None,
    stages: int | None = None,
    widths: Sequence[int] | None = None,
) -> Partition | None:
    """PipeDream's DP (see the module docstring); None when nothing fits. `stages`: exactly that
    many stages (default: any); `widths`: the replications a stage may have (default: any)."""
    L = model.costs.count
    D = devices or model.machine.num_devices
    allowed = sorted(set(widths) if widths is not None else set(range(1, D + 1)))
    counts = [stages] if stages is not None else [None]
    # best[(j, d, s)]: layers [0, j) on devices [0, d) (in s stages, or any: s = None)
    best: dict[tuple[int, int, int | None], tuple[float, tuple[Stage, ...]]] = {}
    levels = range(1, (stages or 1) + 1) if stages is not None else [None]
    for s in levels:
        for j in range(1, L + 1):
            for d in range(1, D + 1):
                found: tuple[float, tuple[Stage, ...]] = (math.inf, ())
                for w in allowed:
                    c = d - w
                    if c < 0:
                        break
                    for i in range(0, j):
                        if (i == 0) != (c == 0):
                            continue
                        if i == 0:
                            if s not in (None, 1):
                                continue
                            prev: tuple[float, tuple[Stage, ...]] | None = (0.0, ())
                        else:
                            prev = best.get((i, c, None if s is None else s - 1))
                        if prev is None or prev[0] >= found[0]:
                            continue
                        value = _stage_value(model, i, j, c, w, D - d, prev[1])
                        if value is None:
                            continue
                        total = max(prev[0], value)
                        if total < found[0] or (total == found[0] and len(prev[1]) + 1 < len(found[1])):
                            found = (total, (*prev[1], Stage(i, j, c, w)))
                if found[1]:
                    best[(j, d, s)] = found
    finals = [v for (j, _, s), v in best.items() if j == L and s == counts[0]]
    if not finals:
        return None
    objective, chosen = min(finals, key=lambda v: (v[0], len(v[1])))
    return Partition(chosen, objective)


LADDER_STEP = 4
"""Memory caps per doubling in `ladder_partitions` (caps 2^(k/4) bytes)."""
LADDER_HEADROOM = 1.25
"""The largest cap, in device memories: the DP's memory model may overestimate what `estimate` finds."""
LADDER_RUNGS = 12
"""At most this many partitions per ladder (each one a plan to price, at scale an estimate of minutes)."""


def ladder_partitions(
    model: StageModel, stages: int | None = None, widths: Sequence[int] | None = None
) -> list[Partition]:
    """The DP's partitions under memory caps from a fixed ladder (2^(k/LADDER_STEP) bytes on
    the machine's largest device, the others in proportion to their memory), from the largest
    cap at most LADDER_HEADROOM x its memory down, each next cap below what the last partition
    takes, until none fits: the partitions a plan checked by `estimate` is chosen from
    (`pipeline.pipedream_plan`). The ladder does not depend on the machine's memory, so more
    memory only adds partitions (the caps above the last machine's) and keeps those had: as
    long as no more than LADDER_RUNGS partitions come before them."""
    top = max(k.memory for k in model.machine.kinds)
    k = math.floor(LADDER_STEP * math.log2(LADDER_HEADROOM * top))
    found: list[Partition] = []
    while len(found) < LADDER_RUNGS:
        part = partition(replace(model, scale=2 ** (k / LADDER_STEP) / top), stages=stages, widths=widths)
        if part is None:
            break
        found.append(part)
        used = model.memory_share(part.stages) * top
        if used <= 0:
            break
        k = min(k - 1, math.ceil(LADDER_STEP * math.log2(used)) - 1)
    return found


def _stage_value(
    model: StageModel, i: int, j: int, c: int, w: int, after: int, before: tuple[Stage, ...]
) -> float | None:
    cost = model.cost(i, j, c, w)
    if cost is None:
        return None
    if model.memory(i, j, w, model.inflight(after)) > model.capacity(c, w):
        return None
    value = model.stage_time(cost)
    if before:  # activations in, gradients back, on the link into it
        value = max(value, model.microbatches * 2 * model.transfer(i, c, w))
    return value


def partition_value(model: StageModel, stages: Sequence[Stage]) -> float | None:
    """The DP's objective for a given partition (what `exhaustive_partition` minimizes)."""
    total = 0.0
    D = model.machine.num_devices
    for k, st in enumerate(stages):
        end = st.start + st.width
        value = _stage_value(model, st.first, st.last, st.start, st.width, D - end, tuple(stages[:k]))
        if value is None:
            return None
        total = max(total, value)
    return total


def exhaustive_partition(model: StageModel, devices: int | None = None) -> Partition | None:
    """Every partition of the layers into stages on consecutive device groups (small graphs)."""
    L = model.costs.count
    D = devices or model.machine.num_devices
    best: Partition | None = None
    for s in range(1, min(L, D) + 1):
        for cuts in itertools.combinations(range(1, L), s - 1):
            bounds = (0, *cuts, L)
            for widths in itertools.product(range(1, D + 1), repeat=s):
                if sum(widths) > D:
                    continue
                starts = [sum(widths[:k]) for k in range(s)]
                stages = tuple(Stage(bounds[k], bounds[k + 1], starts[k], widths[k]) for k in range(s))
                value = partition_value(model, stages)
                if value is not None and (best is None or value < best.objective):
                    best = Partition(stages, value)
    return best


def stage_costs(model: StageModel, stages: Sequence[Stage]) -> list[StageCost]:
    """The `StageCost`s of a partition (what the schedule simulation takes)."""
    out = []
    for k, st in enumerate(stages):
        nxt = stages[k + 1].width if k + 1 < len(stages) else None
        c = model.cost(st.first, st.last, st.start, st.width, nxt)
        if c is None:
            raise PipelineError(f"stage {k}: the batch does not split into {model.microbatches} x {st.width}")
        back = model.transfer(st.first, st.start, st.width) if k > 0 else 0.0
        out.append(
            StageCost(c.forward_s, c.backward_s, c.send_s, back, c.sync_s, c.update_s, c.activation_bytes)
        )
    return out


def why_nothing_fits(costs: LayerCosts) -> str:
    """Why no partition fits, in numbers (a lower bound on the first stage's memory): its
    layers' weights, gradients and optimizer state on each device of its stage (PipeDream
    replicates a stage: no ZeRO, no tensor parallelism, no recomputation), so a pipeline needs
    at least S stages by that state alone (consecutive layers packed up to a device's memory);
    the first of S stages on at most D - S + 1 devices holds at least min(S, B / (D - S + 1))
    samples in flight under 1F1B (micro-batches of one sample at the fewest: larger ones only
    hold more), each keeping what its layers save (`LayerCosts.of`: `estimate`'s model). Even
    the smallest first stage, its first layer alone, then needs more than a device has."""
    machine = costs.machine
    capacity = min(d.kind.memory for d in machine.devices)
    try:
        one = costs.of(0, 1)
    except PipelineError as e:
        return f"(a micro-batch of one sample cannot be had: {e})"
    state = [costs.state_bytes(w) for w in one["weights"]]
    stages, held = 1, 0.0
    for s in state:
        if held + s > capacity:
            stages, held = stages + 1, 0.0
        held += s
    D, B = machine.num_devices, costs.batch
    total, cap = format_bytes(sum(state)), format_bytes(capacity)
    if stages > D:
        return (
            f"the weights, gradients and optimizer state ({total}) need {stages} stages of {cap} "
            f"by themselves, more than the {D} devices"
        )
    inflight = min(stages, math.ceil(B / (D - stages + 1)))
    need = state[0] + inflight * one["saved"][0]
    fits = "" if need > capacity else " (the bound does not rule every partition out: the DP found none)"
    first, sample = format_bytes(state[0]), format_bytes(one["saved"][0])
    return (
        f"the state alone needs at least {stages} stages ({total} of weights, gradients and optimizer "
        f"state, replicated on each device of a stage), and the first of {stages} stages holds at "
        f"least {inflight} samples in flight: its smallest stage, 1 layer of the DP's {costs.count}, "
        f"needs {first} + {inflight} x {sample} = {format_bytes(need)} of {cap}{fits}"
    )
