"""The `galvatron` baseline: Galvatron-BMW's search (Wang et al., `shared/papers/003`) on unityc's
cost model, so the seed system is compared with the joint search on the same model and machine.

1. *Layers*: ops are grouped by the layer index in the keys of the weights they read
   (`layers.N.`, `layer.N.`, `h.N.`, `blocks.N.`); an op reading none joins the layer before it
   (ops before the first layer form group -1).
2. *Decision tree* (Galvatron §3.2): the strategies of a layer on N devices are the leaves of
   the tree pipeline -> tensor -> data / sharded data, each with or without activation
   checkpointing. Its pruning rules: tensor parallelism stays inside a node (its degree t
   divides the node), sharded data parallelism needs a data degree N/t > 1 (else it is plain
   data parallelism), and the pipeline level is pruned (the dialect has no pipeline stages yet;
   so Galvatron-BMW's workload balancing across stages has nothing to balance here).
3. *Costs per layer and strategy* from `estimate` of the whole-graph plan with that tensor
   degree (data parallel for t = 1, Megatron's layout otherwise): compute and communication of
   its ops, plus an all-gather per weight for sharding (its forward and backward gathers in
   place of the all-reduce) and its forward again for checkpointing; memory per device: the
   weights' persistent bytes (`persistent_bytes`, ZeRO-3 when sharded) plus the activations it
   keeps (only what it reads from other layers when checkpointed).
4. *Dynamic programming over layers x memory* (Galvatron §3.3): the fastest choice per layer
   whose memory sums within the budget (the capacity less the framework reserve and what no
   layer owns), memory in `BINS` steps (each layer's rounded up). A value a layer reads from
   another is counted once however many of its ops read it (a residual input is kept once by
   a checkpointed layer). The tensor degree is chosen for the whole model (one DP
   per degree, the fastest plan that fits wins): different degrees in adjacent layers would need
   resharding the whole-graph layouts do not build.
5. The chosen strategies are applied (ZeRO-3 on the sharded layers' weights held in copies,
   `recompute` on the checkpointed layers' ops) and the plan priced by `estimate`; if it does
   not fit after all, the DP runs again with a budget 15% smaller (at most `RETRIES` times).
   When no plan the DP finds within its budget fits (or it finds none), the smallest choice
   (per layer the strategy holding the least, sharded and checkpointed) is priced too: the DP's
   memory model is the estimate's in outline only (its reserve for what no layer owns comes
   from the plan without levers), so ZeRO-3 with every layer checkpointed is always tried.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from unityc.cost.estimate import Estimate
from unityc.cost.memory import persistent_bytes
from unityc.cost.pricing import Placed, copy_collectives, phase, piece
from unityc.cost.roles import device_array, placement_reps
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.view import MachineViewAttr
from unityc.graph import Graph, Ref
from unityc.machine.spec import Machine
from unityc.search.plans import PricedPlan, Pricing, data_parallel_plan, megatron_plans

LAYER = re.compile(r"(?:^|\.)(?:layers?|h|blocks?)\.(\d+)\.")
BINS = 4000
RETRIES = 5


@dataclass(frozen=True)
class Strategy:
    sharded: bool
    checkpointed: bool

    def __str__(self) -> str:
        return ("SDP" if self.sharded else "DP") + ("+ckpt" if self.checkpointed else "")


@dataclass
class LayerCost:
    time: float = 0.0
    gather: float = 0.0
    """Added by sharding its weights."""
    recompute: float = 0.0
    """Added by checkpointing it."""
    weights: float = 0.0
    sharded_weights: float = 0.0
    activations: float = 0.0
    inputs: float = 0.0
    """Activations it reads from other layers (what a checkpointed layer keeps)."""


def layers_of(graph: Graph) -> dict[int, int]:
    """Node id -> layer index (-1 before the first layer)."""
    out: dict[int, int] = {}
    current = -1
    for nid in graph.topological():
        node = graph.nodes[nid]
        if node.is_source:
            continue
        weights = [graph.nodes[r[0]] for r in node.operand_refs() if graph.nodes[r[0]].op == "pcg.weight"]
        keys = [str(w.attr("key")) for w in weights]
        found = [int(m.group(1)) for key in keys if (m := LAYER.search(key))]
        if found:
            current = max(found)
        out[nid] = current
        for r in node.operand_refs():
            if graph.nodes[r[0]].is_source:
                out.setdefault(r[0], current)
    return out


def layer_costs(plan: PricedPlan, machine: Machine, optimizer: str) -> dict[int, LayerCost]:
    graph, e = plan.graph, plan.estimate
    layer = layers_of(graph)
    costs: dict[int, LayerCost] = defaultdict(LayerCost)
    read: set[tuple[int, Ref]] = set()  # (layer, value from another layer): kept once however often read
    gathers: dict[tuple[TensorType, MachineViewAttr | None], float] = {}
    """A ZeRO-3 all-gather's seconds per weight type and view: layers repeat them, and each is
    priced from its device array (`roles.device_array`) over the copy groups of one device per
    role of its pieces (`roles.placement_reps`), not a dict built device by device."""
    for nid, row in zip(graph.topological(), e.rows, strict=True):
        if nid not in layer:
            continue
        c = costs[layer[nid]]
        node = graph.nodes[nid]
        devices = max(row.device_count, 1)
        c.time += row.fwd_compute_s + row.bwd_compute_s + row.fwd_comm_s + row.bwd_comm_s
        if node.op == "pcg.weight":
            t = node.types[0]
            p = piece(t)
            assert p is not None
            size = p.nbytes // max(p.numel, 1)
            c.weights += row.memory / devices
            if t.copy_degree >= 2:
                kept = persistent_bytes(p.numel, size, t.copy_degree, 3, optimizer)
                c.sharded_weights += kept.weights + kept.gradients + kept.optimizer
                if (t, node.view) not in gathers:
                    array = device_array(t, node.view, machine)
                    where = Placed(array, placement_reps(machine, [array]))
                    gathers[t, node.view] = phase(copy_collectives(machine, "all_gather", where, p.nbytes))
                c.gather += gathers[t, node.view]
            else:
                c.sharded_weights += row.memory / devices
            continue
        c.activations += row.memory / devices
        if node.op.startswith("pcg."):
            c.recompute += row.fwd_compute_s
        for r in node.operand_refs():
            if layer.get(r[0], layer[nid]) != layer[nid] and not graph.nodes[r[0]].is_source:
                if (layer[nid], r) in read:
                    continue
                read.add((layer[nid], r))
                c.inputs += piece(graph.type_of(r)).nbytes  # type: ignore[union-attr]
    return dict(costs)


def strategies(data_degree: int) -> list[Strategy]:
    shard = (False, True) if data_degree > 1 else (False,)
    return [Strategy(s, k) for s in shard for k in (False, True)]


def _memory(c: LayerCost, s: Strategy) -> float:
    """What a layer holds per device under strategy `s` (the DP's memory model)."""
    return (c.sharded_weights if s.sharded else c.weights) + (c.inputs if s.checkpointed else c.activations)


def _time(c: LayerCost, s: Strategy) -> float:
    return c.time + (c.gather if s.sharded else 0.0) + (c.recompute if s.checkpointed else 0.0)


def choose(costs: dict[int, LayerCost], options: list[Strategy], budget: float) -> list[Strategy] | None:
    """Galvatron's DP: the fastest strategy per layer (in layer order) whose memory fits, memory
    in `BINS` steps of the budget (each layer's rounded up)."""
    if budget <= 0:
        return None
    step = budget / BINS
    best = np.full(BINS + 1, np.inf)
    best[0] = 0.0  # best[b]: the least time of the layers so far using b steps
    picks: list[tuple[np.ndarray, list[int]]] = []
    for _, c in sorted(costs.items()):
        nxt = np.full(BINS + 1, np.inf)
        pick = np.full(BINS + 1, -1)
        sizes = [math.ceil(_memory(c, s) / step) for s in options]
        for i, (s, k) in enumerate(zip(options, sizes, strict=True)):
            if k > BINS:
                continue
            candidate = np.full(BINS + 1, np.inf)
            candidate[k:] = best[: BINS + 1 - k] + _time(c, s)
            better = candidate < nxt
            nxt[better] = candidate[better]
            pick[better] = i
        if not np.isfinite(nxt).any():
            return None
        picks.append((pick, sizes))
        best = nxt
    used = int(np.argmin(best))
    chosen: list[Strategy] = []
    for pick, sizes in reversed(picks):
        i = int(pick[used])
        chosen.append(options[i])
        used -= sizes[i]
    return chosen[::-1]


def smallest(costs: dict[int, LayerCost], options: list[Strategy]) -> list[Strategy]:
    """Per layer, the strategy that holds the least memory (the fastest of those)."""
    return [min(options, key=lambda s: (_memory(c, s), _time(c, s))) for _, c in sorted(costs.items())]


def realize(plan: PricedPlan, costs: dict[int, LayerCost], chosen: list[Strategy]) -> Graph:
    by_layer = dict(zip(sorted(costs), chosen, strict=True))
    layer = layers_of(plan.graph)
    out = plan.graph.copy()
    for nid, index in layer.items():
        s = by_layer.get(index)
        node = out.nodes[nid]
        if s is None:
            continue
        if node.op == "pcg.weight" and s.sharded and node.types[0].copy_degree >= 2:
            out.nodes[nid] = node.with_plan(zero=3)
        elif s.checkpointed and node.op.startswith("pcg.") and not node.is_source:
            out.nodes[nid] = node.with_plan(recompute=True)
    return out


def base_plans(
    graph: Graph, machine: Machine, pricing: Pricing, priced: Sequence[PricedPlan] | None = None
) -> dict[int, PricedPlan]:
    """Per tensor degree, the fastest whole-graph plan (data parallel for degree 1): from
    `priced` (the data-parallel and Megatron plans already priced, e.g. by the joint search)
    where given, else built here."""
    if priced is None:
        priced = [data_parallel_plan(graph, machine, pricing), *megatron_plans(graph, machine, pricing)]
    out: dict[int, PricedPlan] = {}
    for p in priced:
        if p.name not in ("data-parallel", "megatron"):
            continue
        t = _tensor_degree(p)
        if t not in out or p.estimate.iteration_s < out[t].estimate.iteration_s:
            out[t] = p
    return out


def _tensor_degree(plan: PricedPlan) -> int:
    match = re.search(r"tensor (\d+)", plan.note)
    return int(match.group(1)) if match else 1


Memo = dict[tuple[int, tuple[Strategy, ...]], Estimate]
"""Estimates of per-layer choices already priced, by (id of the base plan, the choice): the
joint search prices Galvatron's DP over the same plans it levers (`per_layer`)."""


def galvatron_plan(
    graph: Graph,
    machine: Machine,
    pricing: Pricing,
    priced: Sequence[PricedPlan] | None = None,
    memo: Memo | None = None,
    calibrate: bool = False,
) -> PricedPlan:
    """Galvatron-BMW's plan (see the module docstring); `priced`: the whole-graph plans to start
    from if already had (`base_plans`); `memo`, `calibrate`: see `per_layer` (the baseline is
    not calibrated)."""
    results: list[PricedPlan] = []
    for t, base in sorted(base_plans(graph, machine, pricing, priced).items()):
        data = machine.num_devices // t
        label = f"data {data} x tensor {t}" + (", budget calibrated" if calibrate else "")
        results += per_layer(base, machine, pricing, data, label, calibrate, memo)
    if not results:
        raise ValueError("galvatron: no layer strategy fits the memory budget at any tensor degree")
    fitting = [p for p in results if p.estimate.fits]
    if fitting:
        return min(fitting, key=lambda p: p.estimate.iteration_s)
    return min(results, key=lambda p: p.estimate.peak_memory)


def per_layer(
    base: PricedPlan,
    machine: Machine,
    pricing: Pricing,
    data: int,
    label: str,
    calibrate: bool = False,
    memo: Memo | None = None,
) -> list[PricedPlan]:
    """Galvatron's DP (`choose`) over the layers of one mapped plan, its strategies applied and
    priced; with a budget 15% smaller while the result does not fit (`RETRIES`), and the smallest
    choice where none fits. `data`: the plan's data-parallel degree (sharding needs copies).

    With `calibrate` (the joint search's levers), the DP's budget is corrected instead by what
    the estimate finds the plan leaves free or lacks (the capacity less its peak), kept between
    the largest budget that fit and the smallest that did not (their middle where the correction
    leaves that range), until it moves by under 1%: the DP's memory model is the estimate's in
    outline only, and the budget it overestimates is time the baseline leaves unused; the
    baseline's budgets are tried as well, so the calibrated plan is never the slower. `memo`:
    choices already priced on this plan (`Memo`). Returns every plan priced."""
    costs = layer_costs(base, machine, pricing.optimizer)
    options = strategies(data)
    capacity = min(k.memory for k in machine.kinds)
    budget = min(k.memory - k.reserved for k in machine.kinds) - _unowned(base.estimate, costs)
    memo = {} if memo is None else memo

    def priced(chosen: list[Strategy]) -> PricedPlan:
        g = realize(base, costs, chosen)
        key = (id(base), tuple(chosen))
        if key not in memo:
            memo[key] = pricing.estimate(g, machine)
        counts: dict[str, int] = defaultdict(int)
        for s in chosen:
            counts[str(s)] += 1
        note = f"{label}; " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        return PricedPlan("galvatron", g, memo[key], base.mapped, note)

    tried: list[PricedPlan] = []
    fit, miss = 0.0, math.inf  # the largest budget whose plan fit, the smallest whose did not
    for _ in range(RETRIES):
        chosen = choose(costs, options, budget)
        if chosen is None:
            break
        tried.append(priced(chosen))
        e = tried[-1].estimate
        if not calibrate:
            if e.fits:
                break
            budget *= 0.85
            continue
        fit, miss = (max(fit, budget), miss) if e.fits else (fit, min(miss, budget))
        nxt = budget + capacity - e.peak_memory
        if not fit < nxt < miss:
            nxt = (fit + miss) / 2 if miss < math.inf else nxt
        if abs(nxt - budget) < 0.01 * budget:
            break
        budget = nxt
    if calibrate:  # a heuristic: the baseline's budgets are tried too (priced choices memoized)
        tried += per_layer(base, machine, pricing, data, label, False, memo)
    if not any(p.estimate.fits for p in tried):  # the DP's memory model is an estimate
        tried.append(priced(smallest(costs, options)))
    return tried


def _unowned(e: Estimate, costs: dict[int, LayerCost]) -> float:
    """Peak bytes on the busiest device that no layer's strategy changes (buffers, and the
    transient bytes of one moment), as the DP reserves them."""
    busiest = max(e.devices, key=lambda d: d.memory.total)
    return busiest.memory.buffers + busiest.memory.transient
