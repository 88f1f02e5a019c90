"""unityc-train: search (or take) a plan, generate its program and train it under torch
elastic, re-planning when devices are lost or come back. One launcher per node:

    unityc-train model.mlir --machine cpu:4 --save ckpt --nnodes 1:2 --nproc-per-node 2 \\
        --rdzv-endpoint HOST:PORT --rdzv-id JOB -- --steps 20 --save-every 1 --data mod:batches

Everything after the launcher's own flags is the program's (`--steps`, `--data`, `--optimizer`,
`--timeout`, ...: see docs/running.md). The torch elastic agent runs in this process (so a node
whose launcher is gone loses its workers too, `runtime/watch.py`), with a c10d rendezvous of
MIN to MAX nodes; each attempt's workers are `unityc.tools.elastic`, which plans for the world
the rendezvous formed (`DIR/plans` caches one plan per world size) and resumes from the newest
checkpoint in DIR. `--machine` describes the whole job (MAX nodes); the plan for it is made here
before the agent starts, and `--plan-ahead` searches the plans for fewer nodes too, so a lost
node costs no search.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unityc.dialects.source import LocatedError
from unityc.tools.elastic import (
    DEFAULT_SEARCH_S,
    SEARCH,
    CachedPlan,
    ElasticError,
    PlanCache,
    devices_of,
    machine_for,
    planner_pass,
)

RDZV_CONF = (
    "join_timeout=600,last_call_timeout={last_call:g},close_timeout=10,keep_alive_interval=2,"
    "keep_alive_max_attempt=3"
)
"""Nodes wait up to 10 minutes for the first MIN, then `--rdzv-last-call` seconds for more; a
node whose agent sent no heartbeat for 6 s is gone (torch's default: 15 s)."""


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="unityc-train",
        description="Train MODEL.mlir (an imported graph) on --machine under torch elastic: the plan is "
        "searched (or --plan), its program generated and run by one launcher per node; when devices are "
        "lost or return, the machine that is left gets its own plan and training resumes from the newest "
        "checkpoint in --save, with the same global batch, optimizer state, schedule and data order. "
        "Arguments after the launcher's own (or after --) go to the program (--steps, --data, ...).",
    )
    parser.add_argument("model", type=Path, help="the model graph (unityc-import's output)")
    parser.add_argument(
        "--machine", required=True, help="the whole job's machine, a preset (cpu:4, dgx-a100:2)"
    )
    parser.add_argument(
        "--save", required=True, type=Path, help="checkpoints, plans and the run's log (shared)"
    )
    parser.add_argument("--plan", type=Path, help="the plan for --machine (default: searched)")
    parser.add_argument("--nnodes", default="1", help="MIN:MAX nodes (or N), as torchrun's (default 1)")
    parser.add_argument("--nproc-per-node", type=int, default=1, help="processes per node (default 1)")
    parser.add_argument("--rdzv-endpoint", default="127.0.0.1:29400", help="HOST:PORT of the rendezvous")
    parser.add_argument("--rdzv-id", default="unityc", help="the job's id (the same on every node)")
    parser.add_argument(
        "--max-restarts", type=int, default=10, help="restarts of a node's workers (faults, resizes)"
    )
    parser.add_argument(
        "--search-time-limit",
        type=float,
        default=DEFAULT_SEARCH_S,
        metavar="S",
        help=f"seconds a plan's search may take (default {DEFAULT_SEARCH_S:g})",
    )
    parser.add_argument(
        "--planner",
        default=SEARCH,
        metavar="PASS",
        help="how each world's plan is made: unity-search (the default, under --search-time-limit) or a "
        "baseline pass as unityc-opt -p takes it, without machine= (data-parallel, 'zero{stage=3}', "
        "megatron, megatron-lm, gpipe, ...); --plan, when given, is the whole machine's plan",
    )
    parser.add_argument(
        "--plan-ahead", action="store_true", help="also search the plans for MIN..MAX-1 nodes before training"
    )
    parser.add_argument(
        "--rdzv-last-call",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds a rendezvous waits for more nodes once MIN have joined (default 5): the nodes of a "
        "job's start must join within it, and a re-plan after a lost node waits it out",
    )
    parser.add_argument("--log-dir", help="torchrun's --log-dir (each rank's output in a file)")
    args, training = parser.parse_known_args(argv)
    training = [t for t in training if t != "--"]
    low, _, high = args.nnodes.partition(":")
    if not low.isdigit() or not (high or low).isdigit() or not 1 <= int(low) <= int(high or low):
        parser.error(f"--nnodes {args.nnodes}: expected N or MIN:MAX with 1 <= MIN <= MAX")
    args.min_nodes, args.max_nodes = int(low), int(high or low)
    if args.nproc_per_node < 1:
        parser.error("--nproc-per-node must be at least 1")
    if not args.model.is_file():
        parser.error(f"{args.model}: no such file")
    if args.plan is not None and not args.plan.is_file():
        parser.error(f"--plan {args.plan}: no such file")
    if not args.search_time_limit > 0:
        parser.error("--search-time-limit must be positive")
    try:
        planner_pass(args.planner, args.machine, args.search_time_limit)
    except ValueError as e:
        parser.error(str(e))
    try:
        args.save.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=args.save):
            pass
    except OSError as e:
        parser.error(f"--save {args.save}: cannot write there ({e.strerror or e})")
    for flag in ("--save", "--resume", "--init", "--nproc_per_node"):
        if flag in training:
            parser.error(f"{flag}: unityc-train passes it to the program itself")
    return args, training


