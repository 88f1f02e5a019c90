"""Importing at LLM scale: wall time, peak memory and output size of `unityc-import`.

    python benchmarks/import_scale.py [--only NAME ...] [--timeout 900]

Runs `unityc-import` (parameters on meta, the default) on the Llama-2-70B shape (hidden 8192,
64 heads, 8 KV heads, ffn 28672, vocab 32000, seq 4096) with 2 and 80 layers at batches 4, 16
and 1024, through `hf:LlamaConfig` (no attention mask: transformers builds its causal mask
from position ids repeated over the batch) and `hf:llama` (with a padding mask). Each import is
its own process; its peak resident memory and CPU time (user + system) are what the kernel
reports for it (`os.wait4`); wall and CPU time include Python's and torch's start-up. On a
shared machine the CPU time is the figure to compare: the wall time grows with the load. A row
reports the MLIR's bytes, its ops (not counting inputs, weights and constants, as `--stats`
counts them), and the largest constant.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from commands import tool

LLAMA_70B = {
    "hidden": 8192,
    "heads": 64,
    "kv_heads": 8,
    "ffn": 28672,
    "vocab": 32000,
    "seq": 4096,
}
HEADER = (
    "| config | model | layers | batch | seq | wall s | CPU s | peak RSS MiB | MLIR bytes | ops "
    "| largest constant |"
)
ROWS = [
    ("2-layer", "hf:LlamaConfig", 2, 4),
    ("2-layer", "hf:LlamaConfig", 2, 16),
    ("2-layer", "hf:LlamaConfig", 2, 1024),
    ("2-layer", "hf:llama", 2, 1024),
    ("70B", "hf:LlamaConfig", 80, 1024),
    ("70B", "hf:llama", 80, 1024),
]


def run_import(model: str, layers: int, batch: int, out: Path, timeout: float) -> dict:
    settings = [f"{k}={v}" for k, v in {**LLAMA_70B, "layers": layers}.items()]
    cmd = [
        tool("unityc-import"),
        model,
        "--config",
        "paper",
        *settings,
        "--batch",
        str(batch),
        "--stats",
        "-o",
        str(out),
    ]
    with tempfile.TemporaryFile("w+") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        wall = time.perf_counter() - start
        timer.cancel()
        log.seek(0)
        stderr = log.read()
    code = os.waitstatus_to_exitcode(status)
    ok = code == 0
    text = out.read_text() if ok else ""
    ops = re.search(r"^ops: (\d+)", stderr, re.M)
    return {
        "ok": ok,
        "error": "" if ok else (stderr.strip().splitlines() or [f"exit {code}"])[-1][:80],
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "bytes": len(text.encode()),
        "ops": int(ops.group(1)) if ops else 0,
        "largest_constant": _largest_constant(text),
    }


def _largest_constant(text: str) -> str:
    best, shape = 0, "-"
    for m in re.finditer(r"= pcg\.constant .*: !pcg\.tensor<([0-9x]+)x(\w+)>$", text, re.M):
        dims = [int(d) for d in m.group(1).split("x")]
        n = 1
        for d in dims:
            n *= d
        if n > best:
            best, shape = n, f"{m.group(1)}x{m.group(2)}"
    return shape


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", nargs="*", help="rows whose 'config model batch' text contains one of these"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds before an import is killed")
    args = parser.parse_args()
    rows = [r for r in ROWS if not args.only or any(w in f"{r[0]} {r[1]} {r[3]}" for w in args.only)]
    print(HEADER)
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, layers, batch in rows:
            r = run_import(model, layers, batch, Path(tmp) / "out.mlir", args.timeout)
            tail = f" {r['error']}" if not r["ok"] else ""
            print(
                f"| {name} | {model} | {layers} | {batch} | {LLAMA_70B['seq']} | "
                f"{r['wall']:.1f} | {r['cpu']:.1f} | "
                f"{r['rss_mib']:.0f} | {r['bytes']:,} | {r['ops']} | {r['largest_constant']}{tail} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
