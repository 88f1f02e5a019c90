"""Writes the generated library and its report (`generated.rules`, `REPORT.md`, `report.json`).

Each file is written to a temporary name and renamed, so a failed run leaves no half-written
output. The report gives the counts of every phase, times, the machine, per-op rule counts, the
rules Unity's paper names and where they are, and every unproven or refuted candidate with why.
"""

from __future__ import annotations

import json
import os
import platform
from collections import Counter
from pathlib import Path
from typing import Any

from unityc.rewrites.generalize import op_names
from unityc.rewrites.generate import Generation, op_counts
from unityc.rewrites.printer import format_rule
from unityc.rewrites.terms import Rule

ANCHORS = {
    "TASO": "743 candidates from graphs of up to 4 ops; ~5 min generation + ~10 min verification; 43 axioms",
    "Unity": "+651 parallel candidates, +33 axioms (76 in all); 30 min for generation and verification",
}

# The rules the issue asks for, by the ops of their two sides (data-flow order), either direction.
LANDMARKS: list[tuple[str, list[str], list[str], str | None]] = [
    ("ReLU partitionable on any dim", ["relu"], ["partition", "relu", "combine"], "general"),
    ("Add = sum_concat + reduce", ["add"], ["sum_concat", "reduce"], None),
    ("Reduce commutes with matmul", ["reduce", "matmul"], ["replicate", "matmul", "reduce"], None),
    ("combine(partition(x)) = x", ["partition", "combine"], [], None),
    ("partition(combine(x)) = x", ["combine", "partition"], [], None),
    ("ReLU commutes with partition", ["relu", "partition"], ["partition", "relu"], None),
    ("ReLU commutes with combine", ["relu", "combine"], ["combine", "relu"], None),
    ("ReLU commutes with replicate", ["relu", "replicate"], ["replicate", "relu"], None),
    ("add commutes with partition", ["add", "partition"], ["partition", "partition", "add"], None),
    ("add commutes with replicate", ["add", "replicate"], ["replicate", "replicate", "add"], None),
    ("add commutes with reduce", ["add", "reduce"], ["reduce", "reduce", "add"], None),
    ("Linear = matmul + transpose", ["linear"], ["transpose", "matmul"], None),
    (
        "Column-parallel linear (5 ops: curated.rules)",
        ["linear"],
        ["replicate", "partition", "linear", "combine"],
        None,
    ),
    (
        "Attention head partitioning (9 ops: curated.rules)",
        ["attention"],
        ["replicate", "partition", "attention", "reduce"],
        None,
    ),
]


def landmarks(rules: list[Rule]) -> list[dict[str, Any]]:
    out = []
    for title, src, tgt, level in LANDMARKS:
        found = []
        for rule in rules:
            sides = (op_names(rule.source), op_names(rule.target))
            if sides in ((src, tgt), (tgt, src)) and (level is None or "any dims" in rule.doc):
                found.append(rule.name)
        out.append({"rule": title, "generated": found})
    return out


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def summary(gen: Generation) -> dict[str, Any]:
    assert gen.buckets is not None
    e = gen.enumeration
    statuses = Counter(d.result.status for d in gen.directions)
    levels = Counter(d.result.level for d in gen.directions if d.result.status == "proven")
    library = [r for r, _ in gen.rules]
    prune = gen.prune_counts  # type: ignore[attr-defined]
    return {
        "machine": machine(),
        "config": {
            "max_ops": gen.config.max_ops,
            "max_outputs": gen.config.max_outputs,
            "degree": gen.config.degree,
            "inputs": {s.name: str(s.type) for s in gen.config.inputs},
            "ops": [s.op for s in gen.config.specs()],
            "jobs": gen.jobs,
            "z3_timeout_s": gen.timeout_s,
        },
        "enumeration": {
            "graphs_by_ops": {str(k): v for k, v in sorted(e.emitted.items())},
            "visited_by_ops": {str(k): v for k, v in sorted(e.visited.items())},
            "applications_tried": e.attempts,
            "rejected_at_last_op": e.rejected,
        },
        "candidates": vars(gen.buckets.counts),
        "prune": {
            "implied_by_smaller": prune.implied,
            "isomorphic": prune.isomorphic,
            "accepted": prune.accepted,
            "rewrites_tried": prune.rewrites_tried,
            "rewrite_joins": prune.rewrite_joins,
            "rounds": [{"size": s, "candidates": c, "accepted": a} for s, c, a in prune.rounds],
        },
        "verification": {
            "directions": len(gen.directions),
            "by_status": dict(statuses),
            "proven_by_level": {str(k): v for k, v in levels.items()},
            "duplicates_after_generalization": gen.duplicates,
            "instances_of_more_general_rules": gen.instances,
            "uncompilable": [{"rule": n, "why": w} for n, w in gen.uncompilable],
            "slow_in_library_order": [
                {"rule": format_rule(r).split("\n", 1)[1].strip(), "why": w} for r, w in gen.slow
            ],
        },
        "library": {"rules": len(library), "per_op": op_counts(gen.rules)},
        "landmarks": landmarks(library),
        "seconds": {k: round(v, 1) for k, v in gen.times.items()},
        "anchors": ANCHORS,
        "not_proven": [
            {
                "status": d.result.status,
                "rule": format_rule(d.result.rule).split("\n", 1)[1].strip(),
                "why": d.result.detail,
                "tried": [f"{a.level}: {a.status}" for a in d.result.attempts],
            }
            for d in gen.directions
            if d.result.status != "proven"
        ],
    }


