"""--check: the plan against single-device training of the reference model.

Rank 0 holds the reference model (rebuilt from the recorded spec and seed, dropout off). Every
step it is checked from the plan's own state, so that errors cannot compound:

1. the reference takes the plan's weights (assembled from the shards) before the step;
2. its loss, other outputs and every gradient are compared with the plan's (gradients
   assembled after gradient synchronization);
3. the reference optimizer steps with the plan's gradients, and every updated weight is compared
   with the plan's. (Comparing two independent Adam runs would be ill-conditioned: Adam divides
   each element by its own gradient magnitude, so a gradient that is float noise near `eps`
   moves by a visible fraction of the learning rate in either run.)

All copies of each weight piece must also be equal. Errors are max-norm relative errors.

The tolerance follows the model's conditioning, element by element. An fp32 plan sums in
another order than the fp32 reference, so the two differ by about as much as each differs from
exact arithmetic, which grows with the depth of the computation and how ill-conditioned it is (a
stock EfficientNet-B0's serial plan differed from its reference by 6.7e-4 on the stem's weight
gradient, while in float64 both agreed to 6e-12); and where a ReLU's input is within rounding of
zero, fp32 and float64 take different branches, so a whole row of a gradient moves (the demo's
MLP: 2e-2 on one weight's gradient, every other element within 1e-6). So rank 0 also runs the
model in float64 (`Reference.exact`), and element i of a tensor may differ from the fp32
reference by --tolerance plus `CONDITION_FACTOR` times (fp32's own largest error in i's row + the
largest row error of the tensor, capped at `BRANCH_FLIP` times its 99th percentile), all
relative to the tensor's scale (`allowed_errors`). A flipped ReLU row widens only itself: a plan
off by 1e-3 everywhere fails on the rows fp32 computes well. A wrong plan (a missing or doubled
term) is off by far more than the rounding of either side.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from unityc.runtime.parts import WeightKey
from unityc.runtime.plan import Layout

NOISE_FLOOR = 1e-3
"""Gradients are measured against at least this fraction of the model's largest gradient: a
gradient that is zero in exact arithmetic (e.g. attention's key bias, softmax is shift-invariant)
is float noise on both sides, and noise relative to noise is meaningless."""


CONDITION_FACTOR = 16.0
"""How many times the fp32 reference's own error (against float64) an fp32 plan may differ from
it, per element: two fp32 sums of the same terms in different orders land within a few times
either one's distance from exact (4 bits of slack)."""


BRANCH_FLIP = 30.0
"""A row whose fp32 error (against float64) is over this many times the tensor's 99th-percentile
row error took another branch in float64 (a ReLU input within rounding of zero: one row in 512
of the demo MLP's weight gradient, 1e4 times the others): it is allowed its own error, but the
other rows share at most this multiple of the percentile. Rounding alone stays well inside it
(a stock EfficientNet-B0's gradients: the largest row error is at most 10x the percentile)."""

ORDINARY = 0.99
"""The fraction of a tensor's rows taken as ordinary rounding (`BRANCH_FLIP`)."""


def allowed_errors(
    tolerance: float,
    fp32: torch.Tensor,
    exact: torch.Tensor | None,
    floor: float = 0.0,
    factor: float = CONDITION_FACTOR,
) -> torch.Tensor | float:
    """The relative error each element of a plan's tensor may have against the reference's
    `fp32` (fp32, or bf16-mixed: `factor` is the precision's, `precision.condition_factor`):
    `tolerance`, plus `factor` x (the reference's own error against `exact` (float64) at
    that element's row + the largest of its rows' errors, up to `BRANCH_FLIP` x their `ORDINARY`
    quantile),
    relative to the tensor's scale; without `exact`: `tolerance`. One sample of an element's
    rounding (the reference's) does not bound another (the plan's), so every row may err as much as
    the tensor's worst ordinary row."""
    if exact is None or fp32.numel() == 0:
        return tolerance
    own = (fp32.double() - exact.double()).abs()
    scale = max(fp32.double().abs().max().item(), floor, 1e-30)
    rows = own.reshape(own.shape[0] if own.dim() else 1, -1).amax(1)  # an output feature, a channel
    ordinary = rows.kthvalue(max(1, int(ORDINARY * rows.numel()))).values
    typical = torch.minimum(rows.max(), BRANCH_FLIP * ordinary)
    own = rows.reshape(-1, *[1] * (own.dim() - 1)).expand_as(own) if own.dim() else rows[0]
    return tolerance + factor * (own + typical) / scale


def relative_error(actual: torch.Tensor, expected: torch.Tensor, floor: float = 0.0) -> float:
    """max |actual - expected| / max(max |expected|, floor) (the importer's --check measure)."""
    if expected.numel() == 0:
        return 0.0
    diff = (actual.double() - expected.double()).abs().max().item()
    scale = expected.double().abs().max().item()
    return diff / max(scale, floor, 1e-30)


def largest(tensors: Sequence[torch.Tensor | None]) -> float:
    return max((t.abs().max().item() for t in tensors if t is not None and t.numel()), default=0.0)


def assemble(
    layouts: Sequence[Layout],
    pieces: Sequence[torch.Tensor | None],
    rank: int,
    device: torch.device,
    copy: int = 0,
    everywhere: bool = False,
) -> list[torch.Tensor] | None:
    """The logical tensors (on rank 0, on the CPU; None elsewhere; on every rank if
    `everywhere`) from copy `copy` of every piece: shards are placed, partial sums added. One
    reduce for all of them; tensors with fewer copies are zeros. A collective: every rank calls
    it with the same layouts."""
    flat: list[torch.Tensor] = []
    for layout, piece in zip(layouts, pieces, strict=True):
        full = torch.zeros(layout.shape, dtype=torch.float64, device=device)
        coord = layout.pieces.get(rank)
        if piece is not None and coord is not None and coord[-1] == copy:
            full[layout.slices(coord)] += piece.detach().double()
        flat.append(full.flatten())
    buffer = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.float64, device=device)
    if everywhere:
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
    else:
        dist.reduce(buffer, dst=0, op=dist.ReduceOp.SUM)
    if rank != 0 and not everywhere:
        return None
    out = []
    for layout, part in zip(layouts, buffer.split([f.numel() for f in flat]), strict=True):
        value = part.reshape(layout.shape).cpu()  # floats stay float64: comparisons are in float64
        out.append(value if layout.torch_dtype.is_floating_point else value.to(layout.torch_dtype))
    return out


