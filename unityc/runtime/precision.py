"""Mixed precision as a plan runs it: `Plan.precision` is the graph function's
`unityc.precision` ("fp32" or "bf16-mixed").

bf16-mixed runs each forward under `torch.autocast(dtype=torch.bfloat16)` (on CPU too) with the
weights, their gradients, optimizer state and gradient reductions in fp32 (master weights); the
backward runs outside autocast, as torch recommends. Each weight is cast to bf16 once per step and
that copy is shared by every micro-batch (as Megatron-LM and FSDP2 do): the step's micro-batches
run inside one `step_region`, a disabled autocast region that keeps autocast's cache of the
weights' casts from one forward to the next (see `step_region`); a view of a weight (GPT-2's
transposed Conv1D weights), which autocast would cast on every forward, is taken of the weight's
own bf16 copy, made once per step too (`step_cast`). `--check` runs the
single-device reference under the same autocast and compares at `BF16_TOLERANCE`, widened where
bf16 itself is far from float64 (`BF16_CONDITION_FACTOR`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from unityc.runtime.check import CONDITION_FACTOR

FP32 = "fp32"
BF16_MIXED = "bf16-mixed"

FP32_TOLERANCE = 1e-4
BF16_TOLERANCE = 5e-2
"""--check's relative error under bf16-mixed: the plan and the reference both round to bf16
(8 bits of mantissa, a relative step of 2^-8 = 3.9e-3), but at different points (a row-parallel
linear rounds each partial sum, the reference the whole sum; a collective moves the rounded
value), so gradients, sums of many rounded products, differ by a few steps. Measured on the
tests' plans (MLP, BERT Megatron, the character-level GPT-2 trained 40 steps): at most 1.3e-2,
see the report of `tests/codegen/test_training.py`. fp32 plans keep 1e-4."""


BF16_CONDITION_FACTOR = 2.0
"""--check's widening under bf16-mixed: an element may differ from the autocast reference by
`BF16_TOLERANCE` plus this many times the reference's own error against float64 (its row's and the
tensor's worst ordinary row's, `check.allowed_errors`; fp32 uses `check.CONDITION_FACTOR`, 16).
Where bf16 is ill-conditioned two bf16 runs are each far from exact and so from each other: behind
a U-Net's batch norms (whose backward subtracts the gradient's mean and its projection on the
normalized input, cancelling most of it) the autocast reference's convolution weight gradients
are 26-45 % off float64, and a correct 4-way spatial plan of unet small was 7.1e-2 off the reference
at step 2. 1 bit of slack: bf16's rounding dominates both sides, so a plan lands within about the
reference's distance from exact; a plan off by a whole term still fails wherever bf16 computes
well (the U-Net's head and last batch norm: 4e-3 off float64)."""


def default_tolerance(precision: str) -> float:
    return BF16_TOLERANCE if precision == BF16_MIXED else FP32_TOLERANCE


def condition_factor(precision: str) -> float:
    """How many times the reference's own error against float64 --check adds to the tolerance."""
    return BF16_CONDITION_FACTOR if precision == BF16_MIXED else CONDITION_FACTOR


def autocast(precision: str, device: torch.device, enabled: bool = True) -> contextlib.AbstractContextManager:
    """The context a forward of a plan of `precision` runs in (nothing for fp32)."""
    if precision == BF16_MIXED and enabled:
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def step_region(
    precision: str, device: torch.device, enabled: bool = True
) -> contextlib.AbstractContextManager:
    """The context a training step's forwards and backwards run in: under bf16-mixed a disabled
    `torch.autocast` region around them all, so that each weight is cast to bf16 once per step.

    autocast caches the bf16 cast of a leaf that requires grad (a trainable weight, not a view)
    and drops the cache only when the outermost autocast region exits (`torch.autocast.__exit__`:
    `autocast_decrement_nesting() == 0`); a disabled region counts as one but leaves autocast off.
    So inside it each micro-batch's forward (`autocast`, nested) reads the copy the first one
    made, and the backwards run outside autocast as before; all of them flow into the fp32 leaf
    through the copy's `ToCopyBackward`, which keeps nothing, so one copy serves every backward.
    The region must end before the optimizer updates the weights in place (the cache would be
    stale): the trainer closes it before `update`. The copy's value is bf16(w) however often it
    is made, so --check stays exact against the reference's own autocast. A frozen weight
    (no grad) or a ZeRO-3 gathered piece (a view of its bucket) is not cached: cast per forward."""
    if precision == BF16_MIXED and enabled:
        return _step_casts(device)
    return contextlib.nullcontext()


_CASTS: list[dict[int, tuple[torch.Tensor, torch.Tensor]]] = []
"""The open step regions' bf16 copies made by `step_cast`: weight id -> (weight, copy)."""


@contextlib.contextmanager
def _step_casts(device: torch.device) -> Iterator[None]:
    _CASTS.append({})
    try:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=False):
            yield
    finally:
        _CASTS.pop()


def step_cast(w: torch.Tensor | None) -> torch.Tensor | None:
    """The bf16 copy of weight `w` that a view of it is taken of, where the program reads that
    view only through ops autocast runs in bf16 (a Conv1D's transposed weight read by a matmul):
    under autocast to bf16, `w` cast once per `step_region` and shared by its micro-batches (as
    autocast shares a weight's own cast: a trained leaf, with gradients on; a ZeRO-3 gathered
    piece, a view, or a frozen weight is cast per call); else `w` itself. The copy's
    `ToCopyBackward` keeps nothing, so every micro-batch's backward flows through it into the
    fp32 leaf. bf16(w) viewed is bf16(the view): the values are those autocast would cast."""
    if w is None or w.dtype != torch.float32:
        return w
    kind = w.device.type
    if not torch.is_autocast_enabled(kind) or torch.get_autocast_dtype(kind) != torch.bfloat16:
        return w
    if not (_CASTS and w.is_leaf and w.requires_grad and torch.is_grad_enabled()):
        return w.to(torch.bfloat16)
    held = _CASTS[-1].get(id(w))
    if held is None or held[0] is not w:
        held = _CASTS[-1][id(w)] = (w, w.to(torch.bfloat16))
    return held[1]
