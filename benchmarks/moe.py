"""Mixture-of-experts plans at scale (issue 40): the joint search on Mixtral-8x7B and a
DeepSeek-V3-shaped model, beside every baseline it prices, and `megatron-lm` with the
expert-parallel degree Megatron-Core users set by hand where this build has one.

    python benchmarks/moe.py [--rows mixtral-8x7b@dgx-a100:8,...] [--time-limit 300]
                             [--work DIR] [--timeout 1800]

Each row is `benchmarks/llm_scale.py`'s: the model imported once through `unityc-import`
(parameters on meta, `--precision bf16-mixed`), then the command a user runs, `unityc-opt
--unity-search --machine M --optimizer adam --time-limit T --baselines ... --report r.json`, as
its own process (wall and CPU seconds, its workers included); iteration time, peak memory and
MFU from its report. The plan's degrees are written EP x TP x PP x DP: EP the expert weights'
split along their expert dim, TP the other weights' (as `llm_scale.degrees`), DP the devices
over TP x PP (expert parallelism is carved out of data parallelism, as in Megatron-Core).
MFU counts a mixture of experts' active parameters (`cost.report.Utilization`: k of a layer's
E experts), attention's sequence-squared FLOPs not included.

Models: Mixtral-8x7B (`hf:MixtralConfig`: hidden 4096, 32 layers, 32 heads / 8 KV, ffn 14336,
8 experts top-2, vocab 32000) at seq 4096, global batch 512; DeepSeek-V3 (`hf:DeepseekV3Config`,
its own config: hidden 7168, 61 layers of which the first 3 dense, 128 heads of multi-head
latent attention, 256 routed experts top-8 in 8 groups of which 4 are candidates, 1 shared
expert, expert ffn 2048, vocab 129280) at seq 4096, global batch 1920.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import llm_scale  # (the benchmark these rows extend)

from unityc.cost.report import Utilization, expert_shares
from unityc.dialects.source import make_context, parse_source
from unityc.graph import Graph, from_module
from unityc.machine.presets import preset
from unityc.search.baselines import baseline, run_baseline
from unityc.search.levers import describe as lever_text
from unityc.search.options import UnityOptions

MODELS = {
    "mixtral-8x7b": (
        "hf:MixtralConfig",
        {
            "hidden": 4096,
            "layers": 32,
            "heads": 32,
            "kv_heads": 8,
            "ffn": 14336,
            "experts": 8,
            "top_k": 2,
            "vocab": 32000,
            "seq": 4096,
        },
        512,
    ),
    "deepseek-v3": (
        "hf:DeepseekV3Config",
        {"hidden": 7168, "layers": 61, "experts": 256, "top_k": 8, "expert_ffn": 2048, "seq": 4096},
        1920,
    ),
}
SEQ = 4096
ROWS = "mixtral-8x7b@dgx-a100:8,mixtral-8x7b@dgx-h100:16,deepseek-v3@dgx-h100:256"
EXPERT_DEGREE = {"mixtral-8x7b": 8, "deepseek-v3": 64}
"""The expert-parallel degree a Megatron-Core user sets: Mixtral-8x7B's 8 experts one a GPU of
a node (NVIDIA's Mixtral recipe: EP 8), DeepSeek-V3's 256 over 64 GPUs (its own run: EP 64)."""
ANCHORS = [
    ("Megatron-Core MoE (arXiv 2603.07685)", "DeepSeek-V3-685B on GB300 / GB200", "1,233 / 1,048 TFLOPS/GPU"),
    ("Megatron-Core MoE (arXiv 2603.07685)", "Qwen3-235B on GB300 / GB200", "974 / 919 TFLOPS/GPU"),
]
DEEPSEEK_RUN = (2_788_000, 14.8e12, 2048)
"""DeepSeek-V3's own run: 2.788 M H800 GPU-hours for 14.8 T tokens on 2,048 GPUs."""


def expert_degree(plan: Graph) -> int:
    """How many ways the experts' weights split along their expert dim (1 on a build without an
    expert-parallel form of `pcg.experts`)."""
    degrees = [plan.type_of(n.operands[3]).shard[0] for n in plan.nodes.values() if n.op == "pcg.experts"]  # type: ignore[arg-type]
    return max(degrees, default=1)


def moe_degrees(plan: Graph, devices: int) -> str:
    """EP x TP x PP x DP (virtual stages, micro-batches), then the plan's levers."""
    experts = set(expert_shares(plan))
    weights = [
        n.types[0] for n in plan.nodes.values() if n.op == "pcg.weight" and n.attr("key") not in experts
    ]
    tensor = max((t.num_pieces // max(t.copy_degree, 1) for t in weights), default=1)
    pipeline = plan.plan.pipeline
    stages = len({n.stage for n in plan.nodes.values()}) if pipeline is not None else 1
    groups = stages // (pipeline.virtual_stages if pipeline is not None else 1)
    data = max(devices // max(tensor * groups, 1), 1)
    text = f"EP {expert_degree(plan)} x TP {tensor} x PP {groups} x DP {data}"
    if pipeline is not None:
        chunks = f", {pipeline.virtual_stages} virtual stages" if pipeline.virtual_stages > 1 else ""
        text += f"{chunks}, {pipeline.schedule}, {pipeline.microbatches} micro-batches"
    levers = lever_text(plan)
    return text + (f"; {levers}" if levers else "")


def megatron_lm_expert(model: str, machine: str, work: Path) -> list[str]:
    """The `megatron-lm` baseline with the expert degree users set, where this build's baseline
    takes one (`megatron-lm{expert=N}`); else a row saying it is not available."""
    ep = EXPERT_DEGREE[model]
    name = f"megatron-lm{{expert={ep}}}"
    if "expert" not in inspect.signature(baseline("megatron-lm").build).parameters:
        why = f"{name}: not available on this build (megatron-lm takes no expert degree)"
        return ["", "", "", why, "-", "-", "-", "", ""]
    source = work / f"{model}.mlir"
    graph = from_module(parse_source(make_context(), source.read_text(), str(source)))
    began, cpu = time.perf_counter(), time.process_time()
    try:
        b = run_baseline("megatron-lm", graph, preset(machine), (), UnityOptions(optimizer="adam"), expert=ep)
    except ValueError as e:
        return ["", "", "", f"{name}: {str(e)[:120]}", "-", "-", "-", "", ""]
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    u = Utilization.of_graph(b.graph, b.estimate.machine)
    fits = "" if b.estimate.fits else " (does not fit)"
    return [
        "",
        "",
        "",
        f"{name}: {moe_degrees(b.graph, b.estimate.machine.num_devices)}; {b.note[:100]}",
        f"{b.estimate.iteration_s:.2f} s",
        f"{b.estimate.peak_memory / 2**30:.1f} GiB{fits}",
        f"{100 * u.of(b.estimate.iteration_s):.1f}%",
        f"{wall:.0f}",
        f"{cpu:.0f}",
    ]


def throughput(model: str, machine: str, work: Path) -> str:
    """Tokens/s a GPU and model TFLOPS a GPU of the joint plan (from its report and plan)."""
    tag = f"{model}-{machine.replace(':', '')}"
    report_path, plan_path = work / f"{tag}.json", work / f"{tag}.plan.mlir"
    if not report_path.exists() or not plan_path.exists():
        return "no plan"
    report = json.loads(report_path.read_text())
    plan = from_module(parse_source(make_context(), plan_path.read_text(), str(plan_path)))
    u = Utilization.of_graph(plan, preset(machine))
    devices, seconds = report["devices"], report["plan"]["iteration_s"]
    tokens = MODELS[model][2] * SEQ / (devices * seconds)
    tflops = u.flops / (devices * seconds) / 1e12
    return (
        f"{tokens:,.0f} tokens/s/GPU, {tflops:,.0f} model TFLOPS/GPU "
        f"(6 x {u.parameters / 1e9:.1f} B active of {u.total_parameters / 1e9:.1f} B parameters)"
    )


def deepseek_anchor() -> str:
    hours, tokens, gpus = DEEPSEEK_RUN
    per_gpu = tokens / (hours * 3600)
    return (
        f"| DeepSeek-V3's own run | {hours:,} H800 GPU-hours for {tokens / 1e12:.1f} T tokens "
        f"({gpus:,} GPUs) | {per_gpu:,.0f} tokens/s/GPU |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=ROWS, help="comma-separated model@machine")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="kill a command after this long")
    parser.add_argument("--work", default=None, help="directory for the imported models, plans, reports")
    args = parser.parse_args(argv)
    llm_scale.MODELS.update(MODELS)
    work = Path(args.work or tempfile.mkdtemp(prefix="moe_"))
    work.mkdir(parents=True, exist_ok=True)
    head = ["model", "machine", "GPUs", "plan", "iteration", "peak memory", "MFU", "wall s", "CPU s"]
    for item in args.rows.split(","):
        model, machine = item.split("@")
        if model not in MODELS:
            raise SystemExit(f"unknown model '{model}' (known: {', '.join(MODELS)})")
        print(f"\n## {item}\n")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head), flush=True)
        for line in llm_scale.row(model, machine, work, args.time_limit, args.timeout, moe_degrees):
            print("| " + " | ".join(line) + " |", flush=True)
        print("| " + " | ".join(megatron_lm_expert(model, machine, work)) + " |")
        print(f"\njoint plan: {throughput(model, machine, work)}", flush=True)
    print("\n| anchor | what | figure |\n|---|---|---|")
    for anchor in ANCHORS:
        print("| " + " | ".join(anchor) + " |")
    print(deepseek_anchor())
    return 0


if __name__ == "__main__":
    sys.exit(main())
