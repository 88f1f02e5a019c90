"""The memory model's attention row is what the fused (SDPA) attention kernel keeps: the bytes
`runtime.kernels.attention` saves for backward (a saved-tensor hook over unique storages, its
operands excluded) equal `attention_bytes.attention_task_bytes`, in fp32 and under bf16 autocast, and no
Sq x Sk tensor is saved unless a causal mask is combined with another mask (one B x Sq x Sk
mask then, as Hugging Face's SDPA path keeps too). Selective recomputation of the core
(`recompute_core`, both kernels, the math one with attention dropout) keeps exactly that less
`attention_bytes.attention_core_task_bytes`, gives the same gradients, and runs again in backward the
core's matmuls only, not the projections' (counted with a `TorchDispatchMode`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from xdsl.dialects.builtin import bf16, f32

from unityc.cost.attention_bytes import attention_core_task_bytes, attention_task_bytes
from unityc.dialects.pcg import AttentionOp
from unityc.dialects.pcg_types import TensorType
from unityc.runtime.kernels import attention
from unityc.runtime.saved import SavedBytes

B, S, E, HEADS = 2, 128, 32, 4
VIEWS = ("TBackward0", "ViewBackward0", "TransposeBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0")


P = 0.25


def _drop(x: torch.Tensor) -> torch.Tensor:
    """A dropout of the probabilities as the program's (`Context.dropout`: a keep-mask drawn by
    a hash of the element's index, the same when the core runs again)."""
    keep = torch.arange(x.numel(), device=x.device).reshape(x.shape) % 4 != 0
    return x * keep * (1 / (1 - P))


def _case(
    kv_heads: int, rotary: bool, mask: str, causal: bool, autocast: bool, dropout: bool = False,
    recompute_core: bool = False,
) -> tuple[int, int, int]:  # fmt: skip
    """(measured bytes, modelled bytes, largest saved numel) of one attention task."""
    torch.manual_seed(0)
    width = E // HEADS
    x = torch.randn(B, S, E, requires_grad=True)
    wq, wo = (torch.randn(E, E, requires_grad=True) for _ in range(2))
    wk, wv = (torch.randn(kv_heads * width, E, requires_grad=True) for _ in range(2))
    cos = sin = torch.randn(1, 1, S, width) if rotary else None
    additive = None
    if mask == "keys":
        additive = torch.zeros(B, 1, 1, S)
        additive[1, ..., S // 2 :] = torch.finfo(torch.float32).min
    elif mask == "bias":
        additive = torch.randn(1, HEADS, S, S)
    attrs = {"heads": HEADS, "kv_heads": kv_heads, "causal": causal, "dropout": P if dropout else None}
    operands = [x, wq, wk, wv, wo, additive, cos, sin]
    given = [t for t in operands if t is not None]

    def autocast_copy(t: torch.Tensor) -> bool:
        """autocast's bf16 copy of an operand (`StepBuilder.autocast_copies` counts those)."""
        node = t.grad_fn
        while node is not None and node.name() in VIEWS:
            node = node.next_functions[0][0]
        if node is None or node.name() != "ToCopyBackward0":
            return False
        source = node.next_functions[0][0]
        return any(getattr(source, "variable", None) is g for g in given)

    cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
    with SavedBytes.of(given, autocast_copy) as saved, cast:
        out = attention(
            x, x, x, wq, wk, wv, wo, None, None, None, None, additive, HEADS, cos=cos, sin=sin,
            causal=0 if causal else None, kernel=AttentionOp.kernel(attrs),
            dropout=_drop if dropout else None, recompute_core=recompute_core,
        )  # fmt: skip
    assert out.grad_fn is not None
    largest = max((size for size in saved.sizes.values()), default=0)

    def t(*shape: int) -> TensorType:
        return TensorType(list(shape), f32)

    types = [t(B, S, E)] * 3 + [t(E, E), t(kv_heads * width, E), t(kv_heads * width, E), t(E, E)]
    types += [None] * 4 + [t(*additive.shape) if additive is not None else None]
    types += [t(1, 1, S, width)] * 2 if rotary else [None, None]
    result = TensorType([B, S, E], bf16 if autocast else f32)
    modelled = attention_task_bytes(attrs, types, result)
    if recompute_core:
        modelled -= attention_core_task_bytes(attrs, types, result)
    return saved.bytes, modelled, largest


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "kv_heads, rotary, mask, causal",
    [
        (4, False, None, False),
        (2, True, None, True),  # Llama: grouped-query, rotary, is_causal
        (4, False, "keys", False),  # BERT's padding mask
        (2, True, "keys", True),  # Llama with a padding mask: one causal & padding mask built
        (4, False, "bias", False),  # an arbitrary additive mask (T5's position bias, frozen here)
    ],
    ids=["plain", "llama-causal", "keys", "causal-keys", "bias"],
)
def test_fused_attention_saves_what_the_model_counts(kv_heads, rotary, mask, causal, autocast) -> None:
    measured, modelled, largest = _case(kv_heads, rotary, mask, causal, autocast)
    assert measured == modelled
    element = 2 if autocast else 4
    if mask != "bias" and not (causal and mask):
        assert largest < S * S * element, "an Sq x Sk tensor was saved"
    elif causal and mask:
        assert largest == B * S * S * element  # the one causal & padding mask


def test_math_kernel_keeps_the_scores_for_what_sdpa_cannot_express() -> None:
    assert AttentionOp.kernel({"heads": 2, "softcap": 50.0}) == "math"
    assert AttentionOp.kernel({"heads": 2, "dropout": 0.1}) == "math"
    assert AttentionOp.kernel({"heads": 2, "dropout": None, "causal": True}) == "sdpa"


