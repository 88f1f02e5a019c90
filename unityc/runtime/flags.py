"""The generated program's command line: its flags, parsed and checked (bad flags and
unwritable output paths are usage errors, exit 2, before torchrun is even needed)."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from unityc.runtime import optim
from unityc.runtime.patterns import BUCKET_BYTES
from unityc.runtime.plan import Plan
from unityc.runtime.precision import BF16_TOLERANCE, FP32_TOLERANCE, default_tolerance
from unityc.runtime.watch import (
    DEFAULT_TIMEOUT_S,
)


def parse_args(plan: Plan, argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=f"Train {plan.model.name} ({plan.model.config}) with the plan {plan.source} "
        f"on {plan.machine}: run with torchrun --nproc_per_node {plan.world_size}."
    )
    parser.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of the timing (default 2)")
    optim.add_arguments(parser)
    parser.add_argument(
        "--data",
        metavar="MODULE:FUNCTION",
        help="training batches from module:function or path/to/file.py:function (see "
        "unityc/runtime/data.py); default: the model's seeded example inputs every step",
    )
    parser.add_argument(
        "--data-args", default="", metavar="ARGS", help="keyword arguments for the data function"
    )
    parser.add_argument(
        "--save", metavar="DIR", help="save checkpoints to DIR/step-<k> (torch.distributed.checkpoint)"
    )
    parser.add_argument(
        "--save-every", type=int, default=0, metavar="N", help="also every N steps (default: at the end only)"
    )
    parser.add_argument(
        "--resume",
        metavar="DIR",
        help="continue from a checkpoint: weights, optimizer state and step (to --steps)",
    )
    parser.add_argument(
        "--stop-after",
        type=int,
        metavar="N",
        help="stop (and save, with --save) after step N; the schedule still spans --steps, so a run "
        "resumed from there repeats the uninterrupted one",
    )
    parser.add_argument("--init", metavar="DIR", help="initial weights from a checkpoint (of any plan)")
    parser.add_argument(
        "--reset-optimizer",
        action="store_true",
        help="with --resume: start a fresh optimizer (its state is not loaded), so the optimizer, "
        "learning rate and schedule may differ from those the checkpoint was saved with",
    )
    parser.add_argument(
        "--log-every",
        type=int,
        default=0,
        metavar="N",
        help="print progress every N steps (default: first and last)",
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="write a torch.profiler trace per rank to DIR/rank-<r>.json"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare loss, outputs, gradients and updated weights with single-device training "
        "after every step (dropout off); exit 1 naming the first mismatch",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        help=f"relative error allowed by --check (default {default_tolerance(plan.precision):g} for "
        f"this {plan.precision} plan: {FP32_TOLERANCE:g} for fp32, {BF16_TOLERANCE:g} for bf16-mixed)",
    )
    parser.add_argument(
        "--float64",
        action="store_true",
        help="run the plan (and the reference) in float64: --check then separates plan errors from "
        "the model's own fp32 rounding (deep CNNs amplify 1e-7 input noise past 1e-4)",
    )
    parser.add_argument(
        "--check-copies",
        action="store_true",
        help="after the last step, check that all copies of every weight piece are equal (also with "
        "dropout on); assembles every weight on rank 0",
    )
    parser.add_argument(
        "--no-overlap",
        action="store_true",
        help="all-reduce the gradients of weight copies after the backward instead of during it",
    )
    parser.add_argument(
        "--bucket-mb",
        type=float,
        default=BUCKET_BYTES / 2**20,
        metavar="MIB",
        help=f"gradient bucket size in MiB (default {BUCKET_BYTES / 2**20:g}, as the cost model assumes)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the timing (rank 0) to FILE as JSON")
    parser.add_argument(
        "--saved-bytes",
        metavar="FILE",
        help="count what autograd saves for backward on every rank (unique storages, parameters "
        "excluded: the most one micro-batch's forward saves, the most held at once) and write it "
        "to FILE as JSON (rank 0)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds a collective waits for its peers before the run fails naming the rank at fault "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    if not args.lr > 0 or args.lr == float("inf"):
        parser.error(f"--lr must be a positive number, got {args.lr}")
    if args.resume and args.init:
        parser.error("--resume and --init both give initial weights: pass one")
    if args.stop_after is not None and args.stop_after < 1:
        parser.error("--stop-after must be at least 1")
    if not args.bucket_mb > 0 or args.bucket_mb == float("inf"):
        parser.error(f"--bucket-mb must be a positive number, got {args.bucket_mb}")
    if args.save_every < 0 or args.log_every < 0:
        parser.error("--save-every and --log-every must not be negative")
    args.optim = optim.spec_from_args(args, parser)
    args.data_function = None  # main(data=...) sets it
    try:
        args.data_kwargs = optim.parse_kwargs(args.data_args)
    except optim.OptimizerError as e:
        parser.error(f"--data-args: {e}")
    if args.tolerance is None:
        args.tolerance = default_tolerance(plan.precision)
    if not args.tolerance >= 0 or args.tolerance == float("inf"):
        parser.error(f"--tolerance must be a non-negative number, got {args.tolerance}")
    if not args.timeout > 0 or args.timeout == float("inf"):
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        parser.error(f"--json {args.json}: no such directory")
    if args.reset_optimizer and not args.resume:
        parser.error("--reset-optimizer goes with --resume")
    problem = output_problem(args)
    if problem:
        parser.error(problem)
    return args


def output_problem(args: argparse.Namespace) -> str | None:
    """Why an output path cannot be written (checked before any work), or None: the folders of
    `--save` and `--profile` are created and written to, the files of `--json` and
    `--saved-bytes` must be writable."""
    for flag, folder in (("--save", args.save), ("--profile", args.profile)):
        if folder is None:
            continue
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as e:
            return f"{flag} {folder}: cannot write there ({e.strerror or e})"
    for flag, path in (("--json", args.json), ("--saved-bytes", args.saved_bytes)):
        problem = file_problem(flag, path)
        if problem:
            return problem
    return None


def file_problem(flag: str, path: str | None) -> str | None:
    """Why output file `path` of `flag` cannot be written, or None."""
    if path is None:
        return None
    if os.path.isdir(path):
        return f"{flag} {path}: is a folder"
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        return f"{flag} {path}: no such directory"
    try:
        with tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(path))):
            pass
    except OSError as e:
        return f"{flag} {path}: cannot write there ({e.strerror or e})"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{flag} {path}: not writable"
    return None
