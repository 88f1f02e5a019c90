"""--check's fp32 tolerance follows the computation (`runtime/check.py`): a tensor may differ from
the fp32 reference by --tolerance, or by `CONDITION_FACTOR` times the fp32 reference's own error
against float64 where that is larger; a tensor that fp32 computes well keeps --tolerance."""

from __future__ import annotations

import torch

from unityc.runtime.check import CONDITION_FACTOR, Verdict, allowed_error

EXACT = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
FP32 = EXACT * (1 + 1e-4)
"""An fp32 reference 1e-4 away from exact: an ill-conditioned tensor."""


def test_an_ill_conditioned_tensor_allows_what_fp32_itself_errs() -> None:
    assert abs(allowed_error(1e-4, FP32, EXACT) - CONDITION_FACTOR * 1e-4) < 1e-9
    assert allowed_error(1e-4, EXACT, EXACT) == 1e-4  # well conditioned: --tolerance
    assert allowed_error(1e-4, FP32, None) == 1e-4  # no float64 run (bf16, --float64): --tolerance


def test_a_plan_within_fp32_noise_passes_and_says_so() -> None:
    verdict = Verdict(1e-4)
    verdict.compare("gradients", "gradient of 'se.bias'", EXACT * (1 - 3e-4), FP32, exact=EXACT)
    assert verdict.failure is None
    assert "tolerance up to 1.6e-03 where fp32 itself is that far from float64" in verdict.summary()


def test_a_wrong_gradient_fails_even_when_fp32_is_noisy() -> None:
    verdict = Verdict(1e-4)
    verdict.compare("gradients", "gradient of 'se.bias'", EXACT * 1.01, FP32, exact=EXACT)
    assert verdict.failure == (
        "gradient of 'se.bias' differs: relative error 9.899e-03 > 1.6e-03 "
        "(16 x the fp32 reference's own error against float64)"
    ), verdict.failure


def test_without_float64_the_tolerance_is_fixed() -> None:
    verdict = Verdict(1e-4)
    verdict.compare("gradients", "g", EXACT * (1 - 3e-4), FP32)
    assert verdict.failure == "g differs: relative error 4.000e-04 > 1.0e-04"
