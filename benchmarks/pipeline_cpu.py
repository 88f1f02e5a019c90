"""Pipelined programs against data parallelism on CPU processes (gloo): measured time per
iteration of `gpipe{...}` plans (GPipe, 1F1B, interleaved 1F1B, several micro-batch counts) and
of the data-parallel plan of one model, all run in one torchrun, with the cost model's estimate
beside each (`estimate` does not model micro-batch overlap yet: it prices a pipelined plan as
its stages one after the other, whole batch).

    python benchmarks/pipeline_cpu.py [--model hf:gpt2] [--batch 32] [--steps 8] [--warmup 3]
                                      [key=value ...]   (model settings, e.g. layers=4 hidden=256)

On a shared 2-core machine, timings move by up to 3x with other load: compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "codegen"))

from torchrun import torchrun, write_program  # noqa: E402

from unityc.cost.estimate import estimate_module  # noqa: E402
from unityc.cost.units import format_time  # noqa: E402
from unityc.dialects.source import make_context, parse_source  # noqa: E402
from unityc.frontend import import_model  # noqa: E402
from unityc.machine import load_machine  # noqa: E402
from unityc.models.spec import ModelSpec  # noqa: E402
from unityc.passes.baselines import DataParallelPass  # noqa: E402
from unityc.passes.gpipe import GpipePass  # noqa: E402

# (name, stages, micro-batches, schedule); None: the data-parallel plan
PLANS = [
    ("data-parallel", None, None, None),
    ("gpipe M=2", 2, 2, "gpipe"),
    ("gpipe M=4", 2, 4, "gpipe"),
    ("gpipe M=8", 2, 8, "gpipe"),
    ("1f1b M=4", 2, 4, "1f1b"),
    ("1f1b M=8", 2, 8, "1f1b"),
    ("interleaved S=4 M=4", 4, 4, "interleaved-1f1b"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="hf:gpt2")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("settings", nargs="*", help="model settings key=value")
    args = parser.parse_args()
    overrides = tuple(tuple(s.split("=", 1)) for s in args.settings)
    spec = ModelSpec(args.model, "small", args.batch, overrides)  # type: ignore[arg-type]
    text = str(import_model(spec))
    machine = "cpu:2"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        entries = []
        for i, (name, stages, microbatches, schedule) in enumerate(PLANS):
            module = parse_source(make_context(), text, "model.mlir")
            if stages is None:
                DataParallelPass(machine=machine).apply(make_context(), module)
            else:
                GpipePass(machine=machine, stages=stages, microbatches=microbatches, schedule=schedule).apply(
                    make_context(), module
                )
            estimate = estimate_module(module, load_machine(machine)).iteration_s
            program = write_program(module, directory, f"plan{i}")
            timing = directory / f"plan{i}.json"
            flags = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--json", str(timing)]
            entries.append({"name": name, "program": str(program), "args": flags})
            rows.append((name, estimate, timing))
        manifest = directory / "batch.json"
        manifest.write_text(json.dumps(entries))
        run = torchrun("unityc.runtime.batch", 2, str(manifest), timeout=3600)
        if run.returncode != 0:
            print(run.report())
            return 1
        print(
            f"{args.model} {' '.join(args.settings)} batch {args.batch} on {machine} ({args.steps} steps, "
            f"{args.warmup} warm-up)"
        )
        print("| plan | estimated | measured ms/iteration (median) | samples/s |")
        print("|---|---|---|---|")
        for name, estimate, timing in rows:
            result = json.loads(timing.read_text())
            measured, rate = result["median_ms"], result["samples_per_s"]
            print(f"| {name} | {format_time(estimate)} | {measured:.1f} | {rate:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
