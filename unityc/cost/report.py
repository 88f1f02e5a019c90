"""The text report of an `Estimate`: per-op and per-device tables, totals, the roofline bound;
and the estimated model FLOPs utilization (`Utilization`) every plan report shows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from unityc.cost.pipeline import PipelineRun
from unityc.cost.result import Estimate, OpRow
from unityc.cost.units import format_bytes, format_flops, format_time
from unityc.dialects.precision import BF16_MIXED
from unityc.graph import Graph, Ref
from unityc.graph.precision import graph_precision
from unityc.machine.spec import Machine
from unityc.runtime.parts import WeightKey
from unityc.runtime.patterns import BUCKET_BYTES

MAX_DEVICE_ROWS = 64


def _devices(ds: Sequence[int], count: int = 0) -> str:
    if not ds:
        return "-"
    if count > len(ds):  # priced by roles: `ds` are the representatives
        return f"{count} ({','.join(map(str, ds))} for their roles)"
    if len(ds) > 2 and list(ds) == list(range(ds[0], ds[-1] + 1)):
        return f"{ds[0]}-{ds[-1]}"
    return ",".join(map(str, ds))


def _communication(r: OpRow) -> str:
    if not r.pattern:
        return "-"
    what = f"grad {r.pattern}" if r.kind == "pcg.weight" else r.pattern
    return f"{what} {r.collectives}x{format_bytes(r.comm_bytes)}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 2) -> list[str]:
    """Aligned columns: the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return [line(header), *(line(r) for r in rows)]


def render(e: Estimate, utilization: Utilization | None = None) -> str:
    """The report of `e`; with `utilization` (the model's figures), its estimated MFU too."""
    out: list[str] = [
        f"estimate: {e.machine.summary()}",
        f"cost model: {e.cost}, optimizer: {e.optimizer}",
        "",
    ]
    header = [
        "op",
        "kind",
        "devices",
        "fwd compute",
        "bwd compute",
        "fwd comm",
        "bwd comm",
        "memory",
        "communication",
    ]
    rows = [
        [
            f"%{r.name}",
            r.label,
            _devices(r.devices, r.device_count),
            format_time(r.fwd_compute_s),
            format_time(r.bwd_compute_s),
            format_time(r.fwd_comm_s),
            format_time(r.bwd_comm_s),
            format_bytes(r.memory),
            _communication(r),
        ]
        for r in e.rows
    ]
    totals = [
        "total",
        "",
        "",
        format_time(sum(r.fwd_compute_s for r in e.rows)),
        format_time(sum(r.bwd_compute_s for r in e.rows)),
        format_time(sum(r.fwd_comm_s for r in e.rows)),
        format_time(sum(r.bwd_comm_s for r in e.rows)),
        format_bytes(sum(r.memory for r in e.rows)),
        "",
    ]
    lines = table(header, [*rows, totals], left=3)
    lines[-1:-1] = ["-" * len(lines[0])]
    lines[-1] = lines[-1].rstrip()
    out += [*lines, ""]

    busiest = e.busiest
    out += [
        f"iteration time: {format_time(e.iteration_s)} (forward {format_time(e.forward_s)}, "
        f"backward {format_time(e.backward_s - e.forward_s)}, "
        f"gradient sync + update {format_time(e.update_s)})",
        *_bucket_lines(e),
        f"busiest device: {busiest.device} ({busiest.kind}), busy {format_time(busiest.busy_s)}: "
        f"compute {format_time(busiest.compute_s)}, communication {format_time(busiest.comm_s)}",
        f"roofline bound: {format_time(e.roofline_s)} ({format_flops(e.model_flops)} of training at "
        f"peak on all {e.machine.num_devices} devices); plan / bound = {e.roofline_ratio:.1f}x",
        *([] if utilization is None else [mfu_line(utilization, e)]),
        "",
    ]
    header = ["device", "kind", "compute", "comm", "busy", "weights", "grads", "optimizer", "activations",
              "buffers", "peak memory", "capacity"]  # fmt: skip
    shown = e.devices[:MAX_DEVICE_ROWS]
    rows = [
        [
            str(d.device) if d.count == 1 else f"{d.device} (+{d.count - 1} alike)",
            d.kind,
            format_time(d.compute_s),
            format_time(d.comm_s),
            format_time(d.busy_s),
            format_bytes(d.memory.weights),
            format_bytes(d.memory.gradients),
            format_bytes(d.memory.optimizer),
            format_bytes(d.memory.activations),
            format_bytes(d.memory.buffers),
            format_bytes(d.memory.total),
            f"{100 * d.memory.total / d.capacity:.2f}%" if d.capacity else "-",
        ]
        for d in shown
    ]
    out += table(header, rows)
    idle = e.machine.num_devices - e.devices_used
    if len(e.devices) > len(shown):
        out.append(f"... {len(e.devices) - len(shown)} more devices")
    if e.roles is not None:
        out.append(
            f"priced by roles: {len(e.roles.reps)} role(s) stand for the {e.machine.num_devices} devices "
            "(each row is its role's first device)"
        )
    if idle > 0:
        out.append(f"{idle} other device(s) idle")
    if e.pipeline is not None:
        out += ["", *pipeline_lines(e.pipeline)]
    reserved = max((d.memory.reserved for d in e.devices), default=0.0)
    if reserved:
        out.append(
            f"peak memory: the worst moment of forward and backward (activations and gradients never all "
            f"coexist), with {format_bytes(reserved)} per device reserved for the framework"
        )
    out += [f"note: {n}" for n in e.notes]
    return "\n".join(out) + "\n"


