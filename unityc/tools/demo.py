"""The demo run by `make demo`: a bundled tensor-parallel MLP plan is parsed, verified,
round-tripped (custom and generic syntax), interpreted piece by piece, and its reassembled
output compared with the unparallelized graph's."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from io import StringIO
from pathlib import Path

import torch
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

from unityc.dialects.syntax import UnitycOp
from unityc.interpreter import assemble, run_graph
from unityc.tools.source import LocatedError, make_context, parse_source, read_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def render(module: ModuleOp, generic: bool = False) -> str:
    out = StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue()


def round_trip(module: ModuleOp) -> None:
    text = render(module)
    for generic in (False, True):
        again = parse_source(make_context(), render(module, generic), "<round trip>")
        if render(again) != text:
            raise SystemExit(
                f"round trip through the {'generic' if generic else 'custom'} syntax changed the plan"
            )


def describe(module: ModuleOp) -> None:
    print(f"{'op':<22} {'result':<44} machine view")
    for op in module.walk():
        if not isinstance(op, UnitycOp):
            continue
        view = op.attributes.get("view")
        print(f"{op.name:<22} {op.results[0].type!s:<44} {view if view else '-'}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unityc-demo", description=__doc__)
    parser.add_argument("--plan", default=str(EXAMPLES / "mlp_tensor_parallel.mlir"))
    parser.add_argument("--reference", default=str(EXAMPLES / "mlp.mlir"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        plan, reference = read_module(args.plan), read_module(args.reference)
    except LocatedError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"== plan {args.plan}: parsed and verified")
    round_trip(plan)
    print("== round trip through the custom and the generic syntax: unchanged")
    print(render(plan))
    print("== ops, their parallel result types and machine views")
    describe(plan)
    print(f"\n== interpreting both graphs on the same seeded inputs and weights (seed {args.seed})")
    worst = 0.0
    for dtype in (torch.float32, torch.float64):
        got = [assemble(p) for p in run_graph(plan, args.seed, float_dtype=dtype)[0]]
        want = [assemble(p) for p in run_graph(reference, args.seed, float_dtype=dtype)[0]]
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            err = ((g - w).abs().max() / w.abs().max().clamp_min(1e-30)).item()
            worst = max(worst, err) if dtype == torch.float32 else worst
            print(
                f"   {dtype!s:<14} output {i}: plan {g.double().sum().item():.8f}  "
                f"unparallelized {w.double().sum().item():.8f}  relative error {err:.2e}"
            )
    if worst > 1e-5:
        print(f"MISMATCH: relative error {worst:.2e} > 1e-5", file=sys.stderr)
        return 1
    print("\nOK: the plan's reassembled output equals the unparallelized graph's (fp32 rel. error <= 1e-5).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
