"""The optimizer of a generated program: any `torch.optim` optimizer by name with its keyword
arguments, gradient clipping by the global norm, and a learning-rate schedule. The plan and the
`--check` reference build theirs here, from the same `OptimizerSpec`, so both sides step alike.

    --optimizer adamw --optimizer-args 'weight_decay=0.1, betas=(0.9, 0.95)'
    --clip-grad-norm 1.0 --lr-schedule cosine --lr-warmup-steps 10 --lr-min-ratio 0.1

Each rank steps its own weight pieces. That equals stepping the whole tensor for optimizers that
work element by element (SGD, Adam, AdamW, RMSprop, ...); those that do not (Adafactor's factored
moments, LBFGS's closure, SparseAdam) are refused for a plan that shards a weight. Weight decay
is element-wise, so AdamW's decoupled decay is exact on pieces.

The global gradient norm counts every element of every weight once: each rank sums the squares of
the pieces it holds as copy 0 (a sharded weight contributes each shard once, a replicated weight
once), one all-reduce over all ranks adds them up. The clipping factor is torch's
(`clip_grad_norm_`: max_norm / (norm + 1e-6), at most 1), applied to every gradient the
optimizer steps with (`DistributedModel.clip_grad_norm_`: pieces, or ZeRO shards, whose
gradients are where ZeRO-2/3 keep them; each shard of every copy counts once).
"""

from __future__ import annotations

import argparse
import ast
import functools
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from unityc.runtime.plan import Layout

NOT_ELEMENTWISE = frozenset({"adafactor", "lbfgs", "sparseadam", "muon"})
"""torch.optim optimizers whose update of an element depends on other elements (or that need a
closure): stepping a weight's shards separately would not equal stepping the weight."""

NEEDS_CLOSURE = frozenset({"lbfgs"})
"""torch.optim optimizers whose step re-evaluates the model through a closure (several forward
passes per step): a generated program steps once per batch, so they are refused up front."""

SCHEDULES = ("constant", "linear", "cosine")


class OptimizerError(ValueError):
    """An optimizer name, argument or schedule that cannot be used."""


@functools.cache
def optimizer_classes() -> dict[str, type[torch.optim.Optimizer]]:
    """torch.optim's optimizers by lower-case name."""
    out: dict[str, type[torch.optim.Optimizer]] = {}
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if (
            isinstance(cls, type)
            and issubclass(cls, torch.optim.Optimizer)
            and cls is not torch.optim.Optimizer
        ):
            out[name.lower()] = cls
    return out


def parse_kwargs(text: str) -> dict[str, Any]:
    """`'weight_decay=0.1, betas=(0.9, 0.95)'` -> {'weight_decay': 0.1, 'betas': (0.9, 0.95)}
    (values are Python literals)."""
    if not text.strip():
        return {}
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        raise OptimizerError(f"'{text}' is not a list of name=value arguments") from None
    assert isinstance(call, ast.Call)
    if call.args or any(k.arg is None for k in call.keywords):
        raise OptimizerError(f"'{text}': every argument needs a name (name=value)")
    out: dict[str, Any] = {}
    for k in call.keywords:
        try:
            out[str(k.arg)] = ast.literal_eval(k.value)
        except ValueError:
            raise OptimizerError(f"'{text}': the value of {k.arg} is not a Python literal") from None
    return out