def _bucket_lines(e: Estimate) -> list[str]:
    if not e.buckets:
        return []
    tail = (
        f"only the {format_time(e.sync_after_s)} after the backward ends counts"
        if e.sync_after_s > 0
        else "all of it hidden behind the backward"
    )
    return [
        f"gradient sync: {e.buckets} bucket(s) of at most {format_bytes(BUCKET_BYTES)} all-reduced "
        f"during the backward, as the program does: {tail}"
    ]


def pipeline_lines(run: PipelineRun) -> list[str]:
    """The schedule of a pipelined plan: per rank group its stages, compute, bubble, in flight."""
    virtual = f", {run.virtual} stages per group" if run.virtual > 1 else ""
    lines = [
        f"pipeline: {run.stages} stages, {run.schedule}, {run.microbatches} micro-batches{virtual}; "
        f"bubble {100 * run.bubble:.1f}% of the iteration (forwards end {format_time(run.forward_s)}, "
        f"backwards {format_time(run.backward_s)})"
    ]
    header = ["group", "stages", "compute", "bubble", "in flight", "in-flight activations"]
    rows = [
        [str(g.group), ",".join(map(str, g.stages)), format_time(g.busy_s), f"{100 * g.bubble:.1f}%",
         str(g.inflight), format_bytes(g.inflight_bytes)]
        for g in run.groups
    ]  # fmt: skip
    return lines + table(header, rows)


