"""The training loop of a generated program: setup, steps, gradient sync, optimizer, timing.

    torchrun --standalone --nproc_per_node 2 train.py [--steps N] [--optimizer sgd|adam] [--check]

NCCL on CUDA when every local rank has a GPU, gloo on CPU otherwise. Every rank loads the
reference model (`sources.load_reference`, the spec and seed the plan records) and keeps its own
pieces of the weights and of the batch; the batch is the model's seeded example inputs, the same
every step (synthetic data, identical to what the reference run uses).

Every collective waits at most `--timeout` seconds (default 600); a rank whose collective times
out names the rank at fault from the heartbeats (`watch.py`) and exits 1, as does a rank whose
peer died. Bad flags are usage errors (exit 2) before torchrun is even needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from unityc.runtime.check import NOISE_FLOOR, Reference, Verdict, assemble, copies_differ, largest
from unityc.runtime.comm import Communicator
from unityc.runtime.context import Context
from unityc.runtime.grads import GradientSync
from unityc.runtime.plan import Layout, Plan
from unityc.runtime.sources import Build, SourceError, load_reference, local_data, local_weights
from unityc.runtime.watch import DEFAULT_TIMEOUT_S, Heartbeat, collective_failure, timeout
from unityc.runtime.zero import Zero

Forward = Callable[[Context, dict[str, torch.Tensor], dict[str, torch.Tensor]], Sequence[Any]]


class RunError(Exception):
    """A problem that stops the run on every rank with one message."""


def parse_args(plan: Plan, argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=f"Train {plan.model.name} ({plan.model.config}) with the plan {plan.source} "
        f"on {plan.machine}: run with torchrun --nproc_per_node {plan.world_size}."
    )
    parser.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of the timing (default 2)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd", help="optimizer (default sgd)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare loss, outputs, gradients and updated weights with single-device training "
        "after every step (dropout off); exit 1 naming the first mismatch",
    )
    parser.add_argument("--tolerance", type=float, default=1e-4, help="relative error allowed by --check")
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
    parser.add_argument("--json", metavar="FILE", help="write the timing (rank 0) to FILE as JSON")
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
    if not args.tolerance >= 0 or args.tolerance == float("inf"):
        parser.error(f"--tolerance must be a non-negative number, got {args.tolerance}")
    if not args.timeout > 0 or args.timeout == float("inf"):
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        parser.error(f"--json {args.json}: no such directory")
    return args


def pick_device() -> tuple[str, torch.device]:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world:
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def make_optimizer(name: str, params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer | None:
    if not params:
        return None
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr)


def main(plan: Plan, forward: Forward, argv: Sequence[str] | None = None, build: Build | None = None) -> int:
    args = parse_args(plan, argv)
    if "RANK" not in os.environ:
        print(f"error: run with torchrun --standalone --nproc_per_node {plan.world_size} {sys.argv[0]}")
        return 2
    backend, device = pick_device()
    heartbeat = start(backend, args.timeout)
    try:
        trainer = getattr(forward, "trainer", Trainer)  # a pipelined program brings its own
        status = trainer(plan, forward, args, backend, device, heartbeat, build).run()
    except (RunError, SourceError) as e:
        if dist.get_rank() == 0:
            print(f"error: {e}", flush=True)
        status = 1
    except RuntimeError as e:
        fail_collective(heartbeat, e)
    heartbeat.stop()
    dist.barrier()
    dist.destroy_process_group()
    # Skip interpreter teardown: gloo's threads occasionally abort there ("terminate called
    # without an active exception") after a run that succeeded, turning its status into a crash.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def start(backend: str, timeout_s: float) -> Heartbeat:
    """Joins the process group (every collective waits at most `timeout_s`) and starts this
    rank's heartbeat."""
    dist.init_process_group(backend, timeout=timeout(timeout_s))
    return Heartbeat(dist.get_rank(), dist.get_world_size(), timeout_s)


