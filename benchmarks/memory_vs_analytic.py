"""Peak memory per device of 3-D plans against the analytic Megatron-LM formulae (issue 25).

    python benchmarks/memory_vs_analytic.py [--work DIR] [--rows gpt3-sel,llama-sel,...]

For a few 3-D configurations of the Llama-2-70B and GPT-3-175B shapes (the `unityc-import`
outputs `benchmarks/llm_scale.py` writes to its `--work` directory, imported there when absent:
parameters on meta, `--precision bf16-mixed`, Adam), each plan is built as the `megatron-lm`
baseline builds it (`megatron_lm.build`) and priced by `estimate`; the first stage's device
(device 0: the pipeline's peak under 1F1B) is printed term by term beside the analytic figure:

* weights, gradients, optimizer state. Megatron-LM (bf16 parameters, fp32 main gradients, the
  distributed optimizer's fp32 master weights and Adam m, v sharded over the data-parallel
  group): 2N + 4N + 12N/d bytes for N parameters on the device. This program (torch autocast:
  fp32 parameters are the master weights, fp32 `.grad`, Adam m, v under ZeRO-1): 4N + 4N +
  8N/d. Both are printed; the estimate must equal the second.
* stored activations of the first stage (Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", Table 2 and §4.2.3): per layer and micro-batch
  of b samples, sequence s, hidden h, a heads, tensor degree t with sequence parallelism:
  selective recomputation 34 sbh/t bytes (GPT: layer norms 4sbh, attention 11sbh less the
  recomputed core, MLP 19sbh, all in bf16 with 1-byte dropout masks), none (34 + 5as/h) sbh/t,
  full 2sbh/t (the layer's input). Llama's layer by the same accounting (RMSNorm inputs
  4sbh, attention's QKV input, Q, grouped K and V, out-projection input 6sbh + 4sbh kv/a,
  SwiGLU MLP 2sbh + 8sbf, no dropout): (12 + 4 kv/a + 8 f/h) sbh/t selective. The first stage
  of 1F1B holds P micro-batches of L/P layers: L layers' worth; interleaved with v chunks
  (1 + (P-1)/(P v)) times that (Narayanan et al. 2021).
* the estimate's activations are split by what keeps them (one micro-batch, device 0): saved
  tensors by element type (fp32: the residual stream, norm outputs and GPT-2's bias adds,
  which autocast leaves in fp32; bf16: matmul outputs; integer ids), autocast's bf16 copies of
  the weights (each micro-batch's forward casts every fp32 weight it reads and keeps the copy
  until its backward) and of fp32 activations a matmul reads, and attention's internal q, k,
  v, probabilities and context where the attention is not recomputed.

Printed as Markdown tables. The estimate follows the program the plan becomes (the byte-equality
tests in tests/codegen check weights, gradients and optimizer state per rank); where it exceeds
the analytic figure the rows say which term and why. Each row ends with the plan's iteration
time, pipeline bubble and estimated MFU (`gpt3-b64`, `gpt3-b64-v2`: Megatron-LM's published
64-GPU GPT-3-175B run, 51.4 % MFU).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from llm_scale import imported

from unityc.cost.backward import regathered, saved_values
from unityc.cost.memory import bf16_read, cast_operand, weight_view
from unityc.cost.modes import compute_model
from unityc.cost.pricing import piece
from unityc.cost.report import Utilization
from unityc.cost.steps import build_steps
from unityc.dialects.source import make_context, parse_source
from unityc.graph import Graph, from_module
from unityc.graph.microbatch import microbatch_graph
from unityc.machine.presets import preset
from unityc.search.megatron_lm import Config, build
from unityc.search.plans import Pricing

GIB = 2**30


@dataclass(frozen=True)
class Row:
    model: str
    machine: str
    config: Config


ROWS = {
    "gpt3-sel": Row("gpt3-175b", "dgx-a100:128", Config(8, 8, 16, 1, 96, "selective", True)),
    "gpt3-sel-v4": Row("gpt3-175b", "dgx-a100:128", Config(8, 8, 16, 4, 96, "selective", True)),
    "gpt3-full-v4": Row("gpt3-175b", "dgx-a100:128", Config(8, 8, 16, 4, 96, "full", True)),
    # Megatron-LM's published 64-GPU run (tensor 8 x pipeline 8, 64 micro-batches of 1): 51.4 % MFU
    "gpt3-b64": Row("gpt3-175b-b64", "dgx-a100:8", Config(8, 8, 1, 1, 64, "selective", True)),
    "gpt3-b64-v2": Row("gpt3-175b-b64", "dgx-a100:8", Config(8, 8, 1, 2, 64, "selective", True)),
    "gpt3-b64-v4": Row("gpt3-175b-b64", "dgx-a100:8", Config(8, 8, 1, 4, 64, "selective", True)),
    "llama-sel": Row("llama2-70b", "dgx-a100:16", Config(8, 4, 4, 1, 256, "selective", True)),
    "llama-full": Row("llama2-70b", "dgx-a100:16", Config(8, 4, 4, 1, 256, "full", True)),
}
VOCAB = {"gpt3-175b": 50257, "gpt3-175b-b64": 50257, "llama2-70b": 32000}
SHAPES = {  # layers, hidden, heads, kv heads, ffn, seq, batch
    "gpt3-175b": (96, 12288, 96, 96, 4 * 12288, 2048, 1536),
    "gpt3-175b-b64": (96, 12288, 96, 96, 4 * 12288, 2048, 64),
    "llama2-70b": (80, 8192, 64, 8, 28672, 4096, 1024),
}


def analytic_layer_bytes(model: str, recompute: str, b: int, t: int) -> float:
    """Bytes one layer keeps for one micro-batch of b samples on one device (Korthikanti et al.
    2022 with sequence parallelism; Llama's layer by the same accounting)."""
    _, h, a, kv, f, s, _ = SHAPES[model]
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / t
    per = 34.0 if model.startswith("gpt3") else 12 + 4 * kv / a + 8 * f / h
    if recompute == "none":
        per += 5 * a * s / h
    return per * sbh / t


def analytic_parameters(model: str, config: Config) -> float:
    """Parameters on a device of the first stage as Megatron-LM lays them out: L/P layers split
    t ways (GPT: 12h^2 + 13h a layer; Llama: (2 + 2 kv/a) h^2 + 3hf + 2h) and the
    vocabulary-parallel embedding (V h / t, the vocabulary padded to a multiple of 128 t)."""
    layers, h, a, kv, f, _, _ = SHAPES[model]
    gpt = model.startswith("gpt3")
    per_layer = 12 * h * h + 13 * h if gpt else (2 + 2 * kv / a) * h * h + 3 * h * f + 2 * h
    vocab = VOCAB[model]
    padded = -(-vocab // (128 * config.tensor)) * 128 * config.tensor
    return (layers / config.stages * per_layer + padded * h) / config.tensor


def breakdown(plan: Graph, machine_name: str, microbatches: int) -> dict[str, float]:
    """One micro-batch's activations on device 0, by what keeps them."""
    micro = microbatch_graph(plan, microbatches)
    b, order, _, _ = build_steps(micro, preset(machine_name), compute_model("roofline", None), "adam")
    g = b.graph
    out: dict[str, float] = defaultdict(float)
    shards: set[tuple[int, int]] = set()
    for v in saved_values(g, order, b.gets_grad):
        nbytes = b.bytes_on(v).get(0, 0.0)
        t = g.type_of(v)
        out[f"saved {t.element_type}"] += nbytes
    for nid in order:
        node = g.nodes[nid]
        if node.recompute or 0 not in b.internal.get(nid, {}):
            continue
        per_task: dict[str, float] = {}
        for r in node.operand_refs():
            shard = regathered(g, r, b.gets_grad)
            if shard is not None and cast_operand(g, nid, r):  # one bf16 copy of the shard
                if shard not in shards:
                    shards.add(shard)
                    p = piece(g.type_of(shard))
                    assert p is not None
                    kind = "bf16 copies of sequence shards (gathered again in backward)"
                    per_task[kind] = per_task.get(kind, 0.0) + 2 * p.numel
                continue
            if cast_operand(g, nid, r) and not bf16_read(g, r, b.users(), b.gets_grad):
                kind = "autocast copies of weights" if weight_view(g, r) else "autocast copies of activations"
                p = piece(g.type_of(r))
                assert p is not None
                per_task[kind] = per_task.get(kind, 0.0) + 2 * p.numel
        copies = sum(per_task.values())
        tasks = b.internal[nid][0]
        for kind, nbytes in per_task.items():
            out[kind] += nbytes
        if node.op == "pcg.attention":
            out["attention internals"] += tasks - copies
    return dict(out)


def run(key: str, work: Path, timeout: float) -> list[list[str]]:
    row = ROWS[key]
    source = imported(row.model, work, timeout)
    began = time.process_time()
    graph = from_module(parse_source(make_context(), source.read_text(), str(source)))
    c = row.config
    plan = build(graph, preset(row.machine), c, Pricing(optimizer="adam"))
    e = plan.estimate
    first = e.devices[0].memory
    assert e.pipeline is not None
    inflight = e.pipeline.groups[0].inflight
    parts = breakdown(plan.graph, row.machine, c.microbatches)
    seconds = time.process_time() - began
    layers, _, _, _, _, _, batch = SHAPES[row.model]
    n = analytic_parameters(row.model, c)
    b = batch // c.data // c.microbatches
    factor = 1 + (c.stages - 1) / (c.stages * c.virtual) if c.virtual > 1 else 1.0
    analytic_act = layers * factor * analytic_layer_bytes(row.model, c.recompute, b, c.tensor)
    megatron = {"weights": 2 * n, "gradients": 4 * n, "optimizer": 12 * n / c.data}
    pieces = c.data > 1 and c.zero in (1, 2)  # bf16 pieces with fp32 master shards (`runtime.zero`)
    weights = (2 + 4 / c.data if pieces else 4) * n
    program = {"weights": weights, "gradients": 4 * n, "optimizer": 8 * n / c.data}
    formula = "bf16 pieces, fp32 master shards" if pieces else "fp32 parameters"
    total_megatron = sum(megatron.values()) + analytic_act
    head = f"{row.model} on {row.machine}: {c.describe()} (device 0, first stage; {seconds:.0f} CPU s)"
    head += f"; {n / 1e9:.2f} B parameters a device by Megatron's layout"
    out = [[f"**{head}**", "", "", ""]]
    for term in ("weights", "gradients", "optimizer"):
        got = getattr(first, term)
        note = f"this program's formula ({formula}, Adam under ZeRO-1) {_gib(program[term])}"
        out.append([term, _gib(got), _gib(megatron[term]), note])
    worth = first.activations / max(sum(parts.values()), 1.0)  # micro-batches' worth in flight
    analytic_worth = c.stages * factor
    out.append(
        [
            f"stored activations ({worth:.2f} micro-batches' worth in flight; {inflight} chunk forwards)",
            _gib(first.activations),
            _gib(analytic_act),
            f"{first.activations / analytic_act:.1f}x; Megatron: {analytic_worth:.2f} in flight",
        ]
    )
    for kind, nbytes in sorted(parts.items(), key=lambda kv: -kv[1]):
        out.append([f"  {kind}, one micro-batch", _gib(nbytes), "", ""])
    out.append(["recomputation working set", _gib(first.transient), "-", "not in a pipelined estimate"])
    out.append(["communication buffers", _gib(first.buffers), "-", "the largest collective"])
    out.append(["reserved", _gib(first.reserved), "-", "CUDA context, NCCL, workspaces"])
    out.append(["**total**", _gib(first.total), _gib(total_megatron), f"{first.total / total_megatron:.2f}x"])
    busiest = max(e.devices, key=lambda d: d.busy_s)
    timing = f"compute {busiest.compute_s:.2f} s, communication {busiest.comm_s:.2f} s on the busiest device"
    out.append(["iteration", f"{e.iteration_s:.2f} s", "-", timing])
    out.append(["pipeline bubble", f"{100 * e.pipeline.bubble:.1f} %", "-", e.pipeline.schedule])
    mfu = Utilization.of_graph(plan.graph, preset(row.machine)).of(e.iteration_s)
    out.append(["**estimated MFU**", f"{100 * mfu:.1f} %", "-", "6 x parameters x tokens (`cost.report`)"])
    return out


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.2f} GiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated of {', '.join(ROWS)}")
    parser.add_argument("--work", default=None, help="llm_scale.py's directory of imported models")
    parser.add_argument("--timeout", type=float, default=900.0, help="kill an import after this long")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="llm_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    print("| term | estimate | Megatron-LM analytic | note |\n|---|---|---|---|")
    for key in args.rows.split(","):
        if key not in ROWS:
            raise SystemExit(f"unknown row '{key}' (known: {', '.join(ROWS)})")
        for line in run(key, work, args.timeout):
            print("| " + " | ".join(line) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
