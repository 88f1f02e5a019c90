"""Big shapes end to end through the command-line tools: GPT-2 XL, Llama-2-7B, Llama-3-8B and
ViT-H/14, imported from `transformers` configs (random weights on the meta device, nothing
downloaded), searched with `unityc-opt --unity-search` on DGX A100 nodes (Adam, fp32), and the
plan written to a file. Per model and machine: the search's wall-clock and CPU seconds (import
excluded; the CPU time includes the baselines priced on a second core), the plan file's size,
and the estimated iteration time and peak memory of the search's plan and of the `megatron`
and `data-parallel` baselines the search report prices (the fastest Megatron tensor degree),
and whether each fits 80 GB.

    python benchmarks/big_shapes.py [--models Llama-2-7B,GPT-2 XL] [--machines dgx-a100:1]
        [--results results.jsonl]           # one JSON line per run, appended; then the table
    python benchmarks/big_shapes.py --table results.jsonl

Global batch: the model's per-node batch x nodes. Imports are cached in benchmarks/.cache/.
Timings are of this machine under whatever else runs on it (compare CPU seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from commands import tool

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, ".cache")

MODELS: dict[str, tuple[str, dict[str, int], int]] = {
    # name: (model, settings, global batch per node)
    "GPT-2 XL": (
        "hf:gpt2",
        {"hidden": 1600, "heads": 25, "layers": 48, "vocab": 50257, "seq": 1024},  # FFN 4 x hidden
        8,
    ),
    "Llama-2-7B": (
        "hf:llama",
        {"hidden": 4096, "heads": 32, "layers": 32, "ffn": 11008, "vocab": 32000, "seq": 2048},
        8,
    ),
    "Llama-3-8B": (
        "hf:llama",
        {
            "hidden": 4096,
            "heads": 32,
            "kv_heads": 8,
            "layers": 32,
            "ffn": 14336,
            "vocab": 128256,
            "seq": 2048,
        },
        4,
    ),
    "ViT-H/14": (
        "hf:vit",
        {"hidden": 1280, "heads": 16, "layers": 32, "ffn": 5120, "image": 224, "patch": 14, "classes": 1000},
        32,
    ),
}
MACHINES = ("dgx-a100:1", "dgx-a100:4")
GIB = 2**30


def imported(name: str, batch: int) -> str:
    model, settings, _ = MODELS[name]
    os.makedirs(CACHE, exist_ok=True)
    tag = model[3:] + "_" + "_".join(f"{k}{v}" for k, v in settings.items()) + f"_b{batch}"
    path = os.path.join(CACHE, f"big_{tag}.mlir")
    if not os.path.exists(path):
        args = [f"{k}={v}" for k, v in settings.items()]
        subprocess.run(
            [tool("unityc-import"), model, "--config", "paper", *args, "--batch", str(batch), "-o", path],
            check=True,
        )
    return path


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(name: str, machine: str) -> dict:
    nodes = int(machine.split(":")[1])
    batch = MODELS[name][2] * nodes
    try:
        source = imported(name, batch)
    except subprocess.CalledProcessError:
        return {"model": name, "machine": machine, "batch": batch, "ok": False, "error": "the import failed"}
    plan = os.path.join(CACHE, f"plan_{os.path.basename(source)[4:-5]}_{machine.replace(':', '')}.mlir")
    report = plan[:-5] + ".json"
    command = [
        tool("unityc-opt"), source, "--unity-search", "--machine", machine, "--optimizer", "adam",
        "--report", report, "-o", plan,
    ]  # fmt: skip
    cpu, wall = cpu_children(), time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    row = {
        "model": name,
        "machine": machine,
        "batch": batch,
        "import_bytes": os.path.getsize(source),
        "wall_s": time.monotonic() - wall,
        "cpu_s": cpu_children() - cpu,
        "ok": done.returncode == 0,
    }
    if done.returncode != 0:
        row["error"] = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
        return row
    with open(report) as f:
        r = json.load(f)
    row["plan_bytes"] = os.path.getsize(plan)
    row["source"] = r["source"]
    row["search_s"] = r["search"]["seconds"]
    row["plans"] = {"unity-search": _summary(r["plan"], r["source"])}
    for base, values in r["baselines"].items():
        row["plans"][base] = _summary(values, values.get("note", ""))
    return row


def _summary(values: dict, note: str) -> dict:
    if values is None or "iteration_s" not in values:
        return {"error": (values or {}).get("error", "not priced")}
    return {
        "iteration_s": values["iteration_s"],
        "peak_gib": values["peak_memory_bytes"] / GIB,
        "fits": values["fits"],
        "note": note,
    }


def cell(p: dict | None) -> str:
    if not p or "iteration_s" not in p:
        return "-"
    fits = "fits" if p["fits"] else "**does not fit**"
    return f"{p['iteration_s'] * 1e3:,.0f} ms, {p['peak_gib']:.1f} GiB ({fits})"


def table(rows: list[dict]) -> str:
    head = [
        "model", "machine", "batch", "search wall / CPU (s)", "plan file", "--unity-search",
        "megatron", "data-parallel", "search's plan",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if not row["ok"]:
            what = f"{row['model']} | {row['machine']} | {row['batch']}"
            lines.append(f"| {what} | | | error: {row['error']} | | | |")
            continue
        p = row["plans"]
        lines.append(
            "| " + " | ".join([
                row["model"], row["machine"], str(row["batch"]), f"{row['wall_s']:.0f} / {row['cpu_s']:.0f}",
                f"{row['plan_bytes'] / 1e6:.1f} MB", cell(p.get("unity-search")), cell(p.get("megatron")),
                cell(p.get("data-parallel")), row["source"],
            ]) + " |"
        )  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--results", default="", help="append one JSON line per run to this file")
    parser.add_argument("--table", default="", help="print the table of a results file and stop")
    args = parser.parse_args()
    if args.table:
        with open(args.table) as f:
            print(table([json.loads(line) for line in f if line.strip()]))
        return
    rows = []
    for machine in args.machines.split(","):
        for name in args.models.split(","):
            row = run(name, machine)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if args.results:
                with open(args.results, "a") as f:
                    f.write(json.dumps(row) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
