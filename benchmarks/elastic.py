"""Elastic training under faults (issue 44): `unityc-train` on localhost, two launchers of 2
processes each, the zoo MLP for 20 steps (Adam, a checkpoint every step), one fault before
step 6 per scenario (`tests/codegen/elastic_run.py` runs and checks them):

    .venv/bin/python benchmarks/elastic.py [--only SUBSTRING] [--rows rows.json] [--render]

Scenarios, for each of a data-parallel, a ZeRO-3 and a pipelined (2 stages x 2-way data, 1F1B)
starting plan: losing the second launcher (SIGKILL: the job goes on on 2 ranks with a searched
plan, or with one of the starting plan's kind, `unityc-train --planner`) and getting it back at
step 14 (4 ranks again), SIGKILL of one worker, and SIGSTOP of one
rank (found by its ring neighbour's heartbeat watch within `--timeout 20`; both restart on the
same 4 ranks: the node is not lost). Per scenario: the transitions (world and resume step), the
plan after the fault, the cost model's estimated slowdown, steps redone, when an agent saw a
worker fail (after the fault), the time from the fault to the first step on the new plan (and
from the fault's detection, as `unityc-train` prints it), and whether the losses after each
transition equal those of the new world's program resumed alone from the same checkpoint (1e-6)
and every sample was trained exactly once. The suite's `test_elastic.py` runs the first
scenario; the others are benchmark-only. Each scenario takes 2-4 minutes on a loaded 2-core
machine (mostly waiting: the rendezvous' last call, 25 s here, and the agents' keep-alive, 6 s);
`--only` runs some and `--rows` keeps the rows of earlier runs, so the table is built in parts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "codegen"))

from elastic_run import LAST_CALL_S, Outcome, Scenario, run_scenario  # noqa: E402

SCENARIOS = [
    *(Scenario(kind, "launcher", grow=True) for kind in ("dp", "zero3", "pipelined")),
    *(Scenario(kind, "worker") for kind in ("dp", "zero3", "pipelined")),
    *(Scenario(kind, "stop") for kind in ("dp", "zero3", "pipelined")),
    # the plan for the 2 ranks left made by the starting plan's own kind (`--planner`), not searched
    # (the search puts the tiny MLP on one device): the survivors both train
    Scenario("dp", "launcher", grow=True, planner="data-parallel"),
    Scenario("zero3", "launcher", grow=True, planner="zero{stage=3}"),
    Scenario("pipelined", "launcher", grow=True, planner='gpipe{stages=2 microbatches=2 schedule="1f1b"}'),
]
RESULTS = ROOT / "benchmarks" / "elastic_results.md"


def row(outcome: Outcome) -> dict[str, object]:
    t = outcome.transitions
    after = t[1] if len(t) > 1 else {}
    detected = outcome.detected_time - outcome.fault_time if outcome.detected_time else None
    return {
        "scenario": outcome.scenario.name,
        "transitions": " -> ".join(f"{r['world']} ranks @ step {r['resume_step']}" for r in t),
        "start_plan": t[0]["summary"] if t else "?",
        "plan_after": f"{after.get('summary', '?')} ({after.get('origin', '?')})",
        "slowdown": after.get("estimated_slowdown"),
        "redone": after.get("steps_redone"),
        "detected_s": detected,
        "recovery_s": outcome.recovery_s,
        "grown_recovery_s": t[2].get("recovery_s") if len(t) > 2 else None,
        "attempt_s": after["first_step_time"] - after["started"] if "first_step_time" in after else None,
        "found_to_first_s": after.get("fault_to_first_step_s"),
        "fault_found": after.get("fault"),
        "timeout_s": outcome.scenario.collective_timeout,
        "last_call_s": LAST_CALL_S,
        "ok": not outcome.problems,
        "problems": outcome.problems[:3],
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def number(value: object, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{unit}" if isinstance(value, float) else str(value)


def render(rows: list[dict[str, object]]) -> str:
    lines = [
        "# Elastic training under faults (`benchmarks/elastic.py`)",
        "",
        "Two `unityc-train` launchers x 2 gloo processes on localhost (2 shared cores, loaded), the zoo",
        "MLP for 20 steps with Adam and a checkpoint every step, one fault before step 6. *detected*: an",
        "agent saw a worker fail, after the fault (a stopped rank: its ring neighbour's heartbeat watch",
        "names it once its heartbeat stood still for `--timeout` less 3 s, `--timeout 20` here).",
        "*recovered*: the fault to the first step on the new plan (the rendezvous' last call, in",
        "brackets, keep-alive 6 s, worker start, search on a cache miss, program start); *from found*:",
        "the same from the first rank's note of the fault, as `unityc-train` prints it; *in the new",
        "attempt*: from the new workers' start (plan lookup or search, program load) to their first",
        "step. *equal*: every loss after a transition equals the new world's program resumed alone from",
        "the same checkpoint (to the printed 1e-6), and every sample was trained exactly once (the",
        "data function's log of the samples each step drew). A killed worker or a stopped rank",
        "restarts the same node's workers (the node is not lost): 4 ranks again, the same plan.",
        "Slowdown: the cost model's step time, new plan over old (the tiny MLP is fastest on one rank:",
        "the search puts it there, so losing a node makes it *faster* by the model). The `--planner`",
        "rows make the 2-rank plan with the starting plan's own kind instead (`unityc-train --planner",
        "PASS`), so both survivors train: data-parallel over 2, ZeRO-3 over 2, 2 pipeline stages.",
        "",
        "| scenario | transitions | plan after the fault | est. slowdown | steps redone | detected | "
        "recovered | from found | equal | measured |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        grown = f" (grown back: {number(r['grown_recovery_s'], ' s')})" if r.get("grown_recovery_s") else ""
        if r.get("attempt_s") is not None:
            grown = f", {number(r['attempt_s'], ' s')} in the new attempt{grown}"
        verdict = "yes" if r["ok"] else "NO: " + "; ".join(str(p)[:200] for p in r["problems"])  # type: ignore[attr-defined]
        lines.append(
            f"| {r['scenario']} (from {r['start_plan']}) | {r['transitions']} | {r['plan_after']} | "
            f"{number(r['slowdown'], 'x')} | {number(r['redone'])} | {number(r['detected_s'], ' s')} | "
            f"{number(r['recovery_s'], ' s')} [{r.get('last_call_s', 15)} s]{grown} | "
            f"{number(r.get('found_to_first_s'), ' s')} | {verdict} | {r['measured']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the scenarios whose name holds this")
    parser.add_argument("--rows", type=Path, default=ROOT / "benchmarks" / "elastic_rows.json")
    parser.add_argument("--render", action="store_true", help="only write the table from --rows")
    args = parser.parse_args()
    rows: list[dict[str, object]] = json.loads(args.rows.read_text()) if args.rows.is_file() else []
    if not args.render:
        for scenario in SCENARIOS:
            if args.only not in scenario.name:
                continue
            with tempfile.TemporaryDirectory() as directory:
                outcome = run_scenario(scenario, Path(directory), deadline_s=900)
            result = row(outcome)
            print(json.dumps(result), flush=True)
            rows = [r for r in rows if r["scenario"] != result["scenario"]] + [result]
            args.rows.write_text(json.dumps(rows, indent=2))
    order = [s.name for s in SCENARIOS]
    rows.sort(key=lambda r: order.index(str(r["scenario"])) if r["scenario"] in order else len(order))
    RESULTS.write_text(render(rows))
    print(render(rows))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
