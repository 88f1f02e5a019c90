"""unityc-rules: verify rewrite rules, check the operator axioms, generate the rule library."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from unityc.rewrites.parser import (
    AXIOM_DIR,
    RuleSyntaxError,
    format_axiom,
    format_rule,
    load_axioms,
    load_rule_file,
)
from unityc.rewrites.terms import Axiom, Rule, RuleFile

EXAMPLES = """\
examples:
  unityc-rules verify unityc/rewrites/library/curated.rules     prove every rule (numeric check, then Z3)
  unityc-rules verify my.rules --json verdicts.json              also write the verdicts as JSON
  unityc-rules check-axioms --trials 20                          numerically check the shipped axioms
  unityc-rules format my.rules                                   print the rules in canonical form
  unityc-rules generate --max-ops 3 --jobs 2 -o rules/            generate a rule library into rules/
"""


class UsageError(Exception):
    """Bad input: reported as one line, exit status 1."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="unityc-rules",
        description="Rewrite rules for unityc: prove rules from the operator axioms with Z3 (after a "
        "numeric check on random tensors), check the axioms, print rules canonically, and generate "
        "the verified rule library.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    verify = commands.add_parser(
        "verify",
        help="prove or refute every rule in the files",
        description="Check every rule numerically on random instances (a wrong rule is REFUTED with a "
        "counterexample), then prove it from the axioms with Z3 (proven, or UNPROVEN: an axiom is "
        "missing). Axioms declared in the files are checked numerically and added to the axiom set. "
        "Exit status 1 unless every rule is proven.",
    )
    verify.add_argument("files", nargs="+", metavar="FILE", help="a .rules file")
    verify.add_argument(
        "--axioms", nargs="+", metavar="FILE", help="axiom files to prove from (default: the shipped axioms)"
    )
    verify.add_argument(
        "--timeout", type=float, default=10.0, metavar="S", help="Z3 time per rule (default 10)"
    )
    verify.add_argument("--trials", type=int, default=6, help="numeric instances per rule (default 6)")
    verify.add_argument("--json", metavar="OUT", help="write the verdicts to this JSON file")

    check = commands.add_parser(
        "check-axioms",
        help="numerically check the axioms",
        description="Instantiate every axiom on random tensors and compare its sides with the reference "
        "interpreter; also check that each axiom has a Z3 trigger. Exit status 1 if one fails.",
    )
    check.add_argument("files", nargs="*", metavar="FILE", help="axiom files (default: the shipped axioms)")
    check.add_argument("--trials", type=int, default=10, help="numeric instances per axiom (default 10)")
    check.add_argument("--seed", type=int, default=0, help="seed of the random instances (default 0)")

    fmt = commands.add_parser(
        "format", help="print rules canonically", description="Print axioms and rules in canonical form."
    )
    fmt.add_argument("files", nargs="+", metavar="FILE", help="a .rules file")

    generate = commands.add_parser(
        "generate",
        help="regenerate the rule library (TASO-style)",
        description="Enumerate small graphs, fingerprint them on random inputs, pair equal ones, prune, "
        "verify, and write the library with its report.",
    )
    generate.add_argument("--max-ops", type=int, default=3, help="largest graph size (default 3)")
    generate.add_argument(
        "-o",
        "--out",
        required=True,
        metavar="DIR",
        help="output directory (required; the shipped library is unityc/rewrites/library)",
    )
    generate.add_argument("--jobs", type=int, default=2, help="parallel verification processes (default 2)")
    generate.add_argument(
        "--timeout", type=float, default=5.0, metavar="S", help="Z3 time per candidate rule (default 5)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "verify":
            return verify_command(args)
        if args.command == "check-axioms":
            return check_axioms_command(args)
        if args.command == "format":
            return format_command(args)
        return generate_command(args)
    except RuleSyntaxError as e:
        print(f"{e.path}:{e.line}:{e.column}: error: {e.reason}", file=sys.stderr)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
    except BrokenPipeError:  # the reader (e.g. `head`) stopped early
        sys.stderr.close()
    return 1


def read_rules(path: str) -> RuleFile:
    try:
        return load_rule_file(path)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None


# --- verify ---------------------------------------------------------------------------------


def verify_command(args: argparse.Namespace) -> int:
    files = [read_rules(p) for p in args.files]
    axioms = [a for p in args.axioms for a in read_rules(p).axioms] if args.axioms else load_axioms()
    # imported once the input is known to be good: they pull in torch (seconds)
    from unityc.rewrites.numeric import numeric_check
    from unityc.rewrites.verify import check_rule

    rules = [r for f in files for r in f.rules]
    declared = [a for f in files for a in f.axioms]
    failed = 0
    for axiom in declared:
        result = numeric_check(axiom, trials=args.trials)
        if result.ok:
            axioms.append(axiom)
            print(f"checked   {axiom.name}  (axiom, {result.instances} instances)")
        else:
            failed += 1
            print(f"REFUTED   {axiom.name} (axiom): {result.counterexample}")
    if not rules and not declared:
        raise UsageError("no rules to verify in " + ", ".join(args.files))
    records: list[dict[str, Any]] = []
    z3_times: list[float] = []
    with tqdm(rules, desc="verifying", unit="rule", disable=None, file=sys.stderr, leave=False) as bar:
        for rule in bar:
            verdict = check_rule(rule, axioms, timeout_s=args.timeout, trials=args.trials)
            tqdm.write(
                _verdict_line(verdict.status, rule.name, verdict.detail, verdict.seconds), file=sys.stdout
            )
            records.append(_record(rule, verdict.status, verdict.detail, verdict.seconds, verdict.z3_seconds))
            if verdict.status != "refuted":
                z3_times.append(verdict.z3_seconds)
            failed += verdict.status != "proven"
    counts = {s: sum(r["status"] == s for r in records) for s in ("proven", "unproven", "refuted")}
    noun = "rule" if len(rules) == 1 else "rules"
    summary = (
        f"{len(rules)} {noun}: {counts['proven']} proven, {counts['unproven']} unproven, "
        f"{counts['refuted']} refuted ({len(axioms)} axioms"
    )
    if z3_times:
        summary += f"; Z3 per rule median {statistics.median(z3_times):.3f} s, max {max(z3_times):.3f} s"
    print(summary + ")")
    if args.json:
        _write_json(args.json, {"axioms": len(axioms), "summary": counts, "rules": records})
    return 1 if failed else 0


def _verdict_line(status: str, name: str, detail: str, seconds: float) -> str:
    if status == "proven":
        return f"proven    {name}  {seconds:.2f} s"
    return f"{status.upper():9s} {name}: {detail}"


def _record(rule: Rule, status: str, detail: str, seconds: float, z3_seconds: float) -> dict[str, Any]:
    loc = rule.loc
    return {
        "name": rule.name,
        "file": loc.path if loc else None,
        "line": loc.line if loc else None,
        "status": status,
        "detail": detail,
        "seconds": round(seconds, 4),
        "z3_seconds": round(z3_seconds, 4),
    }


def _write_json(path: str, data: Any) -> None:
    """Writes all or nothing: a temporary file renamed into place."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
        os.replace(tmp, target)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


# --- check-axioms ---------------------------------------------------------------------------


def check_axioms_command(args: argparse.Namespace) -> int:
    paths = args.files or [str(p) for p in sorted(AXIOM_DIR.glob("*.rules"))]
    axioms: list[Axiom] = [a for p in paths for a in read_rules(p).axioms]
    if not axioms:
        raise UsageError("no axioms in " + ", ".join(paths))
    from unityc.rewrites.numeric import numeric_check
    from unityc.rewrites.verify import encode_axiom

    failed = 0
    for axiom in tqdm(axioms, desc="checking", unit="axiom", disable=None, file=sys.stderr, leave=False):
        problem = encode_axiom(axiom)
        result = numeric_check(axiom, trials=args.trials, seed=args.seed)
        if problem is None and result.ok:
            tqdm.write(f"ok        {axiom.name}  ({result.instances} instances)", file=sys.stdout)
            continue
        failed += 1
        tqdm.write(f"FAILED    {axiom.name}: {problem or result.counterexample}", file=sys.stdout)
    print(f"{len(axioms)} axioms: {len(axioms) - failed} ok, {failed} failed")
    return 1 if failed else 0


# --- format, generate -----------------------------------------------------------------------


def format_command(args: argparse.Namespace) -> int:
    for path in args.files:
        parsed = read_rules(path)
        for axiom in parsed.axioms:
            print(format_axiom(axiom))
        for rule in parsed.rules:
            print(format_rule(rule))
    return 0


def generate_command(args: argparse.Namespace) -> int:
    try:
        from unityc.rewrites import generate
    except ImportError as e:
        raise UsageError(f"the rule generator (unityc.rewrites.generate) is not available: {e}") from None
    try:
        generate.run(max_ops=args.max_ops, out_dir=args.out, jobs=args.jobs, timeout_s=args.timeout)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
