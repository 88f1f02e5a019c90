"""The plan report: what the search found, next to the baselines and the roofline bound.

`render` gives the text printed at the end of `--unity-search`; `to_json` the same as a JSON
document (`--report plan.json`). Both read a `PlanReport`: the searched plan's `Estimate`, the
search's statistics, and the baselines' estimates on the same cost model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from unityc.cost.estimate import Estimate
from unityc.cost.report import Utilization, format_mfu, mfu_line, pipeline_lines, table
from unityc.cost.units import format_bytes, format_time
from unityc.graph import Graph
from unityc.search.options import SearchReport
from unityc.search.views import task_degrees


@dataclass
class BaselineRow:
    name: str
    note: str
    estimate: Estimate | None
    error: str = ""


THREE_D_SHOWN = 3
"""How many of the joint search's priced 3-D factorisations the printed report lists (the
fastest distinct ones); the --report JSON lists them all."""


def shown_rows(rows: list[BaselineRow], few: int = THREE_D_SHOWN) -> tuple[list[BaselineRow], int]:
    """The rows a person reads, and how many were left out: each baseline once (its fastest
    fitting row, else its fastest), then the `few` fastest 3-D candidates (`3-d k` rows), fitting
    ones first, one of each that the table would show alike (time, peak memory, fits)."""

    def rank(b: BaselineRow) -> tuple[bool, float]:
        return (b.estimate is None or not b.estimate.fits, b.estimate.iteration_s if b.estimate else 0.0)

    best: dict[str, BaselineRow] = {}
    for b in rows:
        if b.name.startswith("3-d"):
            continue
        if b.name not in best or rank(b) < rank(best[b.name]):
            best[b.name] = b
    shown = [b for b in rows if best.get(b.name) is b]
    three_d = sorted((b for b in rows if b.name.startswith("3-d") and b.estimate is not None), key=rank)
    seen: set[tuple[str, float, bool]] = set()
    for b in three_d:
        assert b.estimate is not None
        key = (
            f"{b.estimate.iteration_s:.4g}",
            b.estimate.peak_memory,
            b.estimate.fits,
        )  # what the table shows
        if key not in seen and len(seen) < few:
            seen.add(key)
            shown.append(b)
    return shown, len(rows) - len(shown)


@dataclass
class PlanReport:
    machine: str
    plan: Graph
    estimate: Estimate
    search: SearchReport
    source: str = "search"
    """Which plan was returned: the search's, or a baseline that beat it."""
    baselines: list[BaselineRow] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


def degrees_text(degrees: tuple[int, ...]) -> str:
    """`shard [8, 1], sum 2, copy 3` (unsharded: `1`)."""
    *shard, total, copy = degrees
    parts = []
    if any(k > 1 for k in shard):
        parts.append(f"shard [{', '.join(map(str, shard))}]")
    if total > 1:
        parts.append(f"sum {total}")
    if copy > 1:
        parts.append(f"copy {copy}")
    return ", ".join(parts) or "1"


