"""Where the generated program's step time goes, against HF's model with SDPA (issue 38).

One case of `program_memory.py` (model, seq x batch, precision, padding mask): both steps
(forward, backward, SGD update; one CPU thread) run under `torch.profiler`, alternating, after
one warm-up step each; prints the aten ops by self CPU time per step on each side, the
difference, and the totals. Self CPU time per op is less sensitive to a loaded machine than
wall time, but not immune: compare the rows, not the absolute figures.

    python benchmarks/program_profile.py [--model llama] [--row 512x2] [--precision fp32]
        [--mask no] [--steps 2] [--top 25]

Writes nothing; `program_profile_results.md` records runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
import program_memory


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama", choices=sorted(program_memory.MODELS))
    parser.add_argument("--row", default="512x2", help="seq x batch (default 512x2)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16-mixed"))
    parser.add_argument("--mask", default="no", choices=("no", "yes"))
    parser.add_argument("--dropout", default="0.1", help="GPT-2's and BERT's dropout (default 0.1)")
    parser.add_argument("--steps", type=int, default=2, help="profiled steps of each (default 2)")
    parser.add_argument("--top", type=int, default=25, help="ops shown (default 25)")
    return parser.parse_args(argv)


def _self_cpu_ms(run: Callable[[], None], steps: int) -> dict[str, tuple[float, int]]:
    """Self CPU ms per step and calls per step of each op over `steps` profiled steps."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            run()
    return {
        e.key: (e.self_cpu_time_total / 1e3 / steps, e.count // steps)
        for e in prof.key_averages()
        if e.self_cpu_time_total > 0
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(program_memory._free_port()))
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo", rank=0, world_size=1)
    seq, batch = (int(n) for n in args.row.split("x"))
    mask = args.mask == "yes"
    with tempfile.TemporaryDirectory() as tmp:
        case = (args.model, seq, batch, args.precision, mask, args.dropout)
        program, _ = program_memory._program(*case, Path(tmp))
        trainer = program_memory._trainer(program)
        _, hf_step = program_memory._hf(program, args.precision)
        sides: dict[str, Callable[[], None]] = {"program": lambda: trainer.step(0), "hf": hf_step}
        for run in sides.values():
            run()  # warm-up
        ms = {name: _self_cpu_ms(run, args.steps) for name, run in sides.items()}
    dist.destroy_process_group()
    ours, theirs = ms["program"], ms["hf"]
    none = (0.0, 0)
    names = sorted(set(ours) | set(theirs), key=lambda n: -max(ours.get(n, none)[0], theirs.get(n, none)[0]))
    print(
        f"{args.model}, {seq} x {batch}, {args.precision}, padding mask {args.mask}; "
        f"torch {torch.__version__}, 1 thread, {args.steps} profiled steps each, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print("| op | program ms/step | calls | HF ms/step | calls | program - HF |")
    print("|---|---|---|---|---|---|")
    for name in names[: args.top]:
        (a, ca), (b, cb) = ours.get(name, none), theirs.get(name, none)
        print(f"| `{name}` | {a:.1f} | {ca} | {b:.1f} | {cb} | {a - b:+.1f} |")
    total = {side: sum(t for t, _ in v.values()) for side, v in ms.items()}
    print(
        f"| **all ops** | {total['program']:.1f} | | {total['hf']:.1f} | | "
        f"{total['program'] - total['hf']:+.1f} ({total['program'] / total['hf']:.2f}x) |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
