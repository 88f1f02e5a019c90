"""The training loop of one rank: setup, steps, optimizer, checks, timing, save and resume
(`train.main` runs it) around the Python API's model (`module.DistributedModel`), whose
`train_step` is the step: the plan's forward and backward, a pipeline's schedule, accumulation,
the gradient sync."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from unityc.runtime import checkpoint, optim
from unityc.runtime.allocator import keep_freed_memory
from unityc.runtime.check import NOISE_FLOOR, Reference, Verdict, assemble, copies_differ, largest, part_of
from unityc.runtime.data import Batches, load_data_function
from unityc.runtime.factory import forward_argument_names
from unityc.runtime.faults import RunError
from unityc.runtime.module import DistributedModel, Forward, PlanMismatch
from unityc.runtime.parts import stored_key
from unityc.runtime.plan import Layout, Plan
from unityc.runtime.precision import autocast, condition_factor
from unityc.runtime.progress import Progress, profiled
from unityc.runtime.saved import SavedBytes
from unityc.runtime.saved import write as write_saved
from unityc.runtime.signals import Interrupted, Interrupts
from unityc.runtime.signals import name as signal_name
from unityc.runtime.sources import Build, load_reference, local_data
from unityc.runtime.watch import Heartbeat

__all__ = ["Forward", "Trainer"]


class Trainer:
    """One rank's training run: its pieces, optimizer, gradient sync, and (rank 0) reference.
    The step itself is the Python API's (`module.DistributedModel.train_step`, with its
    gradient sync, ZeRO and pipeline schedule, and its `clip_grad_norm_`): a generated program
    is a loop around the same model a user's loop trains."""

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
        keep_freed_memory()  # no page faults for the step's tensors, step after step
        self.heartbeat = heartbeat
        self.interrupts: Interrupts | None = None  # `main` sets them
        self.on_step: Callable[[int], None] | None = None  # `main` sets it: called after each step
        self.outputs: list[Any] = []
        self.lr: float | None = None  # the learning rate of the last step
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.agree(
            self.world == plan.world_size,
            f"the plan needs {plan.world_size} processes, torchrun started {self.world}",
        )
        if args.check and device.type == "cuda":  # fp32 comparisons: no TF32 on either side
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        float_dtype = torch.float64 if args.float64 else None
        self.float_dtype = float_dtype
        # bf16-mixed: each forward under autocast (a float64 run computes everything in float64)
        self.autocast = lambda: autocast(plan.precision, device, enabled=float_dtype is None)
        loaded = load_reference(plan.model, build)
        spec: optim.OptimizerSpec = args.optim
        spec.check_plan(plan.weights.values())
        try:
            self.model = DistributedModel(
                plan, forward, loaded.module, device, args.timeout, args.bucket_mb,
                overlap=not args.no_overlap, float_dtype=float_dtype, check=args.check,
            )  # fmt: skip
        except PlanMismatch as e:
            raise RunError(str(e)) from None
        self.model.where = self.at
        self.comm, self.ctx, self.zero = self.model.comm, self.model.ctx, self.model.zero
        self.weights = self.model.pieces
        self.sizes = self.model.sizes  # where a checkpoint puts the parts
        self.data = local_data(plan, self.rank, loaded.inputs, device, float_dtype)
        # pieces, or ZeRO shards; no frozen weight
        self.params: list[torch.Tensor] = list(self.model.parameters())
        self.optimizer = spec.build(self.params)
        self.persistent = [*self.weights.values(), *self.params, *self.zero.held_bf16()]
        """What the program holds between steps (weights, ZeRO shards, bf16 pieces): never
        activations, so no saved-bytes counter counts it."""
        self.saved = SavedBytes.of(self.persistent) if args.saved_bytes else None
        """--saved-bytes: what each forward leaves saved for backward (`saved.py`)."""
        if self.saved is not None:
            self.model.count_saved(self.saved)
        self.start_step = 0
        initial = self.initial = self.initial_checkpoint()
        if initial:
            held, flats = self.zero.held()
            with_state = args.resume and not args.reset_optimizer
            state = self.optimizer if with_state else None
            step = checkpoint.load(initial, held, plan.weights, self.rank, state, self.sizes, flats)
            self.model.after_step()  # ZeRO-1/2: the whole pieces from the loaded shards
            self.start_step = step if args.resume else 0
            self.agree(
                self.start_step < args.steps,
                f"--resume {args.resume}: the checkpoint is at step {self.start_step}, "
                f"--steps {args.steps} asks for no more",
            )
        self.scheduler = spec.scheduler(self.optimizer, self.start_step)
        self.checked_grads: dict[str, torch.Tensor | None] = {}
        self.sync = self.model.sync
        function = args.data_function or (load_data_function(args.data) if args.data else None)
        self.batches: Batches | None = None
        if function is not None:
            names = forward_argument_names(loaded.module, None, plan.model.name)
            names += [k for k in plan.inputs if k not in names]
            where = (self.rank, self.world, self.start_step)
            self.batches = Batches(function, args.data_kwargs, plan.inputs, names, *where, plan.bounds)
        self.reference: Reference | None = None
        if args.check:
            self.reference = self._reference(
                loaded.module, loaded.inputs, spec, initial if args.resume else None
            )
        self.keys = list(plan.weights)
        self.memory_reported = False
        self.layouts = [plan.weights[k] for k in self.keys]
        self.stop = min(args.steps, args.stop_after or args.steps)
        self.progress = Progress(plan, args.log_every, self.stop)

    def initial_checkpoint(self) -> str | None:
        """The checkpoint of --resume or --init (a --save folder: its newest complete step),
        its record checked against this run's options (CheckpointError naming a difference).
        --init takes the weights only (a fine-tuning start: a fresh optimizer at step 0), so the
        optimizer, learning rate and schedule it was saved with are not compared."""
        args = self.args
        given = args.resume or args.init
        if not given:
            return None
        path = checkpoint.resolve(given)
        if args.resume and not args.reset_optimizer:
            saved: dict[str, Any] = checkpoint.recorded(path).get("optimizer") or {}
            ours = self.options()["optimizer"]
            differ = [k for k in ours if k in saved and saved[k] != ours[k]]
            if differ:
                what = "; ".join(f"{k} {saved[k]!r} there, {ours[k]!r} here" for k in differ)
                raise checkpoint.CheckpointError(
                    f"--resume {given}: {path} was saved with other optimizer settings ({what}); "
                    "pass the same ones, or --reset-optimizer to start a fresh optimizer on purpose"
                )
        return str(path)

    def options(self) -> dict[str, Any]:
        """What a checkpoint records of this run (and a resumed run compares): the optimizer,
        learning rate and schedule (the step count only where the schedule depends on it)."""
        spec: optim.OptimizerSpec = self.args.optim
        recorded: dict[str, Any] = {
            "name": spec.cls.__name__,
            "lr": spec.lr,
            "arguments": repr(dict(spec.kwargs)),
            "clip_grad_norm": spec.clip_grad_norm,
            "schedule": spec.schedule,
            "warmup_steps": spec.warmup_steps,
        }
        if spec.schedule != "constant":
            recorded.update(min_ratio=spec.min_ratio, steps=spec.total_steps)
        plan = {"source": self.plan.source, "machine": self.plan.machine, "world_size": self.world}
        return {"optimizer": recorded, "plan": plan}

    def _reference(
        self,
        module: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        spec: optim.OptimizerSpec,
        resume: str | None,
    ) -> Reference | None:
        """Rank 0's single-device model and optimizer (others: None); resumed, its optimizer state
        is read from the checkpoint too (a collective)."""
        device, float_dtype = self.device, self.float_dtype
        module = module.to(device, float_dtype) if float_dtype else module.to(device)
        optimizer = spec.build([p for p in module.parameters() if p.requires_grad])  # as the plan's
        if resume:
            stored = {stored_key(k) for k in self.plan.weights}
            params = {k: p for k, p in module.named_parameters() if k in stored and self.rank == 0}
            whole = {
                k: Layout(tuple(p.shape), "float32", (1,) * p.dim(), pieces={0: (0,) * p.dim() + (0, 0)})
                for k, p in params.items()
            }
            state = optimizer if self.rank == 0 and not self.args.reset_optimizer else None
            checkpoint.load(resume, params, whole, self.rank, state)
        if self.rank != 0:
            return None
        inputs = {
            k: v.to(device, float_dtype or v.dtype) if v.is_floating_point() else v.to(device)
            for k, v in inputs.items()
        }
        reference = Reference(
            module,
            inputs,
            optimizer,
            spec.clip_grad_norm,
            spec.scheduler(optimizer, self.start_step),
            self.autocast,
        )
        # a float64 twin measures how far the reference (fp32, or bf16 under autocast) itself is
        # from exact (check.allowed_errors)
        return reference.with_exact() if float_dtype is None else reference

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
                f"{self.world} ranks, {self.backend} on {self.device.type}, {args.optim.describe()}"
                + (", float64" if args.float64 else "")
                + (
                    f", {self.plan.precision} (autocast)"
                    if self.plan.precision != "fp32" and not args.float64
                    else ""
                )
                + (f", resumed at step {self.start_step}" if self.start_step else "")
                + (f", weights from {self.initial} (--init: a fresh optimizer)" if args.init else ""),
                flush=True,
            )
        times: list[float] = []
        with profiled(args.profile, self.rank, self.device):
            for step in range(self.start_step, self.stop):
                self.stop_if_interrupted(step)
                times.append(self.run_step(step))
        self.at("the end of the run")
        if self.saved is not None:
            write_saved(self.saved, args.saved_bytes, self.rank, self.world)
        if args.check_copies:
            differ = copies_differ(self.keys, self.layouts, self.weight_pieces(), self.rank, self.device)
            self.agree(differ is None, f"copies differ after {args.steps} step(s): {differ}")
            if self.rank == 0:
                print(f"copies equal after {args.steps} step(s)", flush=True)
        self.report_timing(times)
        if args.check and self.rank == 0:
            print(
                f"check passed: {self.stop - self.start_step} step(s) "
                f"within relative error {args.tolerance:.0e}",
                flush=True,
            )
        return 0

    def run_step(self, step: int) -> float:
        """One step with its data, check, progress line and checkpoint; returns its seconds."""
        args = self.args
        self.at(f"step {step + 1}: start")
        if self.batches is not None:
            self.at(f"step {step + 1}: data")
            for key, piece in self.batches.next().items():
                dtype = self.float_dtype if self.float_dtype and piece.is_floating_point() else piece.dtype
                self.data[key] = piece.to(self.device, dtype)
        before = self.assemble(self.layouts, self.weight_pieces()) if args.check else None
        if args.check and self.batches is not None:
            self._reference_inputs()
        self._sync_device()
        dist.barrier()
        if self.saved is not None:
            self.saved.begin_step()
        start = time.perf_counter()
        outputs, grads = self.step(step)
        self.outputs = outputs  # this rank's pieces of the step's outputs (`on_step` may read them)
        self._sync_device()
        seconds = time.perf_counter() - start
        self.progress.add(seconds)
        self.at(f"step {step + 1}: {'check' if args.check else 'after the step'}")
        if args.check:
            self.check_step(step, outputs, grads, before)
        elif self.progress.due(step, self.start_step):
            self.report_loss(step, outputs[0])
        self.zero.zero_grad()
        if args.save and (step + 1 == self.stop or (args.save_every and (step + 1) % args.save_every == 0)):
            self.save(step + 1)
        if self.on_step is not None:
            self.on_step(step + 1)
        return seconds

    def save(self, steps: int) -> str:
        """A collective: the checkpoint after `steps` steps, DIR/step-<steps> of --save."""
        self.at(f"step {steps}: saving a checkpoint")
        path = os.path.join(self.args.save, f"step-{steps}")
        held, flats = self.zero.held()
        checkpoint.save(
            path, steps, held, self.plan.weights, self.rank, self.optimizer, self.sizes, flats, self.options()
        )
        if self.rank == 0:
            print(f"saved {path}", flush=True)
        return path

    def stop_if_interrupted(self, step: int) -> None:
        """A collective before step `step` (0-based): Interrupted on every rank if any received
        SIGINT or SIGTERM, after saving the steps done (with --save, unless saved already)."""
        if self.interrupts is None:
            return
        self.at(f"step {step + 1}: start")
        signum = self.interrupts.agreed(self.device)
        if not signum:
            return
        done = f"after step {step}" if step else "before the first step"
        saved = ""
        if self.args.save and step > self.start_step:
            path = os.path.join(self.args.save, f"step-{step}")
            if not (step == self.stop or (self.args.save_every and step % self.args.save_every == 0)):
                path = self.save(step)
            saved = f"; saved {path}"
        raise Interrupted(signum, f"stopped by {signal_name(signum)} {done}{saved}")

    def _reference_inputs(self) -> None:
        """The reference's batch: the plan's pieces of this step's batch, assembled (collective)."""
        layouts = list(self.plan.inputs.values())
        whole = self.assemble(layouts, [self.data.get(k) for k in self.plan.inputs])
        if self.reference is None or whole is None:
            return
        for key, value, layout in zip(self.plan.inputs, whole, layouts, strict=True):
            dtype = (
                self.float_dtype or layout.torch_dtype
                if layout.torch_dtype.is_floating_point
                else layout.torch_dtype
            )
            self.reference.inputs[key] = value.to(self.device, dtype)

    def step(self, step: int) -> tuple[list[Any], list[torch.Tensor | None]]:
        """Forward and backward (the token chain orders every rank's collectives; a pipelined
        plan's schedule; with gradient accumulation, `Plan.accumulation` = k micro-batches, the
        loss seeded with 1/k and the sync armed for the last), the gradient sync of weight
        copies (`DistributedModel.train_step`), then the optimizer step. Returns the outputs and
        the synchronized gradients."""
        return self.model.train_step(self.data, step), self.update(step)

    def update(self, step: int) -> list[torch.Tensor | None]:
        """After the step's backward and gradient sync: clipping and the optimizer step; returns
        the synchronized gradients."""
        grads = [p.grad for p in self.params]
        if self.args.check:  # --check compares the summed gradients before clipping and the update
            whole = self.zero.whole_grads()
            self.checked_grads = {k: None if g is None else g.clone() for k, g in whole.items()}
        spec: optim.OptimizerSpec = self.args.optim
        if spec.clip_grad_norm is not None:
            if self.args.check:
                grads = [None if g is None else g.clone() for g in grads]
            self.at(f"step {step + 1}: gradient norm")
            # over what the optimizer steps: ZeRO-2/3's shards hold their weights' gradients
            self.norm = float(self.model.clip_grad_norm_(spec.clip_grad_norm))
        self.lr = self.optimizer.param_groups[0]["lr"] if self.optimizer is not None else None
        if self.optimizer is not None:
            self.optimizer.step()
        self.model.after_step()
        if self.scheduler is not None:
            self.scheduler.step()
        return grads

    def _peak_memory(self) -> int | None:
        """On CUDA, the most bytes any rank's tensors held at once this run
        (`torch.cuda.max_memory_allocated`, the largest over ranks); None on CPU."""
        if self.device.type != "cuda":
            return None
        allocated = torch.cuda.max_memory_allocated(self.device)
        peak = torch.tensor([allocated], dtype=torch.int64, device=self.device)
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        return int(peak.item())

    def _sync_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def report_loss(self, step: int, loss: torch.Tensor | None) -> None:
        values = self.assemble(list(self.plan.outputs[:1]), [loss])
        if values is not None:
            print(self.progress.line(step, values[0].item(), self.lr), flush=True)

    def check_step(
        self,
        step: int,
        outputs: list[Any],
        grads: list[torch.Tensor | None],
        before: list[torch.Tensor] | None,
    ) -> None:
        """Collective: every rank assembles; rank 0 compares (see `check.py`); all share the verdict."""
        local_grads = self.checked_grads  # taken in `update`, before clipping
        memory = self.memory_problem()
        got_outputs = self.assemble(list(self.plan.outputs), outputs)
        got_grads = self.assemble(self.layouts, [local_grads.get(k) for k in self.keys])
        got_weights = self.assemble(self.layouts, self.weight_pieces())
        computed = self.computed_gradients(local_grads)
        failure = (
            copies_differ(self.keys, self.layouts, self.weight_pieces(), self.rank, self.device) or memory
        )
        if self.rank == 0:
            assert self.reference is not None and before is not None
            assert got_outputs is not None and got_grads is not None and got_weights is not None
            failure = failure or self._compare(step, got_outputs, got_grads, got_weights, before, computed)
        failure = self.from_rank0(failure)  # every rank names the mismatch rank 0 found
        self.agree(failure is None, f"check failed at step {step + 1}: {failure}")

    def computed_gradients(self, local: Mapping[str, torch.Tensor | None]) -> list[bool]:
        """Collective: per weight key, whether any rank computed a gradient of it."""
        flags = torch.tensor(
            [local.get(k) is not None for k in self.keys], dtype=torch.int32, device=self.device
        )
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return [bool(f) for f in flags.tolist()]

    def from_rank0(self, text: str | None) -> str | None:
        """Collective: rank 0's `text` on every rank."""
        box = [text]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]

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
        computed: list[bool],
    ) -> str | None:
        reference = self.reference
        assert reference is not None
        reference.load(dict(zip(self.keys, before, strict=True)))
        expected_outputs, expected_grads = reference.gradients()
        exact_outputs: list[Any] = [None] * len(expected_outputs)
        exact_grads: dict[str, torch.Tensor | None] = {}
        if reference.exact is not None:
            exact_outputs, exact_grads = reference.exact.gradients()
        precision = self.plan.precision
        verdict = Verdict(self.args.tolerance, condition_factor(precision), precision)
        verdict.compare("loss", "loss", got_outputs[0], expected_outputs[0], exact=exact_outputs[0])
        for i, (got, expected) in enumerate(zip(got_outputs[1:], expected_outputs[1:], strict=False)):
            verdict.compare("outputs", f"output {i + 1}", got, expected, exact=exact_outputs[i + 1])
        floor = NOISE_FLOOR * largest([part_of(expected_grads, k) for k in self.keys])
        for key, got, made in zip(self.keys, got_grads, computed, strict=True):
            want, exact = part_of(expected_grads, key), part_of(exact_grads, key)
            verdict.compare("gradients", f"gradient of '{key}'", got, want, floor, exact, made)
        trained = [reference.trains(k) for k in self.keys]
        reference.update({k: g for k, g, t in zip(self.keys, got_grads, trained, strict=True) if t})
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
        peak = self._peak_memory()
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
        if peak is not None:
            result["peak_memory_bytes"] = peak
        note = " (the --check work runs after the clock stops)" if self.args.check else ""
        print(
            f"timing: {result['ms_per_iteration']:.2f} ms/iteration (median {result['median_ms']:.2f}, "
            f"min {result['min_ms']:.2f}) over {len(timed)} step(s) after {warmup} warm-up, "
            f"{result['samples_per_s']:.1f} samples/s{note}",
            flush=True,
        )
        if peak is not None:
            print(f"peak memory: {peak / 2**20:.1f} MiB allocated on the fullest rank (CUDA)", flush=True)
        sync = self.sync
        if sync.total:
            print(
                f"gradient buckets (rank 0): {sync.buckets} per step, {sync.early} of {sync.total} "
                f"started during the backward{'' if sync.overlap else ' (--no-overlap)'}",
                flush=True,
            )
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump(result, f, indent=2)
