"""The demo run by `make demo`: the whole unityc chain on a bundled model.

1. `unityc-import` turns the zoo's two-tower MLP (widened so that parallelism pays on this CPU)
   into the `pcg` dialect;
2. `unityc-opt --unity-search --machine cpu:2 --budget 24` searches rewrites and a machine mapping jointly
   and prints its plan report (also written as JSON);
3. the reference interpreter checks that the plan computes what the imported graph computes;
4. `unityc-opt -t torch` emits the plan as a torch.distributed training program;
5. `torchrun --standalone --nproc_per_node 2 train.py --check --steps 5` trains it on gloo and
   compares loss, every gradient and every updated weight with single-device PyTorch.

Each step prints the command it runs; every file lands in the output directory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from unityc.dialects.source import LocatedError, read_module
from unityc.interpreter import assemble, run_graph
from unityc.machine import load_machine
from unityc.machine.errors import MachineSpecError

BIN = Path(sys.executable).parent
CONFIG = {"in_features": "256", "hidden_dims": "[512,512,512,512,512,512,512,512]"}
"""The zoo MLP widened so that parallelism pays on this CPU (tests and benchmarks reuse it)."""
BATCH = 256
DEMO_BUDGET = 24
MODEL = ["mlp", *(f"{k}={v}" for k, v in CONFIG.items()), "--batch", str(BATCH)]


def step(title: str, command: list[str]) -> None:
    """Runs one stage of the chain as a user would type it; stops the demo if it fails."""
    print(f"\n== {title}\n$ {' '.join(command)}", flush=True)
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode:
        raise SystemExit(f"demo: `{command[0]}` failed with exit status {done.returncode}")


def tool(name: str) -> str:
    """The console script installed next to this interpreter (the venv's), else the one on PATH."""
    path = BIN / name
    return str(path) if path.exists() else name


def interpreter_check(graph: Path, plan: Path, seed: int) -> float:
    """Largest relative difference between the plan's reassembled outputs and the graph's."""
    got = [assemble(p) for p in run_graph(read_module(str(plan)), seed)[0]]
    want = [assemble(p) for p in run_graph(read_module(str(graph)), seed)[0]]
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        error = ((g - w).abs().max() / w.abs().max().clamp_min(1e-30)).item()
        print(f"   output {i}: plan sum {g.double().sum().item():.6f}, graph {w.double().sum().item():.6f}")
        worst = max(worst, error)
    return worst


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unityc-demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="build/demo", help="where the files go (default build/demo)")
    parser.add_argument("--machine", default="cpu:2", help="machine to search for (default cpu:2)")
    parser.add_argument("--steps", type=int, default=5, help="training steps to check (default 5)")
    args = parser.parse_args(argv)
    try:
        nproc = load_machine(args.machine).num_devices
    except MachineSpecError as e:
        parser.error(str(e))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    graph, plan, program, report = (out / n for n in ("mlp.mlir", "plan.mlir", "train.py", "plan.json"))

    step("1. import the model", [tool("unityc-import"), *MODEL, "--stats", "-o", str(graph)])
    # Twice the default work budget: the default stops within the first expansion on this graph
    # and settles for a point-to-point plan 0.5 % slower than Unity's sum_concat plan.
    search = ["--unity-search", "--machine", args.machine, "--budget", str(DEMO_BUDGET)]
    search += ["--report", str(report), "-o", str(plan)]
    step("2. search rewrites and a machine mapping jointly", [tool("unityc-opt"), str(graph), *search])
    print("\n== 3. the reference interpreter runs the plan piece by piece and the imported graph")
    try:
        worst = interpreter_check(graph, plan, seed=0)
    except LocatedError as e:
        print(e, file=sys.stderr)
        return 1
    if worst > 1e-5:
        print(f"demo: MISMATCH: relative error {worst:.2e} > 1e-5", file=sys.stderr)
        return 1
    print(f"   equal: worst relative error {worst:.1e} (fp32)")
    step(
        "4. emit the plan as a torch.distributed program",
        [tool("unityc-opt"), str(plan), "-t", "torch", "-o", str(program)],
    )
    run = [tool("torchrun"), "--standalone", "--nproc_per_node", str(nproc), str(program)]
    step(
        "5. train it and check it against single-device PyTorch",
        [*run, "--check", "--steps", str(args.steps)],
    )
    print(f"\nOK: searched, checked by the interpreter, and trained exactly like the reference ({out}/).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
