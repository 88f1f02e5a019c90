"""Fixed costs of generated programs: steps at tiny sizes, where a step is all per-op overhead.

    python benchmarks/fixed_costs.py [--steps 40]

Emits the serial plans of MLP, DLRM and BERT (with and without dropout, 2 and 4 layers) at
sizes where every op's work is negligible, runs each under torchrun (one process) and times
each step's forward, backward and update by the CPU time of the training thread
(`time.thread_time`, least over the steps: other load on the machine hardly counts), against
the cost model's `cpu:1` estimate. What is left at these sizes is the framework's cost per op
(`DeviceKind.kernel_latency`) and the runtime's multi-op kernels (`cost.compute.KERNELS`):
BERT without dropout against MLP and DLRM gives attention's, BERT with dropout against without
gives dropout's, 4 layers against 2 checks both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "codegen"))

BERT = {"hidden": "8", "heads": "2", "ffn": "8", "layers": "2", "seq_len": "4", "max_positions": "4"}
TINY = {
    "mlp": ("mlp-serial-1", {"in_features": "8", "hidden_dims": "[8, 8, 8, 8]", "batch": "2"}),
    "dlrm": (
        "dlrm-serial-1",
        {
            "embedding_dim": "4",
            "bottom_mlp": "[13, 8, 4]",
            "top_mlp": "[8, 4, 1]",
            "table_sizes": "[10, 10, 10, 10]",
            "bag_size": "2",
            "batch": "2",
        },
    ),
    "bert": ("bert-serial-1", {**BERT, "vocab_size": "16", "batch": "1"}),
    "bert, no dropout": ("bert-serial-1", {**BERT, "vocab_size": "16", "batch": "1", "dropout": "0.0"}),
    "bert, 4 layers": ("bert-serial-1", {**BERT, "vocab_size": "16", "batch": "1", "layers": "4"}),
}

TIMED = """
import json, runpy, sys, time
import torch
import unityc.runtime.train as T
phases = []
def step(self, s):
    c0 = time.thread_time()
    self.ctx.begin_step(s)
    with self.zero.saving(), self.autocast():
        outputs = list(self.forward(self.ctx, self.zero.forward_weights, self.data))
    c1 = time.thread_time()
    self.sync.begin()
    torch.autograd.backward([self.ctx.token, outputs[0]], [torch.zeros(()), torch.ones_like(outputs[0])])
    c2 = time.thread_time()
    grads = self.update(s)
    phases.append((c1 - c0, c2 - c1, time.thread_time() - c2))
    return outputs, grads
T.Trainer.step = step
report = T.Trainer.report_timing
def report_timing(self, times):
    json.dump([min(p[i] for p in phases[5:]) for i in range(3)], open(OUT, "w"))
    return report(self, times)
T.Trainer.report_timing = report_timing
program, steps, OUT = sys.argv[1:4]
sys.argv = [program, "--steps", steps, "--warmup", "5"]
torch.set_num_threads(1)
runpy.run_path(program, run_name="__main__")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    from strategies import build

    from unityc.codegen import emit_program
    from unityc.cost.estimate import estimate_module
    from unityc.machine import load_machine

    print("| program | predicted ms (fwd / bwd / step) | measured CPU ms (fwd / bwd / update / step) |")
    print("|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        timed = Path(tmp) / "timed.py"
        timed.write_text(TIMED)
        for label, (plan, settings) in TINY.items():
            module = build(plan, **settings)
            program = Path(tmp) / "program.py"
            program.write_text(emit_program(module, source=f"{plan}.mlir"))
            out = Path(tmp) / "phases.json"
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"]
            command += [str(timed), str(program), str(args.steps + 5), str(out)]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"{label} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            fwd, bwd, update = (t * 1e3 for t in json.loads(out.read_text()))
            e = estimate_module(module, load_machine("cpu:1"), "roofline", "sgd", None)
            print(
                f"| {label} | {e.forward_s * 1e3:.2f} / {e.backward_s * 1e3:.2f} / {e.iteration_s * 1e3:.2f} "
                f"| {fwd:.2f} / {bwd:.2f} / {update:.2f} / {fwd + bwd + update:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
