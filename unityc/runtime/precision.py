"""Mixed precision as a plan runs it: `Plan.precision` is the graph function's
`unityc.precision` ("fp32" or "bf16-mixed").

bf16-mixed runs each forward under `torch.autocast(dtype=torch.bfloat16)` (on CPU too) with the
weights, their gradients, optimizer state and gradient reductions in fp32 (master weights); the
backward runs outside autocast, as torch recommends. `--check` runs the single-device reference
under the same autocast and compares at `BF16_TOLERANCE`.
"""

from __future__ import annotations

import contextlib

import torch

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


def default_tolerance(precision: str) -> float:
    return BF16_TOLERANCE if precision == BF16_MIXED else FP32_TOLERANCE


def autocast(precision: str, device: torch.device, enabled: bool = True) -> contextlib.AbstractContextManager:
    """The context a forward of a plan of `precision` runs in (nothing for fp32)."""
    if precision == BF16_MIXED and enabled:
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