def test_a_key_mask_that_masks_nothing_runs_is_causal() -> None:
    """No sequence padded in this batch: the zero key mask is dropped (HF's SDPA path checks the
    same at run time), so no B x Sq x Sk causal & padding mask is built or kept, and the output
    is the masked one's."""
    torch.manual_seed(0)
    x = torch.randn(B, S, E, requires_grad=True)
    wq, wk, wv, wo = (torch.randn(E, E) / E**0.5 for _ in range(4))
    zero = -(torch.zeros(B, 1, 1, S) + 0.0) * torch.finfo(torch.float32).min  # -0.0: keeps every key
    padded = zero.clone()
    padded[1, ..., S // 2 :] = torch.finfo(torch.float32).min

    def run(mask: torch.Tensor, kernel: str) -> tuple[torch.Tensor, int]:
        with SavedBytes.of([x, wq, wk, wv, wo, mask]) as saved:
            out = attention(
                x, x, x, wq, wk, wv, wo, None, None, None, None, mask, HEADS, causal=0, kernel=kernel
            )  # fmt: skip
        return out, max(saved.sizes.values())

    out, largest = run(zero, "sdpa")
    assert largest < S * S * 4, "an Sq x Sk tensor was saved"
    torch.testing.assert_close(out, run(zero, "math")[0], atol=1e-5, rtol=1e-4)
    out, largest = run(padded, "sdpa")
    assert largest == B * S * S * 4  # padded: the one causal & padding mask, as before
    torch.testing.assert_close(out, run(padded, "math")[0], atol=1e-5, rtol=1e-4)


CORE_CASES = [
    pytest.param(4, False, None, False, False, id="sdpa-plain"),
    pytest.param(2, True, "keys", True, False, id="sdpa-llama-causal-keys"),
    pytest.param(4, False, None, True, True, id="math-dropout-causal"),  # GPT-2, GPT-3
    pytest.param(2, True, "keys", False, True, id="math-dropout-gqa-keys"),
]


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kv_heads, rotary, mask, causal, dropout", CORE_CASES)
def test_recomputing_the_core_keeps_all_but_the_cores_internals(
    kv_heads, rotary, mask, causal, dropout, autocast
) -> None:
    measured, modelled, largest = _case(kv_heads, rotary, mask, causal, autocast, dropout, True)
    assert measured == modelled
    element = 2 if autocast else 4
    assert largest < S * S * element, "an Sq x Sk tensor was kept: the core was not recomputed"
    whole, whole_modelled, _ = _case(kv_heads, rotary, mask, causal, autocast, dropout)
    assert measured < whole
    if not autocast:  # (CPU autocast runs the softmax in bf16 unless a float mask promotes it)
        assert whole == whole_modelled  # the math kernel's causal bool mask too


MATMULS = ("mm", "addmm", "bmm", "baddbmm")
CORES = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_attention_math",
)


class _Ops(TorchDispatchMode):
    """Counts the aten ops run (by name, overload dropped)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _backward_ops(dropout: bool, recompute: str) -> tuple[Counter[str], list[torch.Tensor]]:
    """The aten ops one attention's backward runs (`recompute`: "none", "core" or "whole", the
    op under `torch.utils.checkpoint` as a region recomputing the whole attention), and the
    gradients."""
    torch.manual_seed(0)
    x = torch.randn(B, S, E, requires_grad=True)
    weights = [(torch.randn(E, E) / E**0.5).requires_grad_() for _ in range(4)]
    kernel = AttentionOp.kernel({"heads": HEADS, "dropout": P if dropout else None})

    def run(x: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
        wq, wk, wv, wo = w
        return attention(
            x, x, x, wq, wk, wv, wo, None, None, None, None, None, HEADS, causal=0, kernel=kernel,
            dropout=_drop if dropout else None, recompute_core=recompute == "core",
        )  # fmt: skip

    if recompute == "whole":
        out = torch.utils.checkpoint.checkpoint(run, x, *weights, use_reentrant=False)
    else:
        out = run(x, *weights)
    ops = _Ops()
    with ops:
        out.square().sum().backward()
    return ops.counts, [t.grad for t in (x, *weights)]  # type: ignore[misc]


@pytest.mark.parametrize("dropout", [False, True], ids=["sdpa", "math-dropout"])
def test_recomputing_the_core_runs_no_projection_again(dropout: bool) -> None:
    """The backward of an attention recomputing its core runs the 2-D matmuls (the q, k, v and
    output projections' gradients) of the one not recomputed, no more: a projection run again
    would add one (the attention under a checkpoint of its own, as a region recomputing the
    whole op, does); it runs the core's forward again (its batched matmuls, or SDPA's kernel),
    and the gradients are the same."""
    plain, grads = _backward_ops(dropout, "none")
    core, core_grads = _backward_ops(dropout, "core")
    whole, _ = _backward_ops(dropout, "whole")
    projections = sum(plain[m] for m in ("mm", "addmm"))
    assert sum(core[m] for m in ("mm", "addmm")) == projections
    assert sum(whole[m] for m in ("mm", "addmm")) > projections  # the check can fail
    if dropout:
        # q·kᵀ again, not probs·v: torch's checkpoint stops once probs·v's saved inputs are made
        # again (`compute.attention_core_work` prices that)
        assert core["bmm"] == plain["bmm"] + 1
    else:
        assert sum(core[c] for c in CORES) == sum(plain[c] for c in CORES) + 1
    for a, b in zip(grads, core_grads, strict=True):
        torch.testing.assert_close(a, b)
