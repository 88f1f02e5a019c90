"""A plan's program as an `nn.Module` for the user's own training loop (`unityc.distribute`).

    model = DistributedModel(PLAN, forward, module)   # on every rank, after init_process_group
    optimizer = torch.optim.AdamW(model.parameters())  # this rank's pieces, the model's names
    loss = model(**batch)                               # the whole batch; the loss on every rank
    loss.backward()                                     # gradients of weight copies summed here
    model.clip_grad_norm_(1.0)
    optimizer.step()
    optimizer.zero_grad()

What `Trainer` does around a step, done where a user's loop expects it, with the same parts
(`Zero`, `GradientSync`, `Context`, the plan's forward):

* the call takes the whole batch (the same on every rank, as the single-device loop would see
  it), checks it against the plan's inputs (names, shapes, dtypes), cuts this rank's pieces and
  runs the plan's forward under `Zero.saving` and the plan's precision; it returns the loss as
  one scalar on every rank (the sum of copy 0's partial pieces, all-reduced) whose backward
  seeds this rank's loss piece as `Trainer` does (copy 0 with the gradient, other copies with
  zeros) and runs the token chain, so every rank runs every collective's dual;
* the gradient sync of weight copies is armed by the call and finished, with ZeRO's
  reduce-scatters, by a callback at the end of the backward (DDP's `queue_callback`), so the
  gradients are final when `backward()` returns; `no_sync()` skips the all-reduces for
  accumulation (ZeRO-2/3's reduce-scatters still run each backward: their shards accumulate);
* `parameters()` / `named_parameters()` are what the optimizer must update: this rank's pieces,
  or a ZeRO weight's shard, under the plan's weight keys (the model's state_dict keys; a part of
  a packed weight is `key[:, 0:8]`). Any element-wise torch.optim optimizer works (ZeRO shards
  are element ranges); ZeRO-1/2's updated shards are gathered into the pieces at the next call
  (when a shard changed: its version counter);
* `train()` / `eval()`: dropout on or off (the plan's hashed masks, off as under --check);
* `clip_grad_norm_`, `state_dict` / `load_state_dict` (whole tensors in the model's keys),
  `save` / `load` (torch.distributed.checkpoint through `checkpoint.py`, what `--save` and
  `--resume` read and write);
* `step(**batch)`: forward and backward together, as a pipelined plan's schedule or a plan that
  accumulates k micro-batches needs (their forward under grad refuses, naming `step`). It runs
  `train_step` on this rank's pieces, which is also the whole step of a generated program's loop
  (`trainer.Trainer`, which adds data, --check, checkpoints and timing around it): the API and
  the program share one implementation of the step, and one of clipping.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from unityc.runtime import checkpoint
from unityc.runtime.check import assemble
from unityc.runtime.comm import Communicator
from unityc.runtime.context import Context
from unityc.runtime.factory import forward_argument_names
from unityc.runtime.grads import BUCKET_BYTES, GradientSync
from unityc.runtime.optim import clip_factor, global_grad_norm
from unityc.runtime.parts import WeightKey
from unityc.runtime.pipeline import Pipelined, StageModule, run_schedule, stage_schedule
from unityc.runtime.plan import Plan
from unityc.runtime.precision import autocast, step_region
from unityc.runtime.saved import SavedBytes
from unityc.runtime.sources import local_constants, local_weights, part_sizes
from unityc.runtime.zero import Zero

__all__ = ["DistributedModel", "Forward", "PlanMismatch", "accumulated_outputs"]

Forward = Callable[[Context, Mapping[str, torch.Tensor], dict[str, torch.Tensor]], Sequence[Any]]
"""A generated program's `forward(ctx, weights, data)`: this rank's pieces of the outputs."""


def accumulated_outputs(parts: list[list[Any]]) -> list[Any]:
    """This rank's pieces of a step's outputs from its micro-batches' (`parts`): the loss the mean
    of theirs, every other output theirs concatenated along dim 0 (micro-batch m is chunk m of
    each piece); None where this rank holds no piece."""
    out: list[Any] = []
    for i, pieces in enumerate(zip(*parts, strict=True)):
        if any(p is None for p in pieces):
            out.append(None)
        elif i == 0:
            out.append(torch.stack([p.detach() for p in pieces]).mean(0))
        else:
            out.append(torch.cat([p.detach() for p in pieces], dim=0))
    return out


def microbatches(plan: Plan, data: dict[str, torch.Tensor], k: int) -> list[dict[str, torch.Tensor]]:
    """This rank's data for each of k micro-batches: chunk m of its piece of every input along
    dim 0 (the plan's verifier checked that k divides every piece's rows); constants whole."""
    chunks: list[dict[str, torch.Tensor]] = [dict(data) for _ in range(k)]
    for key, piece in data.items():
        if key not in plan.inputs:
            continue
        for m, part in enumerate(piece.chunk(k, dim=0)):
            chunks[m][key] = part
    return chunks


class PlanMismatch(ValueError):
    """The model, a batch, the process group or an optimizer does not match the plan (one line)."""


class _Loss(torch.autograd.Function):
    """The whole loss on every rank; its backward seeds this rank's loss piece (`seed`: copy 0
    gets the gradient, other copies zeros, as `Trainer` seeds them), ends the token chain with
    zero, and queues the gradient sync for the end of the backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, value: torch.Tensor, owner: DistributedModel, token: torch.Tensor, piece: torch.Tensor
    ) -> torch.Tensor:
        ctx.owner = owner
        ctx.seed = owner.seeds_loss
        ctx.dtype = piece.dtype
        return value.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        ctx.owner._backward_started()
        piece_grad = (grad if ctx.seed else torch.zeros_like(grad)).to(ctx.dtype)
        return None, None, torch.zeros_like(grad), piece_grad


