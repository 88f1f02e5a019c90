"""The `megatron-lm` baseline at LLM scale, beside the published anchors (issue 25, item 4).

    python benchmarks/megatron_lm.py [--models llama2-70b,gpt3-175b] [--machines dgx-a100:16,dgx-a100:128]

Per model shape (`transformer_shapes.transformer`, bf16-mixed, Adam) and machine: the plan
Megatron-LM's users pick by hand (`search/megatron_lm.py`: its degrees, chunks, micro-batches,
recomputation), its estimated iteration time, peak memory per device, estimated MFU
(`cost.report.Utilization`: 6 x parameters x tokens / (devices x bf16 peak x iteration)), and the
CPU seconds the baseline took to choose and price. Printed as a Markdown table, then the anchors:
Llama-2-70B's pretraining (1,720,320 A100-80GB GPU-hours for 2 T tokens: about 43.5 % MFU) and
Megatron-LM 2021 (Narayanan et al.: up to 52 % of peak, 1 T parameters on 3,072 A100s).
"""

from __future__ import annotations

import argparse
import sys
import time

from transformer_shapes import transformer

from unityc.cost.report import Utilization, format_mfu
from unityc.cost.units import format_bytes, format_time
from unityc.dialects.precision import precision_attrs
from unityc.graph import Graph
from unityc.machine.presets import preset
from unityc.search.megatron_lm import megatron_lm_plan
from unityc.search.plans import Pricing


def llama2_70b() -> Graph:
    """Hidden 8192, 80 layers, 64 heads sharing 8 KV heads, SwiGLU FFN 28672, vocab 32000, seq 4096,
    global batch 1024 (4 M tokens, as Llama 2 trained)."""
    return transformer(80, 8192, 64, 28672, 32000, 4096, 1024, kv_heads=8, gated=True)


def gpt3_175b() -> Graph:
    """96 layers, hidden 12288, 96 heads, FFN 49152, vocab 50257, seq 2048, global batch 1536."""
    return transformer(96, 12288, 96, 4 * 12288, 50257, 2048, 1536)


MODELS = {"llama2-70b": llama2_70b, "gpt3-175b": gpt3_175b}
ANCHORS = [
    ("Llama-2-70B pretraining (Meta 2023)", "1,720,320 A100-80GB GPU-hours for 2 T tokens", "43.5%"),
    ("Megatron-LM (Narayanan et al. 2021)", "1 T parameters on 3,072 A100s, 502 PFLOP/s", "up to 52%"),
]


def run(model: str, machine_name: str) -> list[str]:
    graph = MODELS[model]()
    graph.function_attrs.update(precision_attrs("bf16-mixed"))
    machine = preset(machine_name)
    began = time.process_time()
    plan = megatron_lm_plan(graph, machine, Pricing(optimizer="adam"))
    seconds = time.process_time() - began
    e = plan.estimate
    u = Utilization.of_graph(graph, machine)
    return [
        model,
        machine_name,
        str(machine.num_devices),
        plan.note,
        format_time(e.iteration_s),
        format_bytes(e.peak_memory) + ("" if e.fits else " (does not fit)"),
        format_mfu(u.of(e.iteration_s)),
        f"{seconds:.1f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="llama2-70b", help=f"comma-separated of {', '.join(MODELS)}")
    parser.add_argument("--machines", default="dgx-a100:16,dgx-a100:128")
    args = parser.parse_args(argv)
    head = ["model", "machine", "GPUs", "megatron-lm plan", "iteration", "peak memory", "MFU", "CPU s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for model in args.models.split(","):
        for machine in args.machines.split(","):
            print("| " + " | ".join(run(model, machine)) + " |", flush=True)
    print("\n| anchor | what | MFU |\n|---|---|---|")
    for row in ANCHORS:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