def copies_differ(
    names: Sequence[str],
    layouts: Sequence[Layout],
    pieces: Sequence[torch.Tensor | None],
    rank: int,
    device: torch.device,
) -> str | None:
    """The first tensor whose copies are not all equal (known on rank 0), else None."""
    most = max((layout.copy for layout in layouts), default=1)
    first = assemble(layouts, pieces, rank, device, 0)
    problem = None
    for c in range(1, most):
        other = assemble(layouts, pieces, rank, device, c)
        if rank != 0 or problem is not None:
            continue
        assert first is not None and other is not None
        for name, layout, a, b in zip(names, layouts, first, other, strict=True):
            if layout.copy > c and not torch.equal(a, b):
                problem = (
                    f"copy {c} of '{name}' differs from copy 0 (max difference {(a - b).abs().max():.3e})"
                )
                break
    return problem


@contextlib.contextmanager
def dropout_off() -> Iterator[None]:
    """Every dropout is the identity, as in the plan under --check and in the interpreter, and
    every other Bernoulli draw (torchvision's stochastic depth: `empty(...).bernoulli_(q)`) is
    its mean q, as the plan's `pcg.dropout`-based draw is with dropout off."""
    dropout, sdpa = F.dropout, F.scaled_dot_product_attention
    draw = torch.Tensor.bernoulli_

    def mean(self: torch.Tensor, p: float | torch.Tensor = 0.5, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.copy_(p) if isinstance(p, torch.Tensor) else self.fill_(p)

    def identity(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return x

    def sdpa_without_dropout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kw: Any) -> Any:
        if len(args) >= 2:
            args = (args[0], 0.0, *args[2:])
        else:
            kw["dropout_p"] = 0.0
        return sdpa(q, k, v, *args, **kw)

    F.dropout, F.scaled_dot_product_attention = identity, sdpa_without_dropout  # type: ignore[assignment]
    torch.Tensor.bernoulli_ = mean  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        F.dropout, F.scaled_dot_product_attention = dropout, sdpa  # type: ignore[assignment]
        torch.Tensor.bernoulli_ = draw  # type: ignore[method-assign]


class Reference:
    """The single-device model and its optimizer, stepped from the plan's state."""

    def __init__(
        self,
        module: torch.nn.Module,
        inputs: Mapping[str, torch.Tensor],
        optimizer: Any,
        clip_grad_norm: float | None = None,
        scheduler: Any = None,
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ):
        self.module = module
        self.inputs = dict(inputs)
        self.params = dict(module.named_parameters(remove_duplicate=False))
        self.optimizer = optimizer
        self.clip_grad_norm = clip_grad_norm
        self.scheduler = scheduler
        self.autocast = autocast
        """The context of the forward: the plan's (bf16-mixed: autocast), so both compute alike."""
        self.exact: Reference | None = None
        """The same model in float64 (`with_exact`): how far fp32 itself is from exact."""

    def with_exact(self) -> Reference:
        """This reference with a float64 twin of its model (loaded and run beside it)."""
        module = copy.deepcopy(self.module).double()
        inputs = {k: v.double() if v.is_floating_point() else v for k, v in self.inputs.items()}
        self.exact = Reference(module, inputs, None)
        return self

    def load(self, weights: Mapping[str, torch.Tensor]) -> None:
        """The plan's weights, by its keys (a part `key[:, 0:8]` is that box of the parameter)."""
        with torch.no_grad():
            for key, value in weights.items():
                self.weight(key).copy_(value)
        if self.exact is not None:
            self.exact.load(weights)

    def gradients(self) -> tuple[list[torch.Tensor], dict[str, torch.Tensor | None]]:
        """Forward and backward at the current weights: the outputs and the gradients by key."""
        self.module.zero_grad(set_to_none=True)
        with dropout_off(), self.autocast():
            outputs = self.module(**self.inputs)
        outputs = list(outputs) if isinstance(outputs, tuple | list) else [outputs]
        outputs[0].backward()
        grads = {k: None if p.grad is None else p.grad.detach().clone() for k, p in self.params.items()}
        return [o.detach() for o in outputs], grads

    def update(self, grads: Mapping[str, torch.Tensor]) -> None:
        """One optimizer step with the given gradients by the plan's keys (parameters not given
        stay put; a packed parameter's gradient is its parts' placed side by side): clipped to
        the global norm by torch's clip_grad_norm_, then the schedule steps."""
        self.optimizer.zero_grad(set_to_none=True)
        for key, grad in grads.items():
            part = WeightKey.parse(key)
            param = self.params[part.stored]
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            with torch.no_grad():
                part.put(param.grad, grad.to(param.device, param.dtype))
        if self.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip_grad_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()

    def trains(self, key: str) -> bool:
        """Whether the model trains the weight a plan's key names (`requires_grad`)."""
        return self.params[WeightKey.parse(key).stored].requires_grad

    def weight(self, key: str) -> torch.Tensor:
        """The weight a plan's key names (a view of the parameter; a padded part: a copy)."""
        part = WeightKey.parse(key)
        return part.take(self.params[part.stored].detach())


def part_of(values: Mapping[str, torch.Tensor | None], key: str) -> torch.Tensor | None:
    """The value a plan's weight key names in `values` (by state_dict key; None stays None)."""
    part = WeightKey.parse(key)
    value = values.get(part.stored)
    return None if value is None else part.take(value)


@dataclass
class Verdict:
    """What one step's comparison found."""

    tolerance: float
    factor: float = CONDITION_FACTOR
    """How many times the reference's own error against float64 the plan may add
    (`precision.condition_factor`)."""
    reference: str = "fp32"
    """The reference's precision, as the messages name it."""
    worst: dict[str, tuple[float, str]] = field(default_factory=dict)
    """Per category (loss, outputs, gradients, weights): the largest error and its tensor."""
    counts: dict[str, int] = field(default_factory=dict)
    failure: str | None = None
    widened: float = 0.0
    """The largest error that passed beyond `tolerance` (where fp32 itself is off); 0: none."""
    widened_count: int = 0
    """How many tensors passed only by the widening."""

    def compare(
        self,
        category: str,
        name: str,
        actual: torch.Tensor,
        expected: torch.Tensor | None,
        floor: float = 0.0,
        exact: torch.Tensor | None = None,
        computed: bool = True,
    ) -> None:
        """`actual` (the plan's) against `expected` (the fp32 reference's), element by element
        within `allowed_errors` (widened by the float64 reference's `exact` where one is given).
        `computed`: whether the plan computed `actual` at all (a gradient: no rank has one of a
        frozen weight); a tensor only one side has is a failure that names that side."""
        if self.failure is not None:
            return
        actual = actual.detach().cpu()
        one_sided = self._one_sided(name, actual, expected, floor, computed)
        if one_sided is not None:
            self.failure = one_sided
            return
        expected = torch.zeros_like(actual) if expected is None else expected.detach().cpu()
        if tuple(actual.shape) != tuple(expected.shape):
            self.failure = f"{name}: shape {list(actual.shape)} but the reference has {list(expected.shape)}"
            return
        error = relative_error(actual, expected, floor)
        self.counts[category] = self.counts.get(category, 0) + 1
        if error > self.worst.get(category, (-1.0, ""))[0]:
            self.worst[category] = (error, name)
        allowed = allowed_errors(
            self.tolerance, expected, None if exact is None else exact.detach().cpu(), floor, self.factor
        )
        if isinstance(allowed, float) or actual.numel() == 0:
            if not error <= allowed:  # also catches NaN
                self.failure = f"{name} differs: relative error {error:.3e} > {allowed:.1e}"
            return
        scale = max(expected.double().abs().max().item(), floor, 1e-30)
        errors = (actual.double() - expected.double()).abs() / scale
        excess = (errors - allowed).flatten()
        worst = int(excess.nan_to_num(nan=float("inf")).argmax().item())
        at, limit = errors.flatten()[worst].item(), allowed.flatten()[worst].item()
        if not at <= limit:  # also catches NaN
            where = list(torch.unravel_index(torch.tensor(worst), actual.shape)) if actual.dim() else []
            self.failure = (
                f"{name} differs: relative error {at:.3e} > {limit:.1e} at element "
                f"{[int(i) for i in where]} (--tolerance {self.tolerance:g} + {self.factor:g} x "
                f"the {self.reference} reference's own error against float64 in that row and in the "
                "tensor's rows)"
            )
            return
        if error > self.tolerance:
            self.widened = max(self.widened, error)
            self.widened_count += 1

    @staticmethod
    def _one_sided(
        name: str, actual: torch.Tensor, expected: torch.Tensor | None, floor: float, computed: bool
    ) -> str | None:
        """Why a nonzero tensor only one side has (the plan's `actual`, if `computed`; the
        reference's `expected`, if not None) fails, else None."""
        scale = max(floor, 1e-30)
        if expected is None and computed and actual.numel() and actual.abs().max().item() > scale:
            return (
                f"{name}: the plan computed one (largest element {actual.abs().max().item():.3e}) but the "
                "reference has none (the model does not train that weight)"
            )
        if expected is not None and not computed and expected.numel():
            largest_element = expected.detach().abs().max().item()
            if largest_element > scale:
                return (
                    f"{name}: the reference has one (largest element {largest_element:.3e}) but the plan "
                    "computed none (the plan treats that weight as frozen)"
                )
        return None

    def summary(self) -> str:
        parts = []
        for category in ("loss", "outputs", "gradients", "weights"):
            if category in self.counts:
                error, name = self.worst[category]
                parts.append(f"{self.counts[category]} {category} (worst {error:.1e} {name})")
        if self.widened:
            parts.append(
                f"{self.widened_count} tensor(s) beyond --tolerance (up to {self.widened:.1e}) only "
                f"where {self.reference} itself is that far from float64"
            )
        return "; ".join(parts)
