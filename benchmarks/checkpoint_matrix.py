"""The save/load matrix of issue 27: every plan kind saves a checkpoint on 2 and on 4 ranks and
every other plan kind, on either rank count, resumes from it; each resumed run must print the
losses the resuming plan prints when it trains uninterrupted, and the plain module (the model's
own nn.Module, `checkpoint.load_module`: its state_dict keys and shapes) loads every checkpoint.

    .venv/bin/python benchmarks/checkpoint_matrix.py [--models gpt2,bert] [--kinds dp,zero3] [--check]

Models (HF-config and zoo, "small": 2 layers, hidden 32, batch 8, dropout 0):
* `gpt2` (`hf:gpt2`): its packed `c_attn` weight and bias are read by every plan as three *weight
  parts* (`c_attn.weight[:, 0:32]`, ...), so every gpt2 cell saves and loads parts;
* `bert` (zoo BERT): its word embedding is *tied* to the MLM head; the pipelined plan holds it on
  both stages (Megatron-LM's embedding group), the others once.

Plan kinds (`search.baselines`, Adam): `dp` data parallel, `megatron` (Megatron-LM: tensor 2,
micro-batches, ZeRO-1), `zero1`, `zero2`, `zero3` (FSDP-style flat shards), `recompute` (data
parallel recomputing every op in backward), `pipelined` (Megatron-LM: 2 stages, 1F1B, ZeRO-1).

Per model and rank count one torchrun (`unityc.runtime.batch`) runs every kind for 4 steps,
saving at step 2 and 4 (`--save-every 2`; the losses of steps 1-4 are the uninterrupted run's);
then one torchrun per model and rank count runs every resume from `step-2` of every other
(kind, rank count) to step 4 (`--check` also compares each with the single-device reference
resumed from the same checkpoint). A cell is `=` when the resumed steps 3 and 4 print the
uninterrupted run's losses digit for digit (6 decimals), else the largest difference (a failure
past 1e-5). Dropout is off: its masks are drawn per piece, so a micro-batched plan draws other
masks than a whole-batch one and their losses differ by ~5e-2 after two steps. The plain
module column: `load_module` leaves no key out, and the largest difference of its weights from
those the `dp` plan on 2 ranks saved.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "codegen"))

import torch  # noqa: E402
from torchrun import Run, sections, torchrun, write_program  # noqa: E402
from xdsl.dialects.builtin import ModuleOp, StringAttr  # noqa: E402

from unityc.frontend import ModelSpec, import_model  # noqa: E402
from unityc.graph import Graph, from_module, to_module  # noqa: E402
from unityc.machine import Machine  # noqa: E402
from unityc.machine.presets import preset  # noqa: E402
from unityc.models.spec import load_model  # noqa: E402
from unityc.runtime import checkpoint  # noqa: E402
from unityc.search.baselines import data_parallel, megatron_lm, zero  # noqa: E402
from unityc.search.plans import PricedPlan  # noqa: E402
from unityc.search.unity import UnityOptions  # noqa: E402

MODELS = {
    "gpt2": ModelSpec("hf:gpt2", "small", batch=8, overrides=(("dropout", "0.0"),)),
    "bert": ModelSpec("bert", "small", batch=8, overrides=(("dropout", "0.0"),)),
}
OPTIONS = UnityOptions(optimizer="adam")
Build = Callable[[Graph, Machine], PricedPlan]
KINDS: dict[str, Build] = {
    "dp": lambda g, m: data_parallel(g, m, OPTIONS),
    "megatron": lambda g, m: megatron_lm(g, m, OPTIONS, None, tensor=2, stages=1),
    "zero1": lambda g, m: zero(g, m, OPTIONS, None, 1),
    "zero2": lambda g, m: zero(g, m, OPTIONS, None, 2),
    "zero3": lambda g, m: zero(g, m, OPTIONS, None, 3),
    "recompute": lambda g, m: zero(g, m, OPTIONS, None, 0, recompute=True),
    "pipelined": lambda g, m: megatron_lm(g, m, OPTIONS, None, tensor=1, stages=2),
}
RANKS = (2, 4)
TRAIN = ["--steps", "4", "--optimizer", "adam", "--log-every", "1"]
LOSS = re.compile(r"^step (\d+): loss ([0-9.]+)", re.MULTILINE)
TIMEOUT_S = 3600
TOLERANCE = 1e-5
"""Resumed losses within this of the uninterrupted ones pass (plans sum in other orders: the
6th decimal may differ by one)."""


@dataclass
class Matrix:
    model: str
    work: Path
    programs: dict[str, str] = field(default_factory=dict)
    """cell name (`kind-ranks`) -> its train.py"""
    notes: dict[str, str] = field(default_factory=dict)
    out: dict[str, str] = field(default_factory=dict)
    """run name -> its section of the batch output ('' where the batch never ran it)"""
    failures: list[str] = field(default_factory=list)
    benign: set[str] = field(default_factory=set)
    """Keys of the plain module no checkpoint holds: buffers, a tied weight's other name."""