def prepare(args: argparse.Namespace) -> CachedPlan:
    """The plan for the whole machine (given or searched) and, with --plan-ahead, for fewer nodes."""
    world = args.max_nodes * args.nproc_per_node
    if devices_of(args.machine) != world:
        raise ElasticError(
            f"--machine {args.machine} has {devices_of(args.machine)} devices, --nnodes {args.nnodes} x "
            f"--nproc-per-node {args.nproc_per_node} make {world}"
        )
    cache = PlanCache(
        args.save / "plans",
        args.model,
        args.machine,
        args.nproc_per_node,
        args.search_time_limit,
        args.planner,
    )
    if args.plan is not None:
        given = cache.give(args.plan)
        if given.world != world:
            raise ElasticError(f"--plan {args.plan}: made for {given.machine}, the job is {args.machine}")
    worlds = range(args.min_nodes if args.plan_ahead else args.max_nodes, args.max_nodes + 1)
    for nodes in reversed(worlds):
        n = nodes * args.nproc_per_node
        machine_for(args.machine, n, args.nproc_per_node)  # a machine that cannot shrink fails now
        cached = cache.get(n)
        print(
            f"unityc-train: plan for {n} rank(s): {cached.plan} ({cached.summary}; {cached.origin})",
            flush=True,
        )
    return cache.get(world)


def check_training(cached: CachedPlan, training: list[str], save: Path) -> None:
    """The program's flags, checked here (a usage error, exit 2) rather than by workers that
    torch elastic would restart on it until --max-restarts ran out."""
    from unityc.runtime.flags import parse_args as program_flags

    program = runpy.run_path(str(cached.program), run_name="unityc_elastic_program")
    program_flags(program["PLAN"], [*training, "--save", str(save)])


def torchrun_arguments(args: argparse.Namespace, training: list[str]) -> list[str]:
    launch = ["--nnodes", args.nnodes, "--nproc-per-node", str(args.nproc_per_node)]
    launch += ["--rdzv-backend", "c10d", "--rdzv-endpoint", args.rdzv_endpoint, "--rdzv-id", args.rdzv_id]
    launch += ["--rdzv-conf", RDZV_CONF.format(last_call=args.rdzv_last_call)]
    launch += ["--max-restarts", str(args.max_restarts), "--monitor-interval", "0.5"]
    if args.log_dir:
        launch += ["--log-dir", args.log_dir, "--redirects", "3"]
    worker = [str(args.model), "--machine", args.machine, "--save", str(args.save)]
    worker += [
        "--nproc-per-node",
        str(args.nproc_per_node),
        "--search-time-limit",
        str(args.search_time_limit),
        "--planner",
        args.planner,
    ]
    return [*launch, "-m", "unityc.tools.elastic", *worker, "--", *training]


def continue_stopped_workers() -> None:
    """torch elastic stops a node's workers with SIGTERM and SIGKILLs those left 30 s later; a
    worker stopped with SIGSTOP takes no signal until it is continued, so it held every restart
    for those 30 s. Each worker's process group is sent SIGCONT after its signal: a stopped worker
    then takes SIGTERM at once (its peers are gone: it exits), a hung one is killed as before."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

    handler = subprocess_handler.SubprocessHandler
    close = handler.close

    def close_and_continue(self: Any, death_sig: signal.Signals | None = None) -> None:
        close(self, death_sig)
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGCONT)

    handler.close = close_and_continue  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> int:
    args, training = parse_args(argv)
    try:
        cached = prepare(args)
    except (ElasticError, ValueError, OSError, LocatedError) as e:
        print(f"unityc-train: error: {e}", file=sys.stderr)
        return 1
    check_training(cached, training, args.save)
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args as torchrun_args
    from torch.distributed.run import run

    # Each round of the rendezvous gives its rank 0 worker the job's store: with the agents'
    # shared store (torch's default), a node that joins later waits forever for a store address
    # that the rank 0 agent wrote for its first round only (torch 2.13, dynamic_rendezvous.py).
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    continue_stopped_workers()
    try:
        run(torchrun_args(torchrun_arguments(args, training)))
    except ChildFailedError as e:
        print(
            f"unityc-train: error: the workers failed after every restart:\n{e.format_msg()}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