@dataclass(frozen=True)
class OptimizerSpec:
    """An optimizer, its arguments, clipping and schedule (what the command line says)."""

    name: str = "sgd"
    lr: float = 0.01
    kwargs: tuple[tuple[str, Any], ...] = ()
    clip_grad_norm: float | None = None
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int = 1
    min_ratio: float = 0.0

    def __post_init__(self) -> None:
        if self.name.lower() not in optimizer_classes():
            known = ", ".join(sorted(set(optimizer_classes()) - NEEDS_CLOSURE))
            raise OptimizerError(f"--optimizer {self.name}: not a torch.optim optimizer (known: {known})")
        if self.name.lower() in NEEDS_CLOSURE:
            raise OptimizerError(
                f"--optimizer {self.name}: its step re-evaluates the model through a closure, which a "
                "generated program (one forward and backward per step) does not have; use sgd, adam, "
                "adamw, ..."
            )
        if self.schedule not in SCHEDULES:
            raise OptimizerError(f"--lr-schedule {self.schedule}: expected one of {', '.join(SCHEDULES)}")
        if self.warmup_steps < 0 or self.total_steps < 1:
            raise OptimizerError("--lr-warmup-steps must be >= 0 and the steps >= 1")
        if not 0.0 <= self.min_ratio <= 1.0:
            raise OptimizerError(f"--lr-min-ratio must lie in [0, 1], got {self.min_ratio}")
        if self.clip_grad_norm is not None and not self.clip_grad_norm > 0:
            raise OptimizerError(f"--clip-grad-norm must be positive, got {self.clip_grad_norm}")

    @property
    def cls(self) -> type[torch.optim.Optimizer]:
        return optimizer_classes()[self.name.lower()]

    @property
    def elementwise(self) -> bool:
        return self.name.lower() not in NOT_ELEMENTWISE

    def describe(self) -> str:
        args = "".join(f", {k}={v!r}" for k, v in self.kwargs)
        text = f"{self.cls.__name__}(lr={self.lr:g}{args})"
        if self.schedule != "constant" or self.warmup_steps:
            text += f", {self.schedule} schedule over {self.total_steps} steps"
            text += f" ({self.warmup_steps} warm-up, down to {self.min_ratio:g}x)"
        if self.clip_grad_norm is not None:
            text += f", gradients clipped to global norm {self.clip_grad_norm:g}"
        return text

    def build(self, params: list[torch.Tensor]) -> torch.optim.Optimizer | None:
        """The optimizer over `params` (None when there are none); OptimizerError for bad
        arguments."""
        if not params:
            return None
        # Every torch optimizer takes `lr`; the base class's signature does not say so.
        build: Callable[..., torch.optim.Optimizer] = self.cls
        try:
            return build(params, lr=self.lr, **dict(self.kwargs))
        except (TypeError, ValueError) as e:
            raise OptimizerError(f"--optimizer {self.name} {dict(self.kwargs)}: {e}") from None

    def factor(self, step: int) -> float:
        """The learning rate's multiplier at `step` (0-based): linear warm-up to 1, then
        constant, or a linear or cosine decay to `min_ratio` at `total_steps`."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.schedule == "constant":
            return 1.0
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        shape = 1.0 - progress if self.schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_ratio + (1.0 - self.min_ratio) * shape

    def scheduler(
        self, optimizer: torch.optim.Optimizer | None, start: int = 0
    ) -> torch.optim.lr_scheduler.LambdaLR | None:
        """The schedule, its learning rate set for step `start` (0-based; a resumed run)."""
        if optimizer is None:
            return None
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        return torch.optim.lr_scheduler.LambdaLR(optimizer, self.factor, last_epoch=start - 1)

    def check_plan(self, layouts: Iterable[Layout]) -> None:
        """Refuses an optimizer that is not element-wise for a plan that shards a weight."""
        if self.elementwise:
            return
        for layout in layouts:
            if any(k > 1 for k in layout.shard):
                raise OptimizerError(
                    f"--optimizer {self.name} does not update element by element, so stepping the "
                    "shards of a sharded weight would not equal stepping the weight; use an "
                    "element-wise optimizer (SGD, Adam, AdamW, ...) or a plan without sharded weights"
                )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The optimizer's flags (`--lr` and `--optimizer` included)."""
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    parser.add_argument(
        "--optimizer",
        default="sgd",
        metavar="NAME",
        help="any torch.optim optimizer by name, case-insensitive: sgd, adam, adamw, ... (default sgd)",
    )
    parser.add_argument(
        "--optimizer-args",
        default="",
        metavar="ARGS",
        help="its keyword arguments as Python literals, e.g. 'weight_decay=0.1, betas=(0.9, 0.95)'",
    )
    parser.add_argument(
        "--clip-grad-norm", type=float, metavar="MAX", help="clip gradients to this global 2-norm"
    )
    parser.add_argument(
        "--lr-schedule", choices=SCHEDULES, default="constant", help="after the warm-up (default constant)"
    )
    parser.add_argument("--lr-warmup-steps", type=int, default=0, metavar="N", help="linear warm-up steps")
    parser.add_argument(
        "--lr-min-ratio", type=float, default=0.0, metavar="R", help="the decay ends at R x lr (default 0)"
    )


def spec_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> OptimizerSpec:
    """The OptimizerSpec of parsed flags; a usage error (exit 2) for bad ones. The schedule
    spans `--steps` (a resumed run counts from step 0, so it follows the same schedule)."""
    try:
        return OptimizerSpec(
            args.optimizer,
            args.lr,
            tuple(parse_kwargs(args.optimizer_args).items()),
            args.clip_grad_norm,
            args.lr_schedule,
            args.lr_warmup_steps,
            args.steps,
            args.lr_min_ratio,
        )
    except OptimizerError as e:
        parser.error(str(e))
        raise  # not reached: parser.error exits


def clip_factor(norm: float, max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_'s factor."""
    return min(1.0, max_norm / (norm + 1e-6))


def global_grad_norm(
    grads: Mapping[str, torch.Tensor | None],
    layouts: Mapping[str, Layout],
    rank: int,
    device: torch.device,
    sharded: Collection[str] = (),
) -> float:
    """The 2-norm of all gradients of the logical weights, each element counted once: a
    collective over all ranks (each adds the squares of the pieces it holds as copy 0 and
    partial sum 0; of the keys in `sharded`, whose gradients are ZeRO shards of the piece, the
    shard every copy holds)."""
    total = torch.zeros((), dtype=torch.float64, device=device)
    for key, grad in grads.items():
        coord = layouts[key].pieces.get(rank)
        if grad is None or coord is None or coord[-2] != 0 or (coord[-1] != 0 and key not in sharded):
            continue
        total += grad.detach().double().pow(2).sum()
    dist.all_reduce(total)
    return math.sqrt(total.item())
