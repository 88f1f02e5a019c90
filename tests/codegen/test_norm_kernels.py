"""The runtime's RMS norm and gated-activation kernels: exact against Hugging Face's formulas
(casts included), and what their backward keeps (a saved-tensor hook over unique storages,
parameters excluded) equals the memory model's row (`cost.memory`: the operands it saves plus
`norm_stats_bytes`), in fp32 and under torch.autocast(cpu, bf16). F.layer_norm, what
pcg.layer_norm runs, is held to its row the same way."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from unityc.cost.memory import norm_stats_bytes, saves
from unityc.runtime import kernels

HIDDEN = 16


def saved_bytes(fn, *args: torch.Tensor, autocast: bool = False) -> tuple[int, torch.Tensor]:
    """Bytes of the unique storages fn's backward keeps, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in args if isinstance(p, torch.nn.Parameter)}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            storages[s.data_ptr()] = s.nbytes()
        return t

    mixed = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), mixed:
        out = fn(*args)
    return sum(storages.values()), out


def _x(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    torch.manual_seed(0)
    return (torch.randn(3, 5, HIDDEN) * 2).to(dtype).requires_grad_()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hf", ["llama", "gemma"])
def test_rms_norm_is_hf_exactly(dtype, hf):
    """Forward and gradients against LlamaRMSNorm (weight after the cast back) and GemmaRMSNorm
    (1 + weight, in fp32, one rounding): equal to fp32 rounding; in bf16 the same values."""
    torch.manual_seed(1)
    module = (LlamaRMSNorm if hf == "llama" else GemmaRMSNorm)(HIDDEN, eps=1e-6).to(dtype)
    with torch.no_grad():
        module.weight.copy_(torch.randn(HIDDEN))
    x = _x(dtype)
    extra = {"after_cast": True} if hf == "llama" else {"offset": 1.0}
    ours = kernels.rms_norm(x, module.weight, 1, 1e-6, **extra)
    ref = module(x)
    assert ours.dtype == ref.dtype == dtype
    dy = torch.randn_like(ref)
    got = torch.autograd.grad(ours, (x, module.weight), dy)
    want = torch.autograd.grad(ref, (x, module.weight), dy)
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    assert torch.equal(ours, ref) or (ours - ref).abs().max() <= tol * ref.abs().max()
    for g, w in zip(got, want, strict=True):
        assert (g.float() - w.float()).abs().max() <= tol * w.float().abs().max()


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_keeps_its_memory_row(autocast, dtype):
    """x and the per-row fp32 rstd, as `saves("pcg.rms_norm")` + `norm_stats_bytes` count; the
    decomposed form (what torch's F.rms_norm runs on CPU) keeps two fp32 copies of x besides."""
    assert saves("pcg.rms_norm") == "operands"
    w = torch.nn.Parameter(torch.randn(HIDDEN).to(dtype))
    x = _x(dtype)
    row = x.numel() * x.element_size() + norm_stats_bytes("pcg.rms_norm", 1, tuple(x.shape))
    kept, _ = saved_bytes(lambda a, b: kernels.rms_norm(a * 1, b, 1, 1e-6), x, w, autocast=autocast)
    assert kept == row
    plain, _ = saved_bytes(lambda a, b: F.rms_norm(a * 1, (HIDDEN,), b, 1e-6), x, w, autocast=autocast)
    assert plain >= row + x.numel() * 4


@pytest.mark.parametrize("autocast", [False, True])
def test_layer_norm_keeps_its_memory_row(autocast):
    """F.layer_norm (pcg.layer_norm's kernel) keeps x, its mean and its rstd."""
    w, b = torch.nn.Parameter(torch.randn(HIDDEN)), torch.nn.Parameter(torch.randn(HIDDEN))
    x = _x()
    row = x.numel() * 4 + norm_stats_bytes("pcg.layer_norm", 1, tuple(x.shape))
    kept, _ = saved_bytes(
        lambda a, g, c: F.layer_norm(a * 1, (HIDDEN,), g, c, 1e-5), x, w, b, autocast=autocast
    )
    assert kept == row


@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("autocast", [False, True])
def test_gated_activation_keeps_only_its_operands(act, autocast):
    """act(gate) * up keeps gate and up (the memory row: its operands), torch's own form a
    third tensor, act(gate); the values and gradients are torch's."""
    torch.manual_seed(2)
    dtype = torch.bfloat16 if autocast else torch.float32
    gate = torch.randn(4, 8, 32).to(dtype).requires_grad_()
    up = torch.randn(4, 8, 32).to(dtype).requires_grad_()
    assert saves("pcg.gated_activation") == "operands"

    def plain(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        g, u = g * 1, u * 1
        if act == "silu":
            return F.silu(g) * u
        return F.gelu(g, approximate="tanh" if act == "gelu_tanh" else "none") * u

    kept, ours = saved_bytes(
        lambda g, u: kernels.gated_activation(g * 1, u * 1, act), gate, up, autocast=autocast
    )
    theirs_kept, theirs = saved_bytes(plain, gate, up, autocast=autocast)
    assert kept == 2 * gate.numel() * gate.element_size()
    assert theirs_kept == 3 * gate.numel() * gate.element_size()
    assert torch.equal(ours, theirs)
    dy = torch.randn_like(ours)
    got = torch.autograd.grad(ours, (gate, up), dy)
    want = torch.autograd.grad(theirs, (gate, up), dy)
    for g, w in zip(got, want, strict=True):
        assert (g.float() - w.float()).abs().max() <= 1e-6 * w.float().abs().max() + (
            dtype == torch.bfloat16
        ) * 1e-2
