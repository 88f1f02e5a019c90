"""Long-sequence plans (issue 41): the joint search with context parallelism on Llama-3-8B at
131072 tokens and Llama-2-70B at 32768, beside every baseline it prices (`megatron-lm` with
Megatron-LM's `--context-parallel-size` among them).

    python benchmarks/long_context.py [--rows llama3-8b-128k@dgx-h100:8,...] [--time-limit 300]
                                      [--work DIR] [--timeout 1200]

Each row is `benchmarks/llm_scale.py`'s: the model imported once through `unityc-import`
(parameters on meta, `--precision bf16-mixed`), then the command a user runs, `unityc-opt
--unity-search --machine M --optimizer adam --time-limit T --baselines ... --report r.json`, as
its own process (wall and CPU seconds, its workers included), the plan's degrees, iteration
time, peak memory and MFU read from its report; the plan's layout (context degree included) is
the one its source names. Llama-3-8B (hidden 4096, 32 layers, 32 heads / 8 KV, ffn 14336, vocab
128256) at seq 131072, global batch 16 (2M tokens); Llama-2-70B (hidden 8192, 80 layers, 64
heads / 8 KV, ffn 28672, vocab 32000) at seq 32768, global batch 128 (4M tokens, as
`llm_scale.py`'s 1024 x 4096).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import llm_scale  # (the benchmark these rows extend)

MODELS = {
    "llama3-8b-128k": (
        "hf:LlamaConfig",
        {
            "hidden": 4096,
            "layers": 32,
            "heads": 32,
            "kv_heads": 8,
            "ffn": 14336,
            "vocab": 128256,
            "seq": 131072,
        },
        16,
    ),
    "llama2-70b-32k": (
        "hf:LlamaConfig",
        {
            "hidden": 8192,
            "layers": 80,
            "heads": 64,
            "kv_heads": 8,
            "ffn": 28672,
            "vocab": 32000,
            "seq": 32768,
        },
        128,
    ),
}
ROWS = "llama3-8b-128k@dgx-h100:8,llama2-70b-32k@dgx-a100:64"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=ROWS, help="comma-separated model@machine")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--timeout", type=float, default=1200.0, help="kill a command after this long")
    parser.add_argument("--work", default=None, help="directory for the imported models, plans, reports")
    args = parser.parse_args(argv)
    llm_scale.MODELS.update(MODELS)
    work = Path(args.work or tempfile.mkdtemp(prefix="long_context_"))
    work.mkdir(parents=True, exist_ok=True)
    head = ["model", "machine", "GPUs", "plan", "iteration", "peak memory", "MFU", "wall s", "CPU s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head), flush=True)
    for item in args.rows.split(","):
        model, machine = item.split("@")
        if model not in llm_scale.MODELS:
            raise SystemExit(f"unknown model '{model}' (known: {', '.join(llm_scale.MODELS)})")
        for line in llm_scale.row(model, machine, work, args.time_limit, args.timeout):
            print("| " + " | ".join(line) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