@dataclass(frozen=True)
class Utilization:
    """What the estimated model FLOPs utilization of a model's plans on a machine is computed
    from (the same for every plan of the model): MFU = 6 x parameters x tokens per iteration /
    (devices x peak FLOP/s at the plan's precision x iteration time), the convention of the
    PaLM and Megatron-LM papers (attention's sequence-squared FLOPs not counted). Tokens: the
    elements of the first integer input of rank 2 or more (token ids), else the batch (samples:
    for a model whose weights are reused across a sample, a convolution, this undercounts).
    A mixture of experts counts its active parameters, as its MFU is reported (Megatron-Core,
    DeepSeek-V3): a token goes through k of a layer's E experts, so k/E of each `pcg.experts`
    weight counts (`total_parameters`: every weight)."""

    parameters: int
    """The parameters each token passes through (all of them for a dense model)."""
    tokens: int
    peak_flops: float
    """The machine's peak matmul FLOP/s, all devices, at the precision (bf16 for bf16-mixed)."""
    total_parameters: int = -1
    """Every weight's elements once (-1: as `parameters`, a dense model)."""

    def __post_init__(self) -> None:
        if self.total_parameters == -1:
            object.__setattr__(self, "total_parameters", self.parameters)
        if self.parameters < 0 or self.tokens < 0 or not self.peak_flops > 0:
            raise ValueError(f"utilization: parameters and tokens >= 0 and a positive peak, got {self}")
        if self.total_parameters < self.parameters:
            raise ValueError(f"utilization: fewer parameters in all than active, got {self}")

    @property
    def flops(self) -> float:
        """6 x parameters x tokens: the model FLOPs of one iteration."""
        return 6.0 * self.parameters * self.tokens

    def of(self, iteration_s: float) -> float:
        """The MFU of a plan whose iteration takes `iteration_s` seconds (0 if it takes none)."""
        return self.flops / (self.peak_flops * iteration_s) if iteration_s > 0 else 0.0

    @staticmethod
    def of_graph(graph: Graph, machine: Machine) -> Utilization:
        """The model's figures from any plan of it (a weight of one key held in several copies,
        an untied embedding, counts once; a padded vocabulary's zeros not at all) on `machine`."""
        shapes = {
            n.attr("key"): WeightKey.parse(n.attr("key")).real_shape(n.types[0].shape)
            for n in graph.nodes.values()
            if n.op == "pcg.weight"
        }
        parameters = sum(math.prod(shape) for shape in shapes.values())
        idle = sum(math.prod(shapes[key]) * (1 - share) for key, share in expert_shares(graph).items())
        inputs = [n.types[0] for n in graph.nodes.values() if n.op == "pcg.input" and n.types[0].rank]
        ids = [t for t in inputs if t.rank >= 2 and str(t.element_type).startswith("i")]
        tokens = math.prod(ids[0].shape) if ids else math.gcd(*(t.shape[0] for t in inputs)) if inputs else 0
        dtype = "bf16" if graph_precision(graph) == BF16_MIXED else "f32"
        peak = math.fsum(d.kind.peak_flops(dtype, True) for d in machine.devices)
        return Utilization(parameters - round(idle), tokens, peak, parameters)


def expert_shares(graph: Graph) -> dict[str, float]:
    """The key of each weight a `pcg.experts` op reads as its experts' gate_up or down (through
    the casts and parallel ops between them in a plan) -> the share of it a token uses: its top
    k of the E experts."""
    shares: dict[str, float] = {}
    for n in graph.nodes.values():
        if n.op != "pcg.experts":
            continue
        ids, gate_up = n.operands[1], n.operands[3]
        assert ids is not None and gate_up is not None
        experts, top_k = graph.type_of(gate_up).shape[0], graph.type_of(ids).shape[-1]
        for ref in n.operands[3:5]:
            weight = _source_weight(graph, ref)
            if weight is not None:
                shares[weight] = min(1.0, top_k / experts)
    return shares


def _source_weight(graph: Graph, ref: Ref | None) -> str | None:
    """The key of the weight `ref` is, or is of through single-operand ops (a cast, a
    partition, a replicate); None if it is computed."""
    while ref is not None:
        node = graph.nodes[ref[0]]
        if node.op == "pcg.weight":
            return str(node.attr("key"))
        refs = [r for r in node.operands if r is not None]
        if len(refs) != 1:
            return None
        ref = refs[0]
    return None


def format_mfu(mfu: float) -> str:
    return f"{100 * mfu:.1f}%"


def mfu_line(u: Utilization, e: Estimate) -> str:
    """`estimated MFU: 43.1% (6 x ... parameters x ... tokens ...)` for a plan priced `e`."""
    active = f" active of {u.total_parameters:,}" if u.total_parameters != u.parameters else ""
    return (
        f"estimated MFU: {format_mfu(u.of(e.iteration_s))} (6 x {u.parameters:,}{active} parameters x "
        f"{u.tokens:,} "
        f"tokens per iteration over {e.machine.num_devices} device(s) at {format_flops(u.peak_flops)}/s peak "
        "in all)"
    )
