"""Every causal-LM architecture of the installed transformers through unityc-import --check, then a
seeded sample of those that import through search and torchrun (on demand, never in the suite):

    .venv/bin/python benchmarks/hf_sweep.py                    # import sweep + sample of 20, table
    .venv/bin/python benchmarks/hf_sweep.py --only llama gpt   # archs whose model type starts so
    .venv/bin/python benchmarks/hf_sweep.py --masked           # the masked-LM architectures too
    .venv/bin/python benchmarks/hf_sweep.py --table            # only rewrite the table from the rows
    .venv/bin/python benchmarks/hf_sweep.py --only cpmant --fresh --sample 0 --plan cpmant
                                                               # one arch again, planned too

Each architecture is `hf:<ConfigClass>` at the small config (`unityc.models.huggingface`: hidden
32, 2 layers, 4 heads, FFN 64, vocabulary 128, sequence 16, batch 2, the class's defaults for the
rest), in its own process under a timeout: first plain torch builds it and trains one step
(forward + backward, a finite loss, some gradient); an architecture it cannot train at the tiny
config is skipped, with the reason. Then `unityc-import hf:<ConfigClass> --check` (outputs, loss
and every gradient against the module) runs in that process; its first error line is recorded.
Rows go to `hf_sweep_rows.jsonl` as they finish (a rerun skips the architectures already there,
unless `--fresh`), so the sweep can be stopped and resumed.

Of the architectures that pass import, `--sample` (20) are drawn with `random.Random(--seed)` (the
draw is printed) and each gets `unityc-opt --unity-search --machine cpu:2`, `-t torch` and
`torchrun --nproc_per_node 2 train.py --check --steps 2` on gloo (loss, outputs, every gradient
and updated weight against single-device PyTorch). The table, `hf_sweep_results.md`, has one row
per architecture, the failures grouped by cause, and a summary.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import json
import math
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ROWS = Path(__file__).with_name("hf_sweep_rows.jsonl")
RESULTS = Path(__file__).with_name("hf_sweep_results.md")


def architectures(masked: bool) -> list[tuple[str, str, str]]:
    """(model type, config class, model class) of every causal-LM (and masked-LM) architecture
    the installed transformers maps, in its order."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    found: list[tuple[str, str, str]] = []
    mappings = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES] + ([MODEL_FOR_MASKED_LM_MAPPING_NAMES] if masked else [])
    seen: set[str] = set()
    for mapping in mappings:
        for kind, model in mapping.items():
            config = CONFIG_MAPPING_NAMES.get(kind)
            if config is None or kind in seen:
                continue
            seen.add(kind)
            found.append((kind, config, model if isinstance(model, str) else model[0]))
    return found