def library_text(gen: Generation) -> str:
    lines = [
        "# Generated by `unityc-rules generate` (TASO's method with parallel degrees); do not edit.",
        f"# {len(gen.rules)} rules, each proven by Z3 from unityc/rewrites/axioms and checked numerically;",
        "# see REPORT.md for how they were found.",
        "",
    ]
    for rule, _ in gen.rules:
        lines += [format_rule(rule), ""]
    return "\n".join(lines)


def report_markdown(data: dict[str, Any]) -> str:
    c, p, v, s = data["candidates"], data["prune"], data["verification"], data["seconds"]
    m = data["machine"]
    rows = [
        "# Generated rule library: report",
        "",
        f"Generated by `unityc-rules generate` on {m['cpu']} ({m['cores']} cores, {m['platform']}), "
        f"{data['config']['jobs']} verification jobs, Z3 timeout {data['config']['z3_timeout_s']} s.",
        "",
        "## Phases",
        "",
        "| phase | count | seconds |",
        "|---|---:|---:|",
    ]
    by_ops = data["enumeration"]["graphs_by_ops"]
    graphs = ", ".join(f"{k} ops: {n}" for k, n in by_ops.items())
    rows += [
        f"| enumerate graphs ({graphs}) | {sum(by_ops.values())} | {s['enumerate']} |",
        f"| fingerprint buckets (with 2+ graphs) | {c['buckets']} ({c['multi_buckets']}) | {s['pair']} |",
        f"| candidate pairs in buckets | {c['pairs']} | |",
        f"| - over different inputs | {c['different_inputs']} | |",
        f"| - trivial | {c['trivial']} | |",
        f"| - a side reads an op result twice | {c['shared_subterm']} | |",
        f"| - common subgraph | {c['common_subgraph']} | |",
        f"| - identity in context | {c['identity_in_context']} | |",
        f"| - congruent (implied by operand pairs) | {c['congruent']} | |",
        f"| - implied by smaller rules | {p['implied_by_smaller']} | {s['prune']} |",
        f"| - isomorphic | {p['isomorphic']} | |",
        f"| accepted candidates | {p['accepted']} | |",
        f"| directions verified (numeric + Z3) | {v['directions']} | {s['verify']} |",
    ]
    for status, n in sorted(v["by_status"].items()):
        rows.append(f"| - {status} | {n} | |")
    rows += [
        f"| - proven, duplicate after generalization | {v['duplicates_after_generalization']} | |",
        f"| - proven, instance of a more general proven rule | {v['instances_of_more_general_rules']} | |",
        f"| - proven, not compilable by the matcher | {len(v['uncompilable'])} | |",
        f"| - proven, but slow when the library is proven in order | {len(v['slow_in_library_order'])} | "
        f"{s.get('reprove', 0)} |",
        f"| **rules in generated.rules** | **{data['library']['rules']}** | |",
        f"| total | | **{s['total']}** |",
        "",
        "Proven at each level of generality: "
        + ", ".join(f"{k}: {n}" for k, n in v["proven_by_level"].items())
        + ".",
        "",
        "Anchors: " + "; ".join(f"{k}: {t}" for k, t in data["anchors"].items()) + ".",
        "",
        "## Pruning rounds (smallest candidates first)",
        "",
        "| size | candidates | accepted |",
        "|---|---:|---:|",
        *(f"| {r['size']} | {r['candidates']} | {r['accepted']} |" for r in p["rounds"]),
        "",
        "## Rules the paper names",
        "",
        "| rule | generated rules |",
        "|---|---|",
        *(
            f"| {m_['rule']} | {', '.join(m_['generated']) or '(not generated)'} |"
            for m_ in data["landmarks"]
        ),
        "",
        "## Rules per op",
        "",
        "| op | rules |",
        "|---|---:|",
        *(f"| {op} | {n} |" for op, n in data["library"]["per_op"].items()),
        "",
        "## Not proven",
        "",
        "Unproven: a level checked numerically but Z3 found no proof (a missing axiom, or a rule that",
        "needs a condition the generalization did not find). Refuted: every level fails the numeric",
        "check. Collision: even the concrete rule fails on its enumerated instance.",
        "",
    ]
    for item in v["slow_in_library_order"]:
        rows.append(f"- **slow in library order** `{item['rule']}`: {item['why']}")
    for item in data["not_proven"]:
        rows.append(f"- **{item['status']}** `{item['rule']}`: {item['why']} ({'; '.join(item['tried'])})")
    return "\n".join(rows) + "\n"


def write_outputs(gen: Generation, directory: Path) -> None:
    data = summary(gen)
    files = {
        "generated.rules": library_text(gen),
        "report.json": json.dumps(data, indent=1, default=str) + "\n",
        "REPORT.md": report_markdown(data),
    }
    temps = []
    try:
        for name, text in files.items():
            temp = directory / f".{name}.tmp"
            temp.write_text(text)
            temps.append((temp, directory / name))
        for temp, final in temps:
            os.replace(temp, final)
    finally:
        for temp, _ in temps:
            temp.unlink(missing_ok=True)