def cell(kind: str, ranks: int) -> str:
    return f"{kind}-{ranks}"


def plan(module: ModuleOp, kind: str, ranks: int) -> tuple[ModuleOp, str]:
    machine = f"cpu:{ranks}"
    planned = KINDS[kind](from_module(module), preset(machine))
    planned.graph.module_attrs["unityc.machine"] = StringAttr(machine)
    return to_module(planned.graph), planned.note


def losses(section: str) -> dict[int, float]:
    return {int(step): float(loss) for step, loss in LOSS.findall(section)}


def run_all(matrix: Matrix, ranks: int, entries: list[dict[str, object]], tag: str) -> None:
    """Runs `entries` (a batch manifest) on `ranks` processes; a program that crashes ends its
    batch, so the rest run again in a new one (the crash is recorded)."""
    pending = list(entries)
    while pending:
        manifest = matrix.work / f"{tag}-{len(entries) - len(pending)}.json"
        manifest.write_text(json.dumps(pending))
        run: Run = torchrun("unityc.runtime.batch", ranks, str(manifest), cwd=matrix.work, timeout=TIMEOUT_S)
        found = sections(run.output)
        matrix.out.update(found)
        done = [e for e in pending if e["name"] in found]
        if len(done) == len(pending):
            return
        crashed = next(e for e in pending if e["name"] not in found)
        matrix.out[str(crashed["name"])] = ""
        matrix.failures.append(f"{crashed['name']}: crashed its batch\n{run.report()}")
        pending = pending[pending.index(crashed) + 1 :]


def build(model: str, kinds: list[str], work: Path) -> Matrix:
    matrix = Matrix(model, work)
    module = import_model(MODELS[model])
    for ranks in RANKS:
        for kind in kinds:
            name = cell(kind, ranks)
            planned, matrix.notes[name] = plan(module, kind, ranks)
            matrix.programs[name] = str(write_program(planned, work, f"{model}-{name}"))
    return matrix


def measure(matrix: Matrix, kinds: list[str], check: bool) -> None:
    ck = matrix.work / "ck"
    for ranks in RANKS:
        saves = [
            {
                "name": cell(k, ranks),
                "program": matrix.programs[cell(k, ranks)],
                "args": [*TRAIN, "--save", str(ck / cell(k, ranks)), "--save-every", "2"],
            }
            for k in kinds
        ]
        run_all(matrix, ranks, saves, f"save-{ranks}")
    saved = [cell(k, r) for r in RANKS for k in kinds]
    for ranks in RANKS:
        resumes = [
            {
                "name": f"{cell(k, ranks)} <- {source}",
                "program": matrix.programs[cell(k, ranks)],
                "args": [*TRAIN, "--resume", str(ck / source / "step-2"), *(["--check"] if check else [])],
            }
            for k in kinds
            for source in saved
            if source != cell(k, ranks)
        ]
        run_all(matrix, ranks, resumes, f"resume-{ranks}")


def verdict(matrix: Matrix, resumer: str, source: str, check: bool) -> str:
    """A cell: '=' (steps 3 and 4 repeat the uninterrupted run's losses), else what differs."""
    section = matrix.out.get(f"{resumer} <- {source}", "")
    if not section:
        return "CRASH"
    if not section.endswith(": exit 0"):
        line = next((x for x in section.splitlines() if "error" in x), section.splitlines()[-1])
        matrix.failures.append(f"{resumer} <- {source}: {line}")
        return "FAIL"
    if "resumed at step 2" not in section or (check and "check passed: 2 step(s)" not in section):
        matrix.failures.append(f"{resumer} <- {source}: not resumed at step 2, or --check failed")
        return "FAIL"
    want, got = losses(matrix.out.get(resumer, "")), losses(section)
    if sorted(got) != [3, 4] or not {3, 4} <= set(want):
        matrix.failures.append(f"{resumer} <- {source}: losses of steps {sorted(got)}")
        return "FAIL"
    worst = max(abs(got[s] - want[s]) for s in (3, 4))
    if worst > TOLERANCE:
        matrix.failures.append(f"{resumer} <- {source}: steps 3-4 {got} where uninterrupted {want}")
        return f"**{worst:.0e}**"
    return "=" if worst == 0 else f"{worst:.0e}"