def mapping_summary(plan: Graph, estimate: Estimate) -> list[dict[str, Any]]:
    """Per op kind: how many ops, in which parallel configurations, on how many devices."""
    devices = {row.name: row.device_count for row in estimate.rows}
    order = plan.topological()
    kinds: dict[str, Counter[str]] = {}
    spread: dict[str, list[int]] = {}
    for index, nid in enumerate(order):
        node = plan.nodes[nid]
        kinds.setdefault(node.op, Counter())[degrees_text(task_degrees(node.types[0]))] += 1
        name = node.hint or f"{index}"
        spread.setdefault(node.op, []).append(devices.get(name, 0))
    rows = []
    for op, configs in sorted(kinds.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        used = spread[op]
        rows.append(
            {
                "kind": op,
                "count": sum(configs.values()),
                "configurations": dict(configs.most_common()),
                "devices_min": min(used),
                "devices_max": max(used),
            }
        )
    return rows


def _configs(configs: dict[str, int], limit: int = 3) -> str:
    items = list(configs.items())
    text = "; ".join(f"{k} ({n})" for k, n in items[:limit])
    return text + (f"; {len(items) - limit} more" if len(items) > limit else "")


def render(r: PlanReport) -> str:
    e = r.estimate
    s = r.search
    u = Utilization.of_graph(r.plan, e.machine)
    busiest = max(e.devices, key=lambda d: d.memory.total)
    out = [
        f"unity-search: {e.machine.summary()}",
        f"cost model: {e.cost}, optimizer: {e.optimizer}",
        f"search: {s.segments} segment(s), {s.searches} searched, {s.reused} reused; {s.priced} candidates "
        f"priced, {s.bounded} dropped by bound, {s.expanded} expanded; {s.seconds:.1f} s"
        + (
            f"; stopped by {', '.join(f'{k} ({n})' for k, n in sorted(s.stopped.items()))}"
            if s.stopped
            else ""
        ),
    ]
    if s.stopped_early:
        out.append(f"stopped early ({s.stopped_early}): the plan is the best one completed by then")
    if len(s.rounds) > 1:
        rounds = "; ".join(
            f"weight {w:.3g}: peak {format_bytes(p)}{' fits' if ok else ''}" for w, p, ok in s.rounds
        )
        out.append(f"memory rounds: {rounds}")
    fits = "fits" if e.fits else "DOES NOT FIT"
    out += [
        "",
        f"plan ({r.source}): iteration time {format_time(e.iteration_s)} "
        f"(forward {format_time(e.forward_s)}, backward {format_time(e.backward_s - e.forward_s)}, "
        f"gradient sync + update {format_time(e.update_s)})",
        f"memory per device: peak {format_bytes(busiest.memory.total)} on device {busiest.device} of "
        f"{format_bytes(busiest.capacity)} ({fits}); lowest "
        f"{format_bytes(min(d.memory.total for d in e.devices))}; {e.devices_used} device(s) used",
        f"roofline bound: {format_time(e.roofline_s)}; plan / bound = {e.roofline_ratio:.2f}x",
        mfu_line(u, e),
    ]
    if e.pipeline is not None:
        out += pipeline_lines(e.pipeline)
    if r.baselines:
        out += ["", "baselines (same cost model):"]
        rows = []
        shown, left_out = shown_rows(r.baselines)
        for b in shown:
            if b.estimate is None:
                rows.append([b.name, b.note, "-", "-", "-", "-", b.error])
                continue
            speedup = b.estimate.iteration_s / e.iteration_s if e.iteration_s else float("inf")
            rows.append(
                [
                    b.name,
                    b.note,
                    format_time(b.estimate.iteration_s),
                    format_bytes(b.estimate.peak_memory),
                    format_mfu(u.of(b.estimate.iteration_s)),
                    f"{speedup:.2f}x",
                    "fits" if b.estimate.fits else "does not fit",
                ]
            )
        out += [
            "  " + line
            for line in table(["baseline", "", "iteration", "peak memory", "MFU", "plan speedup", ""], rows)
        ]
        if left_out:
            out += [
                f"  ({left_out} more row(s), slower or equal 3-D candidates among them: the --report JSON)"
            ]
    out += ["", "mapping summary:"]
    rows = [
        [
            row["kind"],
            str(row["count"]),
            _configs(row["configurations"]),
            f"{row['devices_min']}-{row['devices_max']}",
        ]
        for row in mapping_summary(r.plan, e)
    ]
    header = ["op", "count", "parallel configurations of its task space (ops)", "devices"]
    out += ["  " + line for line in table(header, rows, left=3)]
    out += [f"note: {n}" for n in e.notes if not n.startswith("device ")]
    return "\n".join(out) + "\n"


def _estimate_json(e: Estimate, u: Utilization) -> dict[str, Any]:
    return {
        "iteration_s": e.iteration_s,
        "forward_s": e.forward_s,
        "backward_s": e.backward_s,
        "peak_memory_bytes": e.peak_memory,
        "fits": e.fits,
        "roofline_s": e.roofline_s,
        "roofline_ratio": e.roofline_ratio,
        "devices_used": e.devices_used,
        "mfu": u.of(e.iteration_s),
    }


def to_json(r: PlanReport) -> dict[str, Any]:
    e = r.estimate
    s = r.search
    u = Utilization.of_graph(r.plan, e.machine)
    return {
        "machine": r.machine,
        "devices": e.machine.num_devices,
        "cost": e.cost,
        "optimizer": e.optimizer,
        "options": r.options,
        "source": r.source,
        "search": {
            "seconds": s.seconds,
            "segments": s.segments,
            "searched": s.searches,
            "reused": s.reused,
            "priced": s.priced,
            "bounded": s.bounded,
            "expanded": s.expanded,
            "stopped": s.stopped,
            "stopped_early": s.stopped_early,
            "memory_rounds": [{"weight": w, "peak_memory_bytes": p, "fits": ok} for w, p, ok in s.rounds],
        },
        "plan": _estimate_json(e, u),
        "utilization": {"parameters": u.parameters, "tokens": u.tokens, "peak_flops": u.peak_flops},
        "memory_per_device": [
            {
                "device": d.device,
                "kind": d.kind,
                "total_bytes": d.memory.total,
                "weights_bytes": d.memory.weights,
                "gradients_bytes": d.memory.gradients,
                "optimizer_bytes": d.memory.optimizer,
                "activations_bytes": d.memory.activations,
                "buffers_bytes": d.memory.buffers,
                "capacity_bytes": d.capacity,
                "busy_s": d.busy_s,
            }
            for d in e.devices
        ],
        "baselines": {
            b.name: {"note": b.note, **(_estimate_json(b.estimate, u) if b.estimate else {"error": b.error})}
            for b in r.baselines
        },
        "mapping": mapping_summary(r.plan, e),
    }