def fail_collective(heartbeat: Heartbeat, error: RuntimeError) -> None:
    """Ends this rank after a collective failed (timed out, or lost its peer), naming the rank
    at fault; other errors propagate. The process group is broken: no barrier, no teardown."""
    if collective_failure(error) is None:
        raise error
    print(f"error: {heartbeat.diagnose(error)}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


class Trainer:
    """One rank's training run: its pieces, optimizer, gradient sync, and (rank 0) reference."""

    def __init__(
        self,
        plan: Plan,
        forward: Forward,
        args: argparse.Namespace,
        backend: str,
        device: torch.device,
        heartbeat: Heartbeat | None = None,
        build: Build | None = None,
    ):
        self.plan, self.forward, self.args, self.backend, self.device = plan, forward, args, backend, device
        self.heartbeat = heartbeat
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.agree(
            self.world == plan.world_size,
            f"the plan needs {plan.world_size} processes, torchrun started {self.world}",
        )
        if args.check and device.type == "cuda":  # fp32 comparisons: no TF32 on either side
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        float_dtype = torch.float64 if args.float64 else None
        wait = timeout(args.timeout)
        self.comm = Communicator(self.rank, self.world, plan.groups, device, float_dtype, wait)
        self.ctx = Context(self.comm, check=args.check, seed=plan.model.seed)
        self.ctx.tables = {
            k: torch.tensor(v, dtype=torch.int64, device=device) for k, v in plan.tables.items()
        }
        loaded = load_reference(plan.model, build)
        self.weights = local_weights(plan, self.rank, loaded.module, device, float_dtype)
        self.data = local_data(plan, self.rank, loaded.inputs, device, float_dtype)
        self.zero = Zero(self.comm, plan, self.weights)  # ZeRO shards (none: plain copies)
        self.params = self.zero.params()
        self.optimizer = make_optimizer(args.optimizer, self.params, args.lr)
        self.sync = GradientSync(self.comm, self.zero.sync_layouts, self.weights)
        self.reference: Reference | None = None
        if args.check and self.rank == 0:
            module = loaded.module.to(device, float_dtype) if float_dtype else loaded.module.to(device)
            inputs = {
                k: v.to(device, float_dtype or v.dtype) if v.is_floating_point() else v.to(device)
                for k, v in loaded.inputs.items()
            }
            optimizer = make_optimizer(args.optimizer, list(module.parameters()), args.lr)
            self.reference = Reference(module, inputs, optimizer)
        loss = plan.outputs[0].pieces.get(self.rank)
        self.seeds_loss = loss is not None and loss[-1] == 0  # copy 0 carries the loss's gradient
        self.keys = list(plan.weights)
        self.memory_reported = False
        self.layouts = [plan.weights[k] for k in self.keys]

    def at(self, where: str) -> None:
        """Says what this rank is doing (named by a peer's collective-timeout message)."""
        if self.heartbeat is not None:
            self.heartbeat.where = where

    # --- collectives on every rank -------------------------------------------------------

    def agree(self, ok: bool, message: str) -> None:
        """Raises RunError on every rank if any rank is not ok (rank 0 prints the message)."""
        flag = torch.tensor([0 if ok else 1], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            raise RunError(message)

    def assemble(self, layouts: list[Layout], pieces: list[torch.Tensor | None]) -> list[torch.Tensor] | None:
        return assemble(layouts, pieces, self.rank, self.device)

    def weight_pieces(self) -> list[torch.Tensor | None]:
        whole = self.zero.whole_weights()
        return [whole.get(k) for k in self.keys]

    # --- the run -------------------------------------------------------------------------

    def run(self) -> int:
        args = self.args
        if self.rank == 0:
            model = self.plan.model
            print(
                f"unityc plan {self.plan.source}: {model.name} ({model.config}) on {self.plan.machine}, "
                f"{self.world} ranks, {self.backend} on {self.device.type}, {args.optimizer} lr {args.lr}"
                + (", float64" if args.float64 else ""),
                flush=True,
            )
        times: list[float] = []
        for step in range(args.steps):
            self.at(f"step {step + 1}: start")
            before = self.assemble(self.layouts, self.weight_pieces()) if args.check else None
            self._sync_device()
            dist.barrier()
            start = time.perf_counter()
            outputs, grads = self.step(step)
            self._sync_device()
            times.append(time.perf_counter() - start)
            self.at(f"step {step + 1}: {'check' if args.check else 'after the step'}")
            if args.check:
                self.check_step(step, outputs, grads, before)
            elif step in (0, args.steps - 1):
                self.report_loss(step, outputs[0])
            self.zero.zero_grad()
        self.at("the end of the run")
        if args.check_copies:
            differ = copies_differ(self.keys, self.layouts, self.weight_pieces(), self.rank, self.device)
            self.agree(differ is None, f"copies differ after {args.steps} step(s): {differ}")
            if self.rank == 0:
                print(f"copies equal after {args.steps} step(s)", flush=True)
        self.report_timing(times)
        if args.check and self.rank == 0:
            print(
                f"check passed: {args.steps} step(s) within relative error {args.tolerance:.0e}", flush=True
            )
        return 0

    def step(self, step: int) -> tuple[list[Any], list[torch.Tensor | None]]:
        """Forward, backward (the token chain orders every rank's collectives), gradient sync of
        weight copies, optimizer step. Returns the outputs and the synchronized gradients."""
        self.ctx.begin_step(step)
        self.at(f"step {step + 1}: forward")
        with self.zero.saving():
            outputs = list(self.forward(self.ctx, self.zero.forward_weights, self.data))
        roots, seeds = [self.ctx.token], [torch.zeros((), device=self.device)]
        loss = outputs[0]
        if self.seeds_loss and loss is not None and loss.requires_grad:
            roots.append(loss)
            seeds.append(torch.ones_like(loss))
        self.at(f"step {step + 1}: backward")
        torch.autograd.backward(roots, seeds)
        return outputs, self.update(step)

    def update(self, step: int) -> list[torch.Tensor | None]:
        """After backward: the gradient sync of weight copies and the optimizer step; returns
        the synchronized gradients."""
        self.at(f"step {step + 1}: gradient sync")
        self.sync.run()
        self.zero.after_sync()
        grads = [p.grad for p in self.params]
        if self.optimizer is not None:
            self.optimizer.step()
        self.zero.after_step()
        return grads

    def _sync_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def report_loss(self, step: int, loss: torch.Tensor | None) -> None:
        values = self.assemble(list(self.plan.outputs[:1]), [loss])
        if values is not None:
            print(f"step {step + 1}: loss {values[0].item():.6f}", flush=True)

    def check_step(
        self,
        step: int,
        outputs: list[Any],
        grads: list[torch.Tensor | None],
        before: list[torch.Tensor] | None,
    ) -> None:
        """Collective: every rank assembles; rank 0 compares (see `check.py`); all share the verdict."""
        local_grads = self.zero.whole_grads()
        memory = self.memory_problem()
        got_outputs = self.assemble(list(self.plan.outputs), outputs)
        got_grads = self.assemble(self.layouts, [local_grads.get(k) for k in self.keys])
        got_weights = self.assemble(self.layouts, self.weight_pieces())
        failure = (
            copies_differ(self.keys, self.layouts, self.weight_pieces(), self.rank, self.device) or memory
        )
        if self.rank == 0:
            assert self.reference is not None and before is not None
            assert got_outputs is not None and got_grads is not None and got_weights is not None
            failure = failure or self._compare(step, got_outputs, got_grads, got_weights, before)
        self.agree(failure is None, f"check failed at step {step + 1}: {failure}")

    def memory_problem(self) -> str | None:
        """Collective: every rank's persistent bytes (weights, gradients, optimizer state) against
        the memory model's prediction the plan carries; rank 0 prints them once."""
        predicted = self.plan.memory.get(self.args.optimizer)
        if predicted is None:
            return None
        table = torch.zeros((self.world, 6), dtype=torch.float64, device=self.device)
        table[self.rank, :3] = torch.tensor(self.zero.persistent_bytes(self.optimizer), dtype=torch.float64)
        table[self.rank, 3:] = torch.tensor(predicted.get(self.rank, (0, 0, 0)), dtype=torch.float64)
        dist.all_reduce(table)
        rows = [tuple(int(v) for v in row) for row in table.tolist()]
        wrong = [r for r, row in enumerate(rows) if row[:3] != row[3:]]
        if self.rank == 0 and not self.memory_reported:
            held = "; ".join(
                f"rank {r}: {row[0]} B weights, {row[1]} B gradients, {row[2]} B optimizer state"
                for r, row in enumerate(rows)
            )
            print(f"persistent bytes: {held} ({'as' if not wrong else 'NOT as'} the memory model predicts)",
                  flush=True)  # fmt: skip
        self.memory_reported = True
        if not wrong:
            return None
        r = wrong[0]
        kept, model = rows[r][:3], rows[r][3:]
        return f"rank {r} keeps (weights, gradients, optimizer) = {kept} B, the memory model predicts {model}"

    def _compare(
        self,
        step: int,
        got_outputs: list[torch.Tensor],
        got_grads: list[torch.Tensor],
        got_weights: list[torch.Tensor],
        before: list[torch.Tensor],
    ) -> str | None:
        reference = self.reference
        assert reference is not None
        reference.load(dict(zip(self.keys, before, strict=True)))
        expected_outputs, expected_grads = reference.gradients()
        verdict = Verdict(self.args.tolerance)
        verdict.compare("loss", "loss", got_outputs[0], expected_outputs[0])
        for i, (got, expected) in enumerate(zip(got_outputs[1:], expected_outputs[1:], strict=False)):
            verdict.compare("outputs", f"output {i + 1}", got, expected)
        floor = NOISE_FLOOR * largest([expected_grads.get(k) for k in self.keys])
        for key, got in zip(self.keys, got_grads, strict=True):
            verdict.compare("gradients", f"gradient of '{key}'", got, expected_grads.get(key), floor)
        reference.update(dict(zip(self.keys, got_grads, strict=True)))
        for key, got in zip(self.keys, got_weights, strict=True):
            verdict.compare("weights", f"'{key}' after the update", got, reference.weight(key))
        loss, wanted = got_outputs[0].item(), expected_outputs[0].item()
        print(f"step {step + 1}: loss {loss:.6f} (reference {wanted:.6f}); {verdict.summary()}", flush=True)
        return verdict.failure

    def report_timing(self, times: list[float]) -> None:
        warmup = min(self.args.warmup, len(times) - 1)
        slowest = torch.tensor(times, dtype=torch.float64, device=self.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a step lasts until its slowest rank is done
        timed = slowest[warmup:].tolist()
        if self.rank != 0:
            return
        mean = statistics.fmean(timed)
        result = {
            "ms_per_iteration": mean * 1e3,
            "median_ms": statistics.median(timed) * 1e3,
            "min_ms": min(timed) * 1e3,
            "samples_per_s": self.plan.samples / mean,
            "steps": len(timed),
            "warmup": warmup,
        }
        note = " (the --check work runs after the clock stops)" if self.args.check else ""
        print(
            f"timing: {result['ms_per_iteration']:.2f} ms/iteration (median {result['median_ms']:.2f}, "
            f"min {result['min_ms']:.2f}) over {len(timed)} step(s) after {warmup} warm-up, "
            f"{result['samples_per_s']:.1f} samples/s{note}",
            flush=True,
        )
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump(result, f, indent=2)