def plain_module(matrix: Matrix, source: str, base: dict[str, torch.Tensor] | None) -> str:
    """The plain module loads `source`'s step 2: keys it left out, else the largest difference
    of its weights from `base` (the dp-2 checkpoint's)."""
    module = load_model(MODELS[matrix.model]).module
    path = matrix.work / "ck" / source / "step-2"
    if not (path / ".metadata").is_file():
        return "no checkpoint"
    try:
        missing = checkpoint.load_module(module, path)
    except Exception as e:  # a table cell: whatever the load raised, shown
        matrix.failures.append(f"plain module <- {source}: {type(e).__name__}: {e}")
        return "FAIL"
    params = dict(module.named_parameters(remove_duplicate=False))
    held = [p for k, p in params.items() if k not in missing]
    lost = [k for k in missing if k in params and not any(params[k] is p for p in held)]
    if lost:  # buffers, and a tied weight's second name, come from the model itself
        matrix.failures.append(f"plain module <- {source}: parameters left out: {lost}")
        return f"{len(lost)} parameters left out"
    matrix.benign.update(missing)
    if base is None:
        return "loaded"
    state = module.state_dict()
    worst = max(float((state[k] - v).abs().max()) for k, v in base.items())
    return "loaded, =" if worst == 0 else f"loaded, {worst:.0e}"


def table(matrix: Matrix, kinds: list[str], check: bool) -> list[str]:
    saved = [cell(k, r) for r in RANKS for k in kinds]
    lines = [
        f"### {matrix.model} ({MODELS[matrix.model].model}, small, batch 8)",
        "",
        "Rows: the checkpoint (kind-ranks, saved at step 2); columns: the plan resuming it.",
        "",
        "| saved by | " + " | ".join(saved) + " | plain module |",
        "|---|" + "---|" * (len(saved) + 1),
    ]
    base_module = load_model(MODELS[matrix.model]).module
    base_path = matrix.work / "ck" / cell("dp", 2) / "step-2"
    base = None
    if (base_path / ".metadata").is_file():
        kept = set(checkpoint.load_module(base_module, base_path))  # buffers, a tied name: the model's
        base = {k: v.clone() for k, v in base_module.state_dict().items() if k not in kept}
    for source in saved:
        cells = [verdict(matrix, resumer, source, check) if resumer != source else "-" for resumer in saved]
        if not matrix.out.get(source, "").endswith(": exit 0"):
            matrix.failures.append(f"{source}: its save run failed")
            cells = ["no save"] * len(saved)
        lines.append(f"| {source} | " + " | ".join(cells) + f" | {plain_module(matrix, source, base)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    parser.add_argument("--check", action="store_true", help="also --check every resumed run")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",")
    unknown = [k for k in kinds if k not in KINDS] + [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown model or kind: {', '.join(unknown)}")
    failures = []
    for model in args.models.split(","):
        start, cpu = time.monotonic(), time.process_time()
        with tempfile.TemporaryDirectory(prefix=f"unityc-ckmatrix-{model}-") as work:
            matrix = build(model, kinds, Path(work))
            measure(matrix, kinds, args.check)
            print("\n".join(table(matrix, kinds, args.check)))
        resumes = len(kinds) * len(RANKS) * (len(kinds) * len(RANKS) - 1)
        print(
            f"\n{model}: {len(kinds) * len(RANKS)} checkpoints, {resumes} resumed runs, "
            f"{time.monotonic() - start:.0f} s wall (this process: {time.process_time() - cpu:.0f} s CPU; "
            f"load average {os.getloadavg()[0]:.1f})"
        )
        if matrix.benign:
            print(
                f"(the plain module keeps its own {', '.join(sorted(matrix.benign))}: buffers or a tied name)"
            )
        for note in sorted(matrix.notes.items()):
            print(f"- {note[0]}: {note[1]}")
        print(flush=True)
        failures += matrix.failures
    for failure in failures:
        print(f"FAILED {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
