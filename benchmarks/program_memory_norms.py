"""The runtime's RMS norm and gated-activation kernels against what torch and Hugging Face run:
bytes kept for backward (a saved-tensor hook over unique storages, parameters excluded) and the
time of a forward + backward (alternating runs in one process, medians), at Llama shapes.

    python benchmarks/program_memory_norms.py [--rows 4096] [--hidden 512] [--ffn 1376] [--reps 30]

Rows: `pcg.rms_norm`'s kernel (`runtime.kernels.rms_norm`), `F.rms_norm` (torch's; on CPU its
decomposition), HF's `LlamaRMSNorm`; `pcg.gated_activation`'s kernel against `F.silu(g) * u`
(HF's LlamaMLP), each in fp32 and under torch.autocast(cpu, bf16) with bf16 inputs (what a
linear gives under autocast). Results: program_memory_norms_results.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from unityc.runtime import kernels


def saved_bytes(fn: Callable[..., torch.Tensor], args: tuple[torch.Tensor, ...], mixed: bool) -> int:
    params = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.nn.Parameter)}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in params:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _autocast(mixed):
        fn(*args)
    return sum(storages.values())


def _autocast(mixed: bool) -> contextlib.AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16) if mixed else contextlib.nullcontext()


def step_time(fn: Callable[..., torch.Tensor], args: tuple[torch.Tensor, ...], mixed: bool) -> float:
    for a in args:
        a.grad = None
    start = time.perf_counter()
    with _autocast(mixed):
        out = fn(*args)
    out.backward(torch.ones_like(out))
    return time.perf_counter() - start


def compare(
    cases: dict[str, Callable[..., torch.Tensor]], args: tuple[torch.Tensor, ...], mixed: bool, reps: int
) -> dict[str, tuple[int, float]]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(3):
        for fn in cases.values():
            step_time(fn, args, mixed)
    for _ in range(reps):  # alternating, so load changes hit every case alike
        for name, fn in cases.items():
            times[name].append(step_time(fn, args, mixed))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    return {name: (saved_bytes(fn, args, mixed), medians[name]) for name, fn in cases.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4096, help="tokens (batch x sequence)")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--ffn", type=int, default=1376)
    p.add_argument("--reps", type=int, default=30)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print(f"rows {a.rows}, hidden {a.hidden}, ffn {a.ffn}, {a.reps} alternating reps, 1 thread")
    print("| op | precision | kernel | saved MB | fwd+bwd ms | saved / ours | time / ours |")
    print("|---|---|---|---|---|---|---|")
    for mixed in (False, True):
        dtype = torch.bfloat16 if mixed else torch.float32
        label = "bf16-mixed" if mixed else "fp32"
        hf = LlamaRMSNorm(a.hidden, eps=1e-6)
        x = torch.randn(a.rows, a.hidden).requires_grad_()  # the fp32 residual stream
        norms = {
            "runtime.kernels.rms_norm": lambda x, w: kernels.rms_norm(x, w, 1, 1e-6, after_cast=True),
            "F.rms_norm": lambda x, w: F.rms_norm(x, (a.hidden,), w, 1e-6),
            "HF LlamaRMSNorm": lambda x, w, hf=hf: hf(x),
        }
        _table("rms_norm", label, compare(norms, (x, hf.weight), mixed, a.reps))
        gate = torch.randn(a.rows, a.ffn, dtype=dtype).requires_grad_()
        up = torch.randn(a.rows, a.ffn, dtype=dtype).requires_grad_()
        gated = {
            "runtime.kernels.gated_activation": lambda g, u: kernels.gated_activation(g, u, "silu"),
            "F.silu(g) * u (HF)": lambda g, u: F.silu(g) * u,
        }
        _table("SwiGLU", label, compare(gated, (gate, up), mixed, a.reps))


def _table(op: str, label: str, rows: dict[str, tuple[int, float]]) -> None:
    ours_bytes, ours_time = next(iter(rows.values()))
    for name, (nbytes, seconds) in rows.items():
        print(
            f"| {op} | {label} | {name} | {nbytes / 1e6:.2f} | {seconds * 1e3:.2f} | "
            f"{nbytes / ours_bytes:.2f} | {seconds / ours_time:.2f} |"
        )


if __name__ == "__main__":
    main()