def _checker(model: weakref.ref[DistributedModel]) -> Callable[..., None]:
    """The optimizer pre-step hook of `model` (every optimizer's: torch has no per-parameter
    one), holding it weakly."""

    def check(optimizer: torch.optim.Optimizer, *_: Any) -> None:
        alive = model()
        if alive is not None:
            alive._check_optimizer(optimizer)

    return check


class DistributedModel(nn.Module):
    """This rank's part of a model under a plan (the plan's `PLAN` and `forward`)."""

    def __init__(
        self,
        plan: Plan,
        forward: Forward,
        module: nn.Module,
        device: torch.device | str | None = None,
        timeout: float = 600.0,
        bucket_mb: float = BUCKET_BYTES / 2**20,
        overlap: bool = True,
        full_outputs: bool = False,
        float_dtype: torch.dtype | None = None,
        check: bool = False,
    ) -> None:
        """`float_dtype` (float64: a generated program's --float64) holds and computes every
        floating tensor in it, autocast off; `check` runs the plan's check mode (dropout off),
        in training too (a generated program's --check)."""
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise PlanMismatch("call torch.distributed.init_process_group() before distributing a model")
        rank, world = dist.get_rank(), dist.get_world_size()
        if world != plan.world_size:
            raise PlanMismatch(
                f"the plan was made for {plan.world_size} processes ({plan.machine}); this process "
                f"group has {world}"
            )
        if device is None:
            device = (
                torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
            )
        self.device = torch.device(device)
        self.plan, self._program_forward, self.rank = plan, forward, rank
        self.full_outputs, self.float_dtype, self.check = full_outputs, float_dtype, check
        wait = timedelta(seconds=timeout)
        self.comm = Communicator(rank, world, plan.groups, self.device, float_dtype, wait)
        self.ctx = Context(self.comm, check=check, seed=plan.model.seed)
        self.ctx.tables = {
            k: torch.tensor(v, dtype=torch.int64, device=self.device) for k, v in plan.tables.items()
        }
        self.pieces = local_weights(plan, rank, module, self.device, float_dtype)
        self.sizes = part_sizes(plan, module)
        self.constants = local_constants(plan, rank, self.device, float_dtype)
        self.zero = Zero(self.comm, plan, self.pieces, bf16=float_dtype is None)
        self.pipelined = forward if isinstance(forward, Pipelined) else None
        """A pipelined plan's program: `step(batch)` runs its schedule (forward and backward)."""
        bucket = max(1, round(bucket_mb * 2**20))
        overlap = overlap and self.pipelined is None  # a schedule's gradients are whole after it
        self.sync = GradientSync(self.comm, self.zero.sync_layouts, self.pieces, bucket, overlap)
        self.names = forward_argument_names(module, None, type(module).__name__)
        frozen = {k for k, p in module.named_parameters(remove_duplicate=False) if not p.requires_grad}
        self.frozen = {k for k in plan.weights if WeightKey.parse(k).stored in frozen or not plan.trained(k)}
        """Weights of parameters the model does not train (requires_grad false, or frozen in the
        plan): not among `parameters()`, so no optimizer steps them and clipping leaves them out."""
        held, _ = self.zero.held()
        self.held = {k: p for k, p in held.items() if k not in self.frozen}
        """What the optimizer updates, by weight key: pieces, or ZeRO weights' shards."""
        loss = plan.outputs[0].pieces.get(rank)
        self.seeds_loss = loss is not None and loss[-1] == 0
        self.steps = 0
        self.syncing = True
        self.armed = False
        self.saved: SavedBytes | None = None
        """A generated program's --saved-bytes counter (`count_saved`)."""
        self.where: Callable[[str], None] = lambda _: None
        """Told what the step is doing (a generated program's heartbeat)."""
        self.gathered = self._versions()
        self.training = module.training
        self.stages: list[StageModule] = []
        """A pipelined plan: this rank's stages (`pipeline.StageModule`), run by `schedule`."""
        self.schedule: Any = None
        self.is_last = False
        if self.pipelined is not None:
            stages = self.pipelined.stages
            if len(stages) != self.pipelined.pipeline.stages:
                raise PlanMismatch(
                    f"{len(stages)} stage functions for {self.pipelined.pipeline.stages} stages"
                )
            self.stages, self.schedule, self.is_last = stage_schedule(
                self.pipelined, plan, self.ctx, self.zero, self.constants, self._autocast, self.seeds_loss
            )
        self._hook = register_optimizer_step_pre_hook(_checker(weakref.ref(self)))

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The plan's precision around a forward (bf16-mixed: autocast; off in float64)."""
        return autocast(self.plan.precision, self.device, enabled=self.float_dtype is None)

    def count_saved(self, saved: SavedBytes | None) -> None:
        """Counts what each forward (each stage's micro-batch) saves for backward in `saved` (None: stops)."""
        self.saved = saved
        for stage in self.stages:
            stage.saved = saved

    # --- what the optimizer sees ----------------------------------------------------------

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Parameter]]:
        """This rank's pieces (a ZeRO weight's shard) under the plan's weight keys."""
        for key, p in self.held.items():
            yield prefix + key, p  # type: ignore[misc]

    def _versions(self) -> tuple[int, ...]:
        shards = (s.shard._version for s in self.zero.shards.values() if s.full is not None)
        return (*shards, *(m.master._version for m in self.zero.masters.values()))

    def _gather_if_stepped(self) -> None:
        """ZeRO-1/2: an optimizer updated the shards since they were gathered: gather them.
        ZeRO-1: a shard whose gradient the optimizer's `zero_grad` dropped drops its whole
        piece's gradient too (the piece is no parameter the optimizer sees)."""
        if self._versions() != self.gathered:
            self.zero.after_step()
            self.gathered = self._versions()
        for shard in self.zero.shards.values():
            if shard.full is not None and shard.shard.grad is None:
                shard.full.grad = None
        for master in self.zero.masters.values():  # a bf16 piece's master, likewise
            if master.master.grad is None:
                master.full.grad = None

    # --- the call -------------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The plan's forward on the whole batch `args`, `kwargs` (the model's arguments): what
        the model returns, the loss first as a scalar on every rank (see the module docstring).
        A pipelined plan or one that accumulates micro-batches trains through `step` (its
        schedule owns the backward); called under `torch.no_grad()` it evaluates."""
        grad = torch.is_grad_enabled()
        if (self.pipelined is not None or self.plan.accumulation > 1) and grad:
            what = (
                "is pipelined"
                if self.pipelined is not None
                else f"accumulates {self.plan.accumulation} micro-batches per step"
            )
            raise PlanMismatch(
                f"the plan {what}: its step runs forward and backward together; call "
                "model.step(**batch) in place of model(**batch) and loss.backward() (or call "
                "the model under torch.no_grad() to evaluate)"
            )
        batch = self._batch(args, kwargs)
        if not grad:
            return self._returned(self.train_step(batch, backward=False))
        self._gather_if_stepped()
        self._begin(None, counted=True)
        if self.syncing:
            self.sync.begin()
        self.armed = True
        outputs = self._forward_pieces(batch)
        piece = outputs[0]
        value = self.loss_of(piece)
        if piece is None or not piece.requires_grad:
            piece = torch.zeros((), device=self.device)
        return self._returned(outputs, _Loss.apply(value, self, self.ctx.token, piece))

    def step(self, *args: Any, **kwargs: Any) -> Any:
        """Forward and backward of the whole batch `args`, `kwargs`, over every micro-batch of a
        pipelined plan's schedule or of an accumulating plan, then the gradient sync of weight
        copies (ZeRO's reduce-scatters included): returns what the model returns, the loss
        (detached: its backward ran) on every rank first. Then clip and step the optimizer as
        usual. This is the step a generated program's loop runs (`train_step`)."""
        return self._returned(self.train_step(self._batch(args, kwargs)))

    def train_step(
        self, data: dict[str, torch.Tensor], step: int | None = None, backward: bool = True
    ) -> list[Any]:
        """One step on this rank's pieces `data` of the batch (inputs and constants): forward and
        backward (a pipeline's schedule; k accumulated micro-batches, the loss seeded with 1/k
        and the gradient sync armed for the last), then the gradient sync of weight copies and
        ZeRO's reduce-scatters. Returns this rank's pieces of the outputs (the loss the batch
        mean's). `step` numbers the dropout masks (default: this model's count of calls);
        `backward` false: the forward only (evaluation). What `step()` and a generated
        program's loop (`Trainer.step`) run."""
        self._gather_if_stepped()
        train = backward and torch.is_grad_enabled()
        self._begin(step, counted=train)
        if self.pipelined is not None:
            self.where(f"step {self.ctx.step + 1}: pipeline schedule")
            inputs = {k: v for k, v in data.items() if k in self.plan.inputs}
            pipeline, last = self.pipelined.pipeline, self.is_last
            with step_region(self.plan.precision, self.device, enabled=train and self.float_dtype is None):
                outputs = run_schedule(self.schedule, self.stages, pipeline, self.plan, inputs, last, train)
            if train and self.syncing:
                self.sync.begin()
        else:
            k = self.plan.accumulation
            if k == 1:
                outputs = self._micro_step(data, 1.0, train)
            else:
                with step_region(self.plan.precision, self.device, enabled=self.float_dtype is None):
                    parts = [
                        self._micro_step(d, 1.0 / k, train and m == k - 1, m)
                        for m, d in enumerate(microbatches(self.plan, data, k))
                    ]
                outputs = accumulated_outputs(parts)
        if train:
            self.where(f"step {self.ctx.step + 1}: gradient sync")
            self._backward_done(self.syncing)
        return outputs

    def _begin(self, step: int | None, counted: bool) -> None:
        """A step starts: its number (the dropout masks'), a fresh token chain, the check mode;
        `counted`: a training step (an evaluation does not advance the count, so the masks of
        step k are those of a generated program's step k)."""
        self.ctx.check = self.check or not self.training  # dropout off in eval mode
        self.ctx.begin_step(self.steps if step is None else step)
        self.steps += counted

    def _forward_pieces(self, data: dict[str, torch.Tensor]) -> list[Any]:
        """The plan's forward on this rank's pieces `data` (ZeRO-3 gathers, the precision)."""
        with self.zero.saving(self.saved), self._autocast():
            return list(self._program_forward(self.ctx, self.zero.forward_weights, data))

    def _micro_step(
        self, data: dict[str, torch.Tensor], scale: float, last: bool, part: int | None = None
    ) -> list[Any]:
        """Forward and (under grad) backward of one batch or micro-batch (`part`: its index,
        which varies the dropout masks as a pipeline's micro-batches do); the loss seeded with
        `scale`; the gradient sync armed for this backward if `last`."""
        step = self.ctx.step
        where = f"step {step + 1}" + (f", micro-batch {part + 1}" if part is not None else "")
        if part is not None:
            self.ctx.token = self.ctx.new_token()  # each micro-batch's own token chain
            self.ctx.step = step * 1_000_003 + part
        self.where(f"{where}: forward")
        try:
            outputs = self._forward_pieces(data)
        finally:
            self.ctx.step = step
        if not torch.is_grad_enabled():
            return outputs
        roots, seeds = [self.ctx.token], [torch.zeros((), device=self.device)]
        loss = outputs[0]
        if loss is not None and loss.requires_grad:
            # Copies of the loss other than copy 0 seed zero rather than nothing: every copy runs
            # the same backward, so ZeRO-3's reduce-scatters (and ZeRO-2's hooks) of the weights
            # read there fire on every rank of their copy group (they deadlocked otherwise).
            roots.append(loss)
            seeds.append(torch.full_like(loss, scale) if self.seeds_loss else torch.zeros_like(loss))
        self.where(f"{where}: backward")
        if last and self.syncing:
            self.sync.begin()
        torch.autograd.backward(roots, seeds)
        return outputs

    def _returned(self, outputs: list[Any], loss: torch.Tensor | None = None) -> Any:
        """What the model returns from this rank's pieces of the outputs: the whole loss on
        every rank (`loss`, else the loss piece's whole value, detached), then the other
        outputs (this rank's pieces, or whole with `full_outputs`)."""
        if loss is None:
            loss = self.loss_of(outputs[0])
        if len(outputs) == 1:
            return loss
        rest = outputs[1:]
        if self.full_outputs:
            rest = [w.to(self.device) for w in self._whole(list(range(1, len(outputs))), rest)]
        return (loss, *rest)

    def loss_of(self, piece: torch.Tensor | None) -> torch.Tensor:
        """The whole loss (fp32, detached) on every rank from this rank's piece of it (None: it
        holds none), as `train_step` returns it: the piece where every rank holds a copy of the
        whole value (no collective), else assembled (one all-reduce; call it on every rank)."""
        layout = self.plan.outputs[0]
        if piece is not None and layout.sum == 1 and len(layout.pieces) == self.comm.world:
            return piece.detach().to(torch.float32)
        return self._whole([0], [piece])[0].to(self.device, torch.float32)

    def _whole(self, which: list[int], pieces: list[Any]) -> list[torch.Tensor]:
        layouts = [self.plan.outputs[i] for i in which]
        whole = assemble(layouts, [None if p is None else p.detach() for p in pieces], self.rank,
                         self.device, everywhere=True)  # fmt: skip
        assert whole is not None
        return whole

    def _batch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
        """This rank's pieces of the batch `args`, `kwargs` (PlanMismatch naming what differs)."""
        if len(args) > len(self.names):
            raise PlanMismatch(f"the model takes {len(self.names)} positional inputs, got {len(args)}")
        given = dict(zip(self.names, args, strict=False)) | kwargs
        given = {k: v for k, v in given.items() if v is not None}
        out = dict(self.constants)
        for key, layout in self.plan.inputs.items():
            value = given.pop(key, None)
            if value is None:
                raise PlanMismatch(
                    f"the plan needs the input '{key}' (its inputs: {', '.join(self.plan.inputs)})"
                )
            if not isinstance(value, torch.Tensor):
                raise PlanMismatch(f"input '{key}' is a {type(value).__name__}, not a tensor")
            if tuple(value.shape) != layout.shape:
                raise PlanMismatch(
                    f"input '{key}' has shape {list(value.shape)}, the plan was made for "
                    f"{list(layout.shape)} "
                    "(the whole batch, the same on every rank)"
                )
            if value.is_floating_point() != layout.torch_dtype.is_floating_point:
                raise PlanMismatch(
                    f"input '{key}' is {value.dtype}, the plan was made for {layout.torch_dtype}"
                )
            bound = self.plan.bounds.get(key)
            if (
                bound is not None
                and value.numel()
                and not (int(value.min()) >= 0 and int(value.max()) < bound)
            ):
                raise PlanMismatch(f"input '{key}' holds values outside [0, {bound}) (the rows it indexes)")
            piece = layout.piece_of(self.rank, value.to(layout.torch_dtype))
            if piece is not None:
                out[key] = piece.to(self.device).contiguous()
        if given:
            raise PlanMismatch(
                f"the plan has no input '{next(iter(given))}' (its inputs: {', '.join(self.plan.inputs)})"
            )
        return out

    def _backward_started(self) -> None:
        """At the loss's backward: the gradient sync queued for the end of this backward."""
        if not self.armed:
            return
        self.armed = False
        syncing = self.syncing
        torch.autograd.Variable._execution_engine.queue_callback(lambda: self._backward_done(syncing))  # type: ignore[attr-defined]

    def _backward_done(self, syncing: bool) -> None:
        """After a step's backward: the gradient sync of weight copies waited for (`syncing`)
        and ZeRO's reduce-scatters."""
        if syncing:
            self.sync.finish()
        self.zero.after_sync()

    def after_step(self) -> None:
        """After the optimizer's step: ZeRO-1/2's updated shards gathered into the pieces (else
        done at the next call, when a shard changed)."""
        self.zero.after_step()
        self.gathered = self._versions()

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backwards inside it keep their gradients local (accumulate, then sync once outside
        it), as DDP's `no_sync`."""
        before, self.syncing = self.syncing, False
        try:
            yield
        finally:
            self.syncing = before

    def train(self, mode: bool = True) -> DistributedModel:
        self.training = mode
        return self

    # --- helpers that need the plan ---------------------------------------------------------

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scales every gradient by the factor of the global 2-norm over all ranks' pieces and
        shards (each element once), as `torch.nn.utils.clip_grad_norm_`; returns that norm."""
        grads = {k: p.grad for k, p in self.held.items()}
        norm = global_grad_norm(grads, self.plan.weights, self.rank, self.device, set(self.zero.shards))
        factor = clip_factor(norm, max_norm)
        if factor < 1.0:
            for g in grads.values():
                if g is not None:
                    g.mul_(factor)
        return torch.tensor(norm)

    def _check_optimizer(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        """Before any optimizer's step: PlanMismatch if it updates some of this model's pieces
        but cannot step them alone: it needs a closure that re-evaluates the model (LBFGS), or
        it also updates tensors that are not this model's `parameters()`."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        ours = {id(p) for p in self.held.values()}
        mine = [id(p) in ours for p in params]
        if not any(mine):
            return
        if isinstance(optimizer, torch.optim.LBFGS):
            raise PlanMismatch(
                "LBFGS needs a closure that re-evaluates the model: use an element-wise optimizer"
            )
        if not all(mine):
            raise PlanMismatch("the optimizer also updates tensors that are not this model's parameters()")

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """The whole weights in the model's state_dict keys, on every rank (a collective; parts
        of packed weights joined)."""
        self._gather_if_stepped()
        whole = self.zero.whole_weights()
        keys = list(self.plan.weights)
        layouts = [self.plan.weights[k] for k in keys]
        values = assemble(layouts, [whole.get(k) for k in keys], self.rank, self.device, everywhere=True)
        assert values is not None
        out: dict[str, torch.Tensor] = {}
        for key, value in zip(keys, values, strict=True):
            part = WeightKey.parse(key)
            dtype = self.plan.weights[key].torch_dtype
            if not part.is_part:
                out[key] = value.to(dtype)
                continue
            stored = out.setdefault(part.stored, torch.zeros(self.sizes[part.stored], dtype=dtype))
            part.put(stored, value.to(dtype))
        return out

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:  # type: ignore[override]
        """Takes this rank's pieces (and shards) of the whole weights `state` (the model's keys)."""
        for key, layout in self.plan.weights.items():
            part = WeightKey.parse(key)
            if part.stored not in state:
                raise PlanMismatch(f"the state_dict has no weight '{part.stored}'")
            piece = layout.piece_of(self.rank, part.take(state[part.stored]).to(layout.torch_dtype))
            if piece is None:
                continue
            shard = self.zero.shards.get(key)
            master = self.zero.masters.get(key)
            if master is not None:  # a bf16 piece: its master and bf16(it), as after a step
                master.master.copy_(piece)
                master.values.copy_(piece)
                continue
            if shard is None:
                self.pieces[key].copy_(piece)
                continue
            flat = torch.zeros(shard.m * shard.n, dtype=piece.dtype)
            flat[: shard.numel] = piece.reshape(-1)
            shard.shard.copy_(flat[shard.index * shard.m : (shard.index + 1) * shard.m])
            if shard.values is not None:  # a bf16 piece: bf16(the weight), as after a step
                shard.values.copy_(piece)
            elif shard.full is not None:
                shard.full.copy_(piece)
        self.gathered = self._versions()
        return None

    def save(self, path: str, optimizer: torch.optim.Optimizer | None = None, step: int = 0) -> None:
        """A collective: a torch.distributed.checkpoint of the weights (and the optimizer's state)
        in the model's keys, what a generated program's `--resume` and `--init` read."""
        self._gather_if_stepped()
        held, flats = self.zero.held()
        checkpoint.save(path, step, held, self.plan.weights, self.rank, optimizer, self.sizes, flats)

    def load(self, path: str, optimizer: torch.optim.Optimizer | None = None) -> int:
        """A collective: this rank's pieces (and the optimizer's state) from a checkpoint of any
        plan (`save`, a generated program's `--save`); returns its step."""
        held, flats = self.zero.held()
        step = checkpoint.load(str(checkpoint.resolve(path)), held, self.plan.weights, self.rank, optimizer,
                               self.sizes, flats)  # fmt: skip
        self.zero.after_step()
        self.gathered = self._versions()
        return step

    def extra_repr(self) -> str:
        count = sum(math.prod(p.shape) for p in self.held.values())
        return f"plan {self.plan.source} on {self.plan.machine}, rank {self.rank}: {count} elements held"
