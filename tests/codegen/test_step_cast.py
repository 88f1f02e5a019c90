"""`runtime.precision.step_cast`: a view of a weight read in bf16 (GPT-2's transposed Conv1D
weight) is taken of the weight's bf16 copy, made once per `step_region` and shared by its
micro-batches, as autocast shares a weight's own cast; the gradients are those of autocast
casting the view on every forward."""

from __future__ import annotations

import torch

from unityc.runtime.precision import BF16_MIXED, autocast, step_cast, step_region
from unityc.runtime.saved import SavedBytes

CPU = torch.device("cpu")


def _forward(x: torch.Tensor, w: torch.Tensor, shared: bool) -> torch.Tensor:
    with autocast(BF16_MIXED, CPU):
        view = (step_cast(w) if shared else w).permute((1, 0))
        return (x @ view).float().square().sum()


def test_micro_batches_in_flight_share_one_copy_and_the_gradients_match() -> None:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(6, 8))
    xs = [torch.randn(4, 8, requires_grad=True) for _ in range(2)]  # mm keeps w for their gradient
    grads, peaks = {}, {}
    for shared in (False, True):
        w.grad = None
        counter = SavedBytes.of([w])
        with step_region(BF16_MIXED, CPU):
            losses = []
            for x in xs:  # both forwards before either backward, as a pipeline stage runs them
                with counter.forward():
                    losses.append(_forward(x, w, shared))
            for loss in losses:
                loss.backward()
        peaks[shared] = counter.peak_bytes
        assert w.grad is not None
        grads[shared] = w.grad.clone()
    assert peaks[False] - peaks[True] == 6 * 8 * 2, peaks  # one bf16 copy of w fewer
    assert torch.equal(grads[True], grads[False])  # bf16(w)^T is bf16(w^T): the same values


def test_outside_a_step_region_or_autocast_each_call_casts_or_passes_through() -> None:
    w = torch.nn.Parameter(torch.randn(3, 5))
    frozen = torch.randn(3, 5)
    assert step_cast(w) is w  # no autocast: the fp32 weight
    with autocast(BF16_MIXED, CPU):
        first, second = step_cast(w), step_cast(w)
        assert first is not None and second is not None
        assert first.dtype == torch.bfloat16 and first is not second  # no step region: per call
    with step_region(BF16_MIXED, CPU), autocast(BF16_MIXED, CPU):
        assert step_cast(w) is step_cast(w)  # once per step
        assert step_cast(frozen) is not step_cast(frozen)  # not a trained leaf: per call
        with torch.no_grad():
            assert step_cast(w) is not step_cast(w)  # no gradients: not the shared copy
    with step_region(BF16_MIXED, CPU), autocast(BF16_MIXED, CPU):
        assert step_cast(w) is not first  # a new step, a new copy
