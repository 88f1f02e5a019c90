"""unityc-run: run a pcg graph in the reference interpreter on seeded random inputs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch
from xdsl.utils.exceptions import InterpretationError

from unityc.dialects.container import graph_function
from unityc.dialects.pipeline import graph_plan_of
from unityc.dialects.source import LocatedError, read_module
from unityc.interpreter import CopiesDiffer, assemble, run_graph
from unityc.interpreter.pipeline import run_microbatched


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="unityc-run",
        description="Run a pcg/parallel graph in the reference interpreter: inputs and weights are seeded "
        "random tensors keyed by name, so a plan and its unparallelized graph see the same values. "
        "Prints each output's shape, degrees and a checksum of its reassembled logical value. A pipelined "
        "plan (unityc.schedule) runs in its micro-batches, its loss their mean.",
    )
    parser.add_argument("file", help="an MLIR file holding one func.func graph")
    parser.add_argument("--seed", type=int, default=0, help="seed for inputs and weights (default 0)")
    parser.add_argument(
        "--float64", action="store_true", help="compute in float64 instead of the IR's float types"
    )
    return parser.parse_args(argv)


def checksum(value: torch.Tensor) -> str:
    data = value.double()
    return f"sum={data.sum().item():.6g} abs={data.abs().sum().item():.6g}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        module = read_module(args.file)
        float_dtype = torch.float64 if args.float64 else None
        types = [v.type for v in graph_function(module).body.block.last_op.operands]  # type: ignore[union-attr]
        plan = graph_plan_of(graph_function(module))
        if plan.pipeline is not None or plan.accumulation > 1:  # micro-batches, as its program runs them
            values = run_microbatched(module, args.seed, float_dtype=float_dtype)
        else:
            outputs, _ = run_graph(module, args.seed, float_dtype=float_dtype)
            values = [assemble(out, f"output {i}") for i, out in enumerate(outputs)]
        for i, (t, value) in enumerate(zip(types, values, strict=True)):
            print(f"output {i}: {t}  shape {list(value.shape)}  {checksum(value)}")
    except LocatedError as e:
        print(str(e), file=sys.stderr)
        return 1
    except (CopiesDiffer, ValueError, InterpretationError) as e:
        print(f"{args.file}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
