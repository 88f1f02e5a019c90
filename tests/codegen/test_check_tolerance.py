"""--check's fp32 tolerance follows the computation row by row (`runtime/check.py`): an element
of a plan's tensor may differ from the fp32 reference by --tolerance plus `CONDITION_FACTOR` x
(the fp32 reference's own error against float64 in its row + the tensor's largest row error,
capped at `BRANCH_FLIP` x its 99th percentile). Where fp32 is exact the tolerance stays
--tolerance, so a plan off by 1e-3 fails even when one row of the same tensor is 2e-2 off in
fp32 (a ReLU whose input is within rounding of zero takes another branch in float64: the demo
MLP's case, where the old per-tensor widening allowed 3.4e-1)."""

from __future__ import annotations

import torch

from unityc.runtime.check import CONDITION_FACTOR, Verdict, allowed_errors
from unityc.runtime.precision import BF16_CONDITION_FACTOR, BF16_MIXED, BF16_TOLERANCE

GENERATOR = torch.Generator().manual_seed(0)
EXACT = torch.randn(256, 32, generator=GENERATOR, dtype=torch.float64)
ROUNDING = 1e-7
"""fp32's relative rounding of a well-conditioned gradient."""


def fp32_like(exact: torch.Tensor) -> torch.Tensor:
    """`exact` with fp32-sized rounding noise of its own (another order of the same sums)."""
    return exact * (1 + ROUNDING * torch.randn(exact.shape, generator=GENERATOR, dtype=torch.float64))


FP32 = fp32_like(EXACT)
FP32[5] *= 1.02
"""The fp32 reference: rounding everywhere, and row 5 2 % off (a ReLU branch float64 did not take)."""


def test_the_allowance_grows_only_where_fp32_itself_is_off() -> None:
    allowed = allowed_errors(1e-4, FP32, EXACT)
    assert isinstance(allowed, torch.Tensor) and allowed.shape == EXACT.shape
    assert allowed[5].min() > 0.02 * CONDITION_FACTOR * EXACT[5].abs().max() / EXACT.abs().max()
    others = torch.cat([allowed[:5], allowed[6:]])
    assert others.max() < 2e-4, others.max()  # --tolerance + rounding: far below 1e-3
    assert allowed_errors(1e-4, EXACT, EXACT).max() == 1e-4  # fp32 exact: --tolerance
    assert allowed_errors(1e-4, FP32, None) == 1e-4  # no float64 run (bf16, --float64): --tolerance


def test_a_plan_within_fp32_noise_passes_and_says_so() -> None:
    plan = fp32_like(EXACT)
    plan[5] = EXACT[5] * 1.015  # the same branch, other rounding
    verdict = Verdict(1e-4)
    verdict.compare("gradients", "gradient of 'w'", plan, FP32, exact=EXACT)
    assert verdict.failure is None, verdict.failure
    assert "1 tensor(s) beyond --tolerance (up to " in verdict.summary(), verdict.summary()
    assert "only where fp32 itself is that far from float64" in verdict.summary()


def test_a_gradient_off_by_1e_3_fails_beside_an_ill_conditioned_row() -> None:
    verdict = Verdict(1e-4)
    verdict.compare("gradients", "gradient of 'w'", FP32 * 1.001, FP32, exact=EXACT)
    assert verdict.failure is not None
    assert verdict.failure.startswith("gradient of 'w' differs: relative error "), verdict.failure
    assert "relative error 1.000e-03 > 1.9e-04 at element [" in verdict.failure, verdict.failure
    assert "at element [5," not in verdict.failure


def test_a_near_zero_bias_gradient_is_measured_against_the_floor() -> None:
    """A gradient zero in exact arithmetic (a bias before a batch norm) is noise on both sides."""
    exact = torch.zeros(16, dtype=torch.float64)
    noise = 1e-9 * torch.randn(16, generator=GENERATOR, dtype=torch.float64)
    verdict = Verdict(1e-4)
    verdict.compare("gradients", "b", -noise, noise, floor=1e-3, exact=exact)
    assert verdict.failure is None, verdict.failure
    verdict.compare("gradients", "b", noise + 1e-6, noise, floor=1e-3, exact=exact)
    assert verdict.failure is not None and "b differs: relative error 1.000e-03 > " in verdict.failure


def test_without_float64_the_tolerance_is_fixed() -> None:
    verdict = Verdict(1e-4)
    verdict.compare("gradients", "g", EXACT * (1 - 3e-4), EXACT)
    assert verdict.failure == "g differs: relative error 3.000e-04 > 1.0e-04", verdict.failure


def test_nan_fails() -> None:
    verdict = Verdict(1e-4)
    verdict.compare("gradients", "g", torch.full_like(EXACT, float("nan")), FP32, exact=EXACT)
    assert verdict.failure is not None and "g differs: relative error nan" in verdict.failure


def test_bf16_widens_by_its_own_factor_and_names_its_precision() -> None:
    """bf16-mixed: the autocast reference's own error against float64 widens the tolerance by
    `BF16_CONDITION_FACTOR`; a plan within that passes (and says bf16-mixed is that far off), a
    plan twice off fails where the reference is exact."""
    reference = EXACT.clone()
    reference[7] *= 1.3  # bf16 rounding amplified by cancellation: 30 % off in this row
    plan = EXACT.clone()
    plan[7] *= 0.8
    verdict = Verdict(BF16_TOLERANCE, BF16_CONDITION_FACTOR, BF16_MIXED)
    verdict.compare("gradients", "gradient of 'w'", plan, reference, exact=EXACT)
    assert verdict.failure is None, verdict.failure
    assert "only where bf16-mixed itself is that far from float64" in verdict.summary(), verdict.summary()
    wrong = reference.clone()
    wrong[3] *= 2  # a doubled term where bf16 is exact
    verdict = Verdict(BF16_TOLERANCE, BF16_CONDITION_FACTOR, BF16_MIXED)
    verdict.compare("gradients", "gradient of 'w'", wrong, reference, exact=EXACT)
    assert verdict.failure is not None and "at element [3," in verdict.failure, verdict.failure
    assert "2 x the bf16-mixed reference's own error" in verdict.failure
