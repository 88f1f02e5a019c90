"""Issue 40's Done-when matrix on the tiny configs: Mixtral, Qwen2-MoE (shared expert) and
DeepSeek-V3 (multi-head latent attention, grouped sigmoid router), each cell what a user runs.

    nice -n 10 python benchmarks/moe_tiny.py [--cells GLOB] [--rows FILE] [--work DIR]
                                             [--time-limit 120] [--table]

Cells, for each model (`hf:<Config>`, the small config: 4 experts top-2, batch 4):

* `import-check`: `unityc-import --check` (outputs, loss and every gradient in float64);
* for fp32 and bf16-mixed (`unityc-import --precision`), each plan through `unityc-opt -t torch`
  and `torchrun --check --optimizer adam --steps 2` on its ranks (loss, outputs, every gradient
  including the router's, updated weights against single-device PyTorch; under bf16-mixed
  against the autocast reference): the searched plans (`--unity-search`) on cpu:2 and cpu:4, and
  the hand-set `megatron-lm{expert=2}` (EP 2, 2 ranks), `{expert=2 tensor=2}` (EP 2 x TP 2, 4
  ranks) and `{expert=2 stages=2}` (EP 2 x pipeline 2, 4 ranks);
* checkpoints (fp32, then bf16-mixed: `ck-bf16`): EP 2 on 2 ranks trains 4 steps saving every
  2 (`--save-every 2`); EP 2 itself (a control: the resume alone), EP 4 on 4 ranks
  (`megatron-lm{expert=4}`) and data parallelism on 2 (`data-parallel`) resume its step 2
  under `--check` (whose reference, the plain module, resumes from it too) and must print the
  saved run's losses of steps 3 and 4 (within 1e-6: the experts' rows are summed in other
  groupings; under bf16-mixed another plan's steps within bf16's rounding of one step's
  loss change, `resume_bar`); the plain module loads every parameter from it (`checkpoint.load_module`;
  buffers are not in checkpoints), each expert's slice trained.

Each cell appends one JSON line to `--rows` (default `benchmarks/moe_tiny_rows.jsonl`) as it ends:
pass/fail, wall and CPU seconds of its commands (their children included: torchrun's ranks), the
plan's degrees (EP x TP x PP x DP, `moe.moe_degrees`) and, on failure, the error's last lines.
Cells already in the file are skipped, so a stopped run resumes (`--retry-failed`: those whose
last row failed run again); `--table` prints the matrix as markdown. Cells run one after
another (run the script under `nice -n 10`).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from commands import tool
from moe import moe_degrees

from unityc.dialects.source import make_context, parse_source
from unityc.graph import from_module

MODELS = {"mixtral": "hf:MixtralConfig", "qwen2moe": "hf:Qwen2MoeConfig", "deepseek": "hf:DeepseekV3Config"}
PRECISIONS = {"fp32": "fp32", "bf16": "bf16-mixed"}
BATCH = 4
STEPS = ["--optimizer", "adam", "--steps", "2"]
CHECKPOINT_STEPS = ["--optimizer", "adam", "--steps", "4", "--log-every", "1"]
LOSS = re.compile(r"^step (\d+): loss ([0-9.]+)", re.MULTILINE)
TIMEOUT_S = 1200.0


def megatron_lm(ranks: int, **degrees: int) -> list[str]:
    fixed = " ".join(f"{k}={v}" for k, v in degrees.items())
    return ["-p", f'megatron-lm{{machine="cpu:{ranks}" {fixed} optimizer="adam"}}']


def searched(ranks: int, time_limit: float) -> list[str]:
    return [
        "--unity-search",
        "--machine",
        f"cpu:{ranks}",
        "--optimizer",
        "adam",
        "--time-limit",
        str(time_limit),
    ]


PLANS: dict[str, tuple[int, Callable[[float], list[str]]]] = {
    "search-cpu2": (2, lambda t: searched(2, t)),
    "search-cpu4": (4, lambda t: searched(4, t)),
    "ep2": (2, lambda t: megatron_lm(2, expert=2, tensor=1, stages=1)),
    "ep2-tp2": (4, lambda t: megatron_lm(4, expert=2, tensor=2, stages=1)),
    "ep2-pp2": (4, lambda t: megatron_lm(4, expert=2, tensor=1, stages=2)),
}
"""name: (ranks, the `unityc-opt` arguments that plan it, given the search's time limit)."""
RESUMED = {
    "ep2": (2, megatron_lm(2, expert=2, tensor=1, stages=1)),  # the saving plan itself: a control
    "ep4": (4, megatron_lm(4, expert=4, tensor=1, stages=1)),
    "dp": (2, ["-p", 'data-parallel{machine="cpu:2" optimizer="adam"}']),
}
"""The plans that resume the EP 2 checkpoint: name: (ranks, `unityc-opt` arguments)."""
LOSS_TOLERANCE = 1e-6
BF16_UNIT_ROUNDOFF = 2.0**-8
"""bf16's relative rounding: under bf16-mixed another plan's gradients differ from the saving
plan's by about this much relative, so its first update does (Adam's step is a ratio of them)."""


def resume_bar(kind: str, precision: str, saved: dict[str, str]) -> float:
    """How far a resumed run's losses of steps 3 and 4 may each be from the saving run's.

    In fp32, and for the saving plan itself, 1e-6 for both steps: the fp32 cells prove that the
    weights and the optimizer state are mapped exactly between plans. Under bf16-mixed another
    plan's arithmetic differs: step 3's forward rounds in other groupings (micro-batches, expert
    rows) and step 4 follows an update from bf16 gradients that differ by bf16's rounding, so the
    bar is bf16's rounding of the saving run's own step-3 -> step-4 loss change. A lost or
    mis-mapped optimizer state moves that update by its whole size, about 2^8 times the bar.
    """
    if precision == "fp32" or kind == "ep2":
        return LOSS_TOLERANCE
    return max(LOSS_TOLERANCE, BF16_UNIT_ROUNDOFF * abs(float(saved["3"]) - float(saved["4"])))


@dataclass
class Usage:
    wall: float = 0.0
    cpu: float = 0.0


def run(cmd: list[str], log: Path, usage: Usage, timeout: float = TIMEOUT_S) -> tuple[int, str]:
    """(exit status, output) of one command (stdout and stderr into `log`, appended), killed past
    `timeout`; its wall and CPU seconds, children included, added to `usage`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        start = log.stat().st_size
        began = time.perf_counter()
        proc = subprocess.Popen([tool(cmd[0]), *cmd[1:]], stdout=out, stderr=subprocess.STDOUT, env=env)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, rusage = os.wait4(proc.pid, 0)
        timer.cancel()
    usage.wall += time.perf_counter() - began
    usage.cpu += rusage.ru_utime + rusage.ru_stime
    with log.open() as f:
        f.seek(start)
        return os.waitstatus_to_exitcode(status), f.read()


class Failed(Exception):
    """A cell's command failed: what it printed last."""


def checked(cmd: list[str], log: Path, usage: Usage) -> str:
    code, output = run(cmd, log, usage)
    if code != 0:
        lines = [line for line in output.splitlines() if line.strip() and "Warning" not in line]
        raise Failed(f"{Path(cmd[0]).name} exit {code}: " + " | ".join(lines[-6:]))
    return output


class Matrix:
    def __init__(self, work: Path, rows: Path, time_limit: float, retry: bool = False) -> None:
        self.work, self.rows, self.time_limit = work, rows, time_limit
        lines = rows.read_text().splitlines() if rows.exists() else []
        latest = {row["cell"]: row for row in map(json.loads, lines)}
        self.done = {name for name, row in latest.items() if row["status"] == "pass" or not retry}

    def imported(self, model: str, precision: str, usage: Usage) -> Path:
        """The model's MLIR (imported once into the work folder; its time counted once, in the
        cell that imported it)."""
        out = self.work / f"{model}-{precision}.mlir"
        if not out.exists():
            cmd = [
                "unityc-import",
                MODELS[model],
                "--batch",
                str(BATCH),
                "--precision",
                PRECISIONS[precision],
            ]
            checked([*cmd, "-o", str(out)], self.work / f"{model}-{precision}.import.log", usage)
        return out

    def program(
        self, model: str, precision: str, name: str, opt: list[str], usage: Usage
    ) -> tuple[Path, str]:
        """The training program of a plan (`unityc-opt` then `unityc-opt -t torch`), and the
        plan's degrees."""
        source = self.imported(model, precision, usage)
        tag = f"{model}-{precision}-{name}"
        plan, program, log = (self.work / f"{tag}{ext}" for ext in (".plan.mlir", ".py", ".log"))
        if not program.exists():
            checked(["unityc-opt", str(source), *opt, "-o", str(plan)], log, usage)
            checked(["unityc-opt", str(plan), "-t", "torch", "-o", str(program)], log, usage)
        graph = from_module(parse_source(make_context(), plan.read_text(), str(plan)))
        ranks = int(str(graph.module_attrs["unityc.machine"]).strip('"').split(":")[1])
        return program, moe_degrees(graph, ranks)

    def torchrun(self, program: Path, ranks: int, args: list[str], log: Path, usage: Usage) -> str:
        cmd = ["torchrun", "--standalone", f"--nproc_per_node={ranks}", str(program), *args]
        return checked(cmd, log, usage)

    def cell(self, name: str, body: Callable[[Usage], dict]) -> None:
        """Runs one cell unless the rows hold it; appends its row."""
        if name in self.done:
            return
        usage = Usage()
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        load = os.getloadavg()[0]
        try:
            found = body(usage)
            row = {"cell": name, "status": "pass", **found}
        except Failed as e:
            row = {"cell": name, "status": "fail", "error": str(e)[-1500:]}
        row |= {"wall_s": round(usage.wall, 1), "cpu_s": round(usage.cpu, 1), "load": round(load, 1)}
        row["started"] = started
        with self.rows.open("a") as f:
            f.write(json.dumps(row) + "\n")
        self.done.add(name)
        print(f"{name}: {row['status']} ({row['wall_s']} s wall, {row['cpu_s']} s CPU)", flush=True)

    # --- the cells ------------------------------------------------------------------------------

    def import_check(self, model: str) -> Callable[[Usage], dict]:
        def body(usage: Usage) -> dict:
            log = self.work / f"{model}.import-check.log"
            output = checked(["unityc-import", MODELS[model], "--batch", str(BATCH), "--check"], log, usage)
            lines = [line for line in output.splitlines() if "check" in line.lower()]
            return {"detail": " | ".join(lines[-2:])[:300]}

        return body

    def plan_cell(self, model: str, precision: str, name: str) -> Callable[[Usage], dict]:
        ranks, opt = PLANS[name]

        def body(usage: Usage) -> dict:
            program, degrees = self.program(model, precision, name, opt(self.time_limit), usage)
            log = self.work / f"{model}-{precision}-{name}.torchrun.log"
            output = self.torchrun(program, ranks, ["--check", *STEPS], log, usage)
            if "check passed: 2 step(s)" not in output:
                raise Failed(f"no 'check passed' ({degrees})")
            passed = re.search(r"check passed: .*", output)
            return {"ranks": ranks, "plan": degrees, "detail": passed.group(0) if passed else ""}

        return body

    def saves(self, model: str, precision: str) -> Callable[[Usage], dict]:
        def body(usage: Usage) -> dict:
            opt = PLANS["ep2"][1](self.time_limit)
            program, degrees = self.program(model, precision, "ep2", opt, usage)
            folder = self.work / f"{model}-{ck(precision)}"
            args = [*CHECKPOINT_STEPS, "--save-every", "2", "--save", str(folder)]
            output = self.torchrun(program, 2, args, self.work / f"{model}-{ck(precision)}-saves.log", usage)
            losses = dict(LOSS.findall(output))
            if sorted(losses) != ["1", "2", "3", "4"] or not (folder / "step-2").is_dir():
                raise Failed(f"the saving run printed losses of steps {sorted(losses)}")
            return {"ranks": 2, "plan": degrees, "losses": losses}

        return body

    def resumes(self, model: str, kind: str, precision: str) -> Callable[[Usage], dict]:
        ranks, opt = RESUMED[kind]

        def body(usage: Usage) -> dict:
            saved = self.saved_losses(model, precision)
            program, degrees = self.program(model, precision, f"ck-{kind}", opt, usage)
            step = self.work / f"{model}-{ck(precision)}" / "step-2"
            args = [*CHECKPOINT_STEPS, "--resume", str(step), "--check"]
            log = self.work / f"{model}-{ck(precision)}-{kind}.log"
            output = self.torchrun(program, ranks, args, log, usage)
            if "resumed at step 2" not in output or "check passed: 2 step(s)" not in output:
                raise Failed("not resumed at step 2, or --check did not pass")
            resumed = dict(re.findall(r"^step (\d+): loss ([0-9.]+) \(reference", output, re.M))
            if sorted(resumed) != ["3", "4"]:
                raise Failed(f"resumed steps {sorted(resumed)}, not 3 and 4")
            off = {s: abs(float(resumed[s]) - float(saved[s])) for s in ("3", "4")}
            bar = resume_bar(kind, precision, saved)
            if max(off.values()) > bar + 1e-9:
                raise Failed(f"steps 3, 4: {resumed}, the saving run's {saved} (off {off}, bar {bar:.1e})")
            return {"ranks": ranks, "plan": degrees, "losses": resumed, "off": max(off.values()), "bar": bar}

        return body

    def plain_loads(self, model: str, precision: str) -> Callable[[Usage], dict]:
        def body(usage: Usage) -> dict:
            began, cpu = time.perf_counter(), time.process_time()
            try:
                return plain_module_loads(model, self.work / f"{model}-{ck(precision)}" / "step-2")
            finally:
                usage.wall += time.perf_counter() - began
                usage.cpu += time.process_time() - cpu

        return body

    def saved_losses(self, model: str, precision: str) -> dict[str, str]:
        for line in self.rows.read_text().splitlines() if self.rows.exists() else []:
            row = json.loads(line)
            if row["cell"] == f"{model}/{ck(precision)}/ep2-saves" and row["status"] == "pass":
                return row["losses"]
        raise Failed("the EP 2 checkpoint was not saved (its cell failed or has not run)")


def plain_module_loads(model: str, folder: Path) -> dict:
    """The plain module loads every key of the checkpoint: every parameter (a plan's checkpoint
    holds no buffers, `checkpoint.load_module`: DeepSeek-V3's `e_score_correction_bias`, which
    the plan folded as a constant, stays as the module built it); each expert's slice of every
    3-D expert weight differs from a fresh module's (it trained)."""
    import torch

    from unityc.frontend import ModelSpec
    from unityc.models.spec import load_model
    from unityc.runtime import checkpoint

    if not folder.is_dir():
        raise Failed(f"no checkpoint at {folder}")
    spec = ModelSpec(MODELS[model], "small", BATCH)
    module, fresh = (load_model(spec).module for _ in range(2))
    missing = checkpoint.load_module(module, folder)
    buffers = dict(module.named_buffers())
    if any(k not in buffers for k in missing):
        raise Failed(f"the plain module did not load {[k for k in missing if k not in buffers][:4]}")
    got, before = module.state_dict(), fresh.state_dict()
    experts = [k for k, v in got.items() if "experts" in k and v.dim() == 3]
    untrained = [
        f"{k}[{e}]" for k in experts for e in range(got[k].shape[0]) if torch.equal(got[k][e], before[k][e])
    ]
    if not experts or untrained:
        raise Failed(f"expert weights {experts[:2]}: untrained slices {untrained[:4]}")
    kept = f"; buffers not in checkpoints, kept as built: {', '.join(missing)}" if missing else ""
    loaded = len(got) - len(missing)
    return {"detail": f"{loaded} keys loaded, {len(experts)} 3-D expert weights trained in every slice{kept}"}


def cells(matrix: Matrix) -> list[tuple[str, Callable[[Usage], dict]]]:
    out: list[tuple[str, Callable[[Usage], dict]]] = []
    for model in MODELS:
        out.append((f"{model}/import-check", matrix.import_check(model)))
        for precision in PRECISIONS:
            out += [(f"{model}/{precision}/{p}", matrix.plan_cell(model, precision, p)) for p in PLANS]
        out += checkpoint_cells(matrix, model, "fp32")
    for model in MODELS:
        out += checkpoint_cells(matrix, model, "bf16")
    return out


def checkpoint_cells(matrix: Matrix, model: str, precision: str) -> list[tuple[str, Callable[[Usage], dict]]]:
    tag = f"{model}/{ck(precision)}"
    out = [(f"{tag}/ep2-saves", matrix.saves(model, precision))]
    out += [(f"{tag}/{kind}-resumes-ep2", matrix.resumes(model, kind, precision)) for kind in RESUMED]
    return [*out, (f"{tag}/plain-loads-ep2", matrix.plain_loads(model, precision))]


def ck(precision: str) -> str:
    """The checkpoint cells' tag: `ck` (fp32), `ck-bf16`."""
    return "ck" if precision == "fp32" else f"ck-{precision}"


def table(rows: Path) -> str:
    """The rows as markdown, one line a cell (the last row of a cell run twice), in the
    matrix's order."""
    latest = {}
    for line in rows.read_text().splitlines():
        row = json.loads(line)
        latest[row["cell"]] = row
    order = {name: i for i, (name, _) in enumerate(cells(Matrix(Path("."), rows, 0.0)))}
    lines = ["| cell | ranks | result | plan / detail | wall s | CPU s |", "|---|---|---|---|---|---|"]
    for name, row in sorted(latest.items(), key=lambda item: order.get(item[0], len(order))):
        what = row.get("plan") or row.get("detail", "")
        if row["status"] == "fail":
            what = f"{what} {row['error']}".strip()
        elif "off" in row:
            what = f"{what}; steps 3-4 losses {row['losses']} (off {row['off']:.0e})"
        what = what.replace("|", "/")[:260]
        ranks = row.get("ranks", "-")
        lines.append(
            f"| {name} | {ranks} | {row['status']} | {what} | {row['wall_s']:.0f} | {row['cpu_s']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="*", help="glob over cell names (model/precision/plan)")
    parser.add_argument("--rows", default=str(Path(__file__).with_name("moe_tiny_rows.jsonl")))
    parser.add_argument("--work", default="/tmp/moe_tiny", help="imports, plans, programs, logs")
    parser.add_argument("--time-limit", type=float, default=120.0, help="of each search")
    parser.add_argument("--table", action="store_true", help="print the rows as markdown and exit")
    parser.add_argument(
        "--retry-failed", action="store_true", help="run again the cells whose last row failed"
    )
    args = parser.parse_args(argv)
    rows = Path(args.rows)
    if args.table:
        print(table(rows))
        return 0
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    matrix = Matrix(work, rows, args.time_limit, args.retry_failed)
    for name, body in cells(matrix):
        if fnmatch.fnmatch(name, args.cells):
            matrix.cell(name, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