def first_line(text: str) -> str:
    """The first line that says what went wrong (an `error:` line, else the last line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error:" in line:
            return line[:300]
    return lines[-1][:300] if lines else ""


def worker(model: str, output: str) -> dict[str, Any]:
    """In this process: plain torch trains one step of `model`, then unityc-import --check."""
    import torch

    torch.set_num_threads(1)
    from unityc.models.spec import ModelSpec, load_model
    from unityc.tools import importer

    start = time.perf_counter()
    try:
        with warnings_quiet():
            loaded = load_model(ModelSpec(model))
            loss = loaded.module(**loaded.inputs)[0]
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not math.isfinite(loss.item()):
                return {"status": "skip", "why": f"torch: the loss is not a finite scalar ({loss!r:.60})"}
            loss.backward()
        if not any(p.grad is not None for p in loaded.module.parameters()):
            return {"status": "skip", "why": "torch: no parameter gets a gradient"}
    except Exception as e:  # what plain torch cannot train at the tiny config
        message = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        return {"status": "skip", "why": f"torch: {type(e).__name__}: {message}"}
    torch_s = time.perf_counter() - start
    params = sum(p.numel() for p in loaded.module.parameters())
    del loaded, loss
    err = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = importer.main([model, "--check", "-o", output])
    return {
        "status": "pass" if rc == 0 else "fail",
        "why": "" if rc == 0 else first_line(err.getvalue()),
        "params": params,
        "torch_s": round(torch_s, 1),
        "import_s": round(time.perf_counter() - start, 1),
    }


@contextlib.contextmanager
def warnings_quiet() -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


MEMORY = 6 << 30
"""Address-space limit of each worker (bytes): a config whose defaults stay huge (a multimodal
tower) fails in its own process instead of pushing the machine out of memory."""


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run(args: list[str], timeout: int, limit: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        preexec_fn=limit_memory if limit else None,
    )


def sweep_one(kind: str, config: str, directory: Path, timeout: int) -> dict[str, Any]:
    model = f"hf:{config}"
    out = directory / f"{kind}.mlir"
    row: dict[str, Any] = {"kind": kind, "model": model}
    start = time.perf_counter()
    try:
        done = run([sys.executable, __file__, "--worker", model, str(out)], timeout, limit=True)
    except subprocess.TimeoutExpired:
        return {**row, "status": "timeout", "why": f"over {timeout} s (torch step + import --check)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {**row, "status": "crash", "why": first_line(done.stderr) or f"exit {done.returncode}"}
    return {**row, **json.loads(lines[-1]), "wall_s": round(time.perf_counter() - start, 1)}


def plan_one(row: dict[str, Any], directory: Path, timeout: int) -> dict[str, str]:
    """search cpu:2 -> -t torch -> torchrun --check on 2 gloo ranks of an imported architecture."""
    kind = row["kind"]
    model, plan, program = (directory / f"{kind}{s}" for s in (".mlir", "-plan.mlir", ".py"))
    opt = str(BIN / "unityc-opt")
    if not model.exists():
        done = run([str(BIN / "unityc-import"), row["model"], "-o", str(model)], timeout)
        if done.returncode:
            return {"search": f"import FAILED: {first_line(done.stderr)}"}
    try:
        start = time.perf_counter()
        done = run([opt, str(model), "--unity-search", "--machine", "cpu:2", "-o", str(plan)], timeout)
        if done.returncode:
            return {"search": f"FAILED: {first_line(done.stderr)}"}
        found = {"search": search_summary(done.stderr) + f" ({time.perf_counter() - start:.0f} s)"}
        done = run([opt, str(plan), "-t", "torch", "-o", str(program)], timeout)
        if done.returncode:
            return {**found, "torchrun": f"codegen FAILED: {first_line(done.stderr)}"}
        torchrun = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", str(program)]
        done = run([*torchrun, "--check", "--steps", "2", "--timeout", str(timeout)], timeout)
    except subprocess.TimeoutExpired:
        return {"search": "timeout", "torchrun": f"over {timeout} s"}
    output = done.stdout + done.stderr
    passed = re.search(r"check passed: .*", output)
    failed = re.search(r"check failed at .*", output)
    if done.returncode == 0 and passed:
        return {**found, "torchrun": passed.group(0)[:160]}
    return {**found, "torchrun": f"FAILED: {(failed.group(0) if failed else first_line(done.stderr))[:200]}"}


def search_summary(report: str) -> str:
    """The plan's line of a `--unity-search` report on stderr: where it came from, its estimated
    iteration time and peak memory per device (`unityc/search/report.py`'s `render`)."""
    plan = re.search(r"^plan \((.*?)\): iteration time (.+?) \(", report, re.M)
    peak = re.search(r"^memory per device: peak (.+?) on device", report, re.M)
    if plan is None:
        return "planned (no plan line in the report)"
    return f"{plan.group(1)}: {plan.group(2)}" + (f", peak {peak.group(1)}" if peak else "")


def cause(why: str) -> str:
    """A failure's cause, its first line with names and numbers taken out, for grouping."""
    why = re.sub(r"^.*?error: ", "", why)
    why = re.sub(r"'hf:\w+': ", "", why)
    op = re.search(r"(aten\.\w+(?:\.\w+)?)", why)
    if op and ("unsupported" in why or "not supported" in why):
        return f"unsupported {op.group(1)}"
    why = re.sub(r"\(.*?\)", "", why)
    why = re.sub(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|\d+(\.\d+)?(e[-+]?\d+)?", "…", why)
    return why[:120].strip()


def load_rows() -> dict[str, dict[str, Any]]:
    if not ROWS.exists():
        return {}
    rows = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    return {r["kind"]: r for r in rows}


def save_row(row: dict[str, Any], replace: bool) -> dict[str, Any]:
    """Record one architecture's row in the rows file, under a lock and re-read, so that sweeps
    running at once (the sample in the background, `--only X --fresh` in front) keep each
    other's rows: `replace` puts the row in whole (a fresh import), else its fields are added to
    the recorded row (a plan). Returns the row as recorded."""
    with open(ROWS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = load_rows()
        rows[row["kind"]] = row if replace else {**rows.get(row["kind"], {}), **row}
        temporary = ROWS.with_suffix(".tmp")
        temporary.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows.values()))
        temporary.replace(ROWS)
    return rows[row["kind"]]


NOTES = "## Notes"
"""The heading from which the results file is written by hand: kept when the table is rewritten."""


def write_results(archs: list[tuple[str, str, str]], note: str) -> None:
    """The table from the recorded rows (all of them, whoever recorded them), then the notes."""
    old = RESULTS.read_text() if RESULTS.exists() else ""
    notes = old[old.index(NOTES) :] if NOTES in old else ""
    RESULTS.write_text(table(load_rows(), archs, note) + ("\n" + notes if notes else ""))


def cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rows: dict[str, dict[str, Any]], archs: list[tuple[str, str, str]], note: str) -> str:
    order = {kind: i for i, (kind, _, _) in enumerate(archs)}
    listed = sorted(rows.values(), key=lambda r: order.get(r["kind"], len(order)))
    count = Counter(r["status"] for r in listed)
    trained = len(listed) - count["skip"]
    passed = count["pass"]
    lines = [
        "# Every causal-LM architecture of the installed transformers (`benchmarks/hf_sweep.py`)",
        "",
        note,
        "",
        "## Summary",
        "",
        f"- architectures swept: {len(listed)} of {len(archs)} mapped",
        f"- skipped (plain torch cannot train the tiny config): {count['skip']}",
        f"- `unityc-import --check` passes: **{passed} of {trained}** that torch trains"
        + (f" (**{100 * passed / trained:.1f} %**)" if trained else ""),
        f"- fails: {count['fail']}, internal crash of the worker: {count['crash']}, over the timeout: "
        f"{count['timeout']}",
    ]
    sampled = [r for r in listed if "torchrun" in r]
    if sampled:
        good = sum(r["torchrun"].startswith("check passed") for r in sampled)
        lines.append(
            f"- planned (the seeded samples and `--plan`): search cpu:2 + `torchrun --check` on 2 gloo "
            f"ranks passes for **{good} of {len(sampled)}**"
        )
    causes = Counter(cause(r["why"]) for r in listed if r["status"] not in ("pass", "skip"))
    if causes:
        lines += ["", "## Import failures by cause", "", "| cause | archs | which |", "|---|---|---|"]
        for c, n in causes.most_common():
            which = [
                r["kind"] for r in listed if r["status"] not in ("pass", "skip") and cause(r["why"]) == c
            ]
            lines.append(f"| {cell(c)} | {n} | {', '.join(which)} |")
    skips = Counter(cause(r["why"]) for r in listed if r["status"] == "skip")
    if skips:
        lines += [
            "",
            "## Skipped: plain torch cannot train them at the tiny config",
            "",
            "| reason | archs |",
            "|---|---|",
        ]
        for c, n in skips.most_common():
            which = [r["kind"] for r in listed if r["status"] == "skip" and cause(r["why"]) == c]
            lines.append(f"| {cell(c)} ({n}) | {', '.join(which)} |")
    lines += [
        "",
        "## Per architecture",
        "",
        "| arch | config | import --check | first error / reason | params | import s | search cpu:2 "
        "| torchrun --check (2 ranks) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in listed:
        lines.append(
            "| "
            + " | ".join(
                cell(x)
                for x in (
                    r["kind"],
                    r["model"].removeprefix("hf:"),
                    r["status"],
                    r.get("why", "") or "-",
                    r.get("params", "-"),
                    r.get("import_s", "-"),
                    r.get("search", "-"),
                    r.get("torchrun", "-"),
                )
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3])), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="architectures whose model type starts so")
    parser.add_argument("--masked", action="store_true", help="the masked-LM architectures too")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per architecture and per stage")
    parser.add_argument("--sample", type=int, default=20, help="how many passing archs get search + torchrun")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    parser.add_argument(
        "--plan", nargs="*", default=[], help="these passing archs get search + torchrun too (again)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="architectures swept at once (processes)")
    parser.add_argument("--fresh", action="store_true", help="sweep again the chosen (--only) ones")
    parser.add_argument(
        "--retry", action="store_true", help="sweep again the recorded ones that timed out or crashed"
    )
    parser.add_argument("--table", action="store_true", help="only write the table from the recorded rows")
    parser.add_argument(
        "--keep", default=None, help="directory for the imported graphs (default: a temporary one)"
    )
    args = parser.parse_args()
    archs = architectures(args.masked)
    rows = load_rows()
    if args.fresh:  # only the chosen ones: the others' rows stay
        rows = {k: r for k, r in rows.items() if args.only and not k.startswith(tuple(args.only))}
    import os
    import platform

    note = (
        f"transformers {__import__('transformers').__version__}, torch {__import__('torch').__version__}, "
        f"{platform.machine()} with {os.cpu_count()} CPUs; "
        + ("timeouts as each row says; " if args.table else f"per-architecture timeout {args.timeout} s; ")
        + f"load average {os.getloadavg()[0]:.1f} at the table's writing."
    )
    if args.table:
        write_results(archs, note)
        return
    chosen = [a for a in archs if not args.only or a[0].startswith(tuple(args.only))]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(args.keep or tmp)
        directory.mkdir(parents=True, exist_ok=True)
        todo = [
            (kind, config)
            for kind, config, _ in chosen
            if kind not in rows or (args.retry and rows[kind]["status"] in ("timeout", "crash"))
        ]

        def one(item: tuple[str, str]) -> dict[str, Any]:
            return sweep_one(item[0], item[1], directory, args.timeout)

        with ThreadPoolExecutor(args.jobs) as pool:
            for i, row in enumerate(pool.map(one, todo)):
                rows[row["kind"]] = save_row(row, replace=True)
                print(
                    f"[{i + 1}/{len(todo)}] {row['kind']}: {row['status']} {row.get('why', '')}", flush=True
                )
        passing = sorted(r["kind"] for r in rows.values() if r["status"] == "pass")
        sample = sorted(random.Random(args.seed).sample(passing, min(args.sample, len(passing))))
        print(f"sample (seed {args.seed}): {' '.join(sample)}", flush=True)
        planned = [k for k in args.plan if rows.get(k, {}).get("status") == "pass" and k not in sample]
        for kind in sample + planned:
            if "torchrun" in rows[kind] and not args.fresh and kind not in args.plan:
                continue
            rows[kind] = save_row(
                {"kind": kind, **plan_one(rows[kind], directory, args.timeout)}, replace=False
            )
            print(f"{kind}: {rows[kind].get('search')} -> {rows[kind].get('torchrun', '-')}", flush=True)
    chosen_note = (f" Sample seed {args.seed}: {', '.join(sample)}." if sample else "") + (
        f" Planned besides the sample: {', '.join(planned)}." if planned else ""
    )
    write_results(archs, note + chosen_note)


if __name__ == "__main__":
    main()
