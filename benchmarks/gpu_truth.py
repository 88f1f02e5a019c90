"""Ground truth on a real GPU: the cost model's ops, memory model and generated programs, measured.

    python benchmarks/gpu_truth.py --write-preset   # on the machine with the GPU, repository root
    python benchmarks/gpu_truth.py --device cpu     # the same phases at tiny shapes (the test suite)

Three phases, each with its own time budget (past it, the rest of the phase is skipped and the
results file says so), designed to finish in under 8 minutes on one H100:

1. **ops**: the cost model's op table at real layer shapes (the linears of BERT-Large, GPT-2 and
   Llama-3-8B layers, their attention, ResNet conv2d, layer norm, GELU, an add, embedding
   backward) in fp32, TF32 and bf16, each timed forward + backward (wall clock over a loop, so a
   small op's launch cost counts as in a program) beside `cost.compute.op_cost`'s roofline time
   on the preset's device kind; then the kind's compute efficiency (matmul-like rows), memory
   efficiency (the other rows) and kernel latency (a tiny op) are fitted and every row is priced
   again: Kendall's tau and the median error, before and after;
2. **programs**: single-device plans (`-p data-parallel` on a one-device machine; with
   `recompute` on every op via `-p zero{... recompute=true}`) of zoo models, `hf:gpt2` and a
   Llama layer stack (fp32 and bf16-mixed) emitted with `-t torch` and run under torchrun for a
   few steps: measured step time and peak memory (`torch.cuda.max_memory_allocated`, which the
   runtime reports on CUDA) beside the estimate's iteration time (preset and calibrated) and
   peak memory (without the framework reserve, which the allocator does not count);
3. **check**: each program that ran is run again with `--check` against the single-device model.

It writes a markdown file (default `benchmarks/gpu_truth_results.md`): device, torch and CUDA
versions, each row estimate against measurement, the fitted figures and the preset's.
`--write-preset` records the fitted figures in `unityc/machine/calibration.py` for the preset
kind of the GPU found (H100, A100, V100), with their source; without it the patch is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from unityc.codegen import emit_program
from unityc.cost.compute import MATMUL_LIKE, OpCost, Piece, op_cost
from unityc.cost.estimate import Estimate, estimate_module
from unityc.dialects.source import read_module
from unityc.frontend import ModelSpec, import_model
from unityc.machine import calibration
from unityc.machine.calibration import Calibration
from unityc.machine.loader import GB, GIB, load_machine, machine_from_dict
from unityc.machine.presets import A100_SXM_80GB, H100_SXM_80GB, V100_SXM2_16GB
from unityc.machine.spec import DeviceKind, Machine
from unityc.runtime import kernels as rk
from unityc.tools.importer import record_precision

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COMMAND = "python benchmarks/gpu_truth.py --write-preset"
"""The one command to run on the GPU machine (repository root, the project's environment)."""
BUDGET_S = {"ops": 100.0, "programs": 230.0, "check": 90.0}
"""Seconds per phase on a GPU (8 minutes in all, with imports and start-up); --device cpu
scales them down."""
MIN_LEFT_S = 20.0
"""A program or check is not started with less than this left of its phase."""

# --- phase 1: ops -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OpCase:
    """One row of the op table: a pcg op at one shape, and the torch code a program runs for it."""

    label: str
    kind: str
    attrs: tuple[tuple[str, Any], ...]
    operands: tuple[tuple[tuple[int, ...], str] | None, ...]
    """(shape, 'float' or 'i64') per operand; None for an absent optional one."""
    result: tuple[int, ...]
    run: Callable[..., torch.Tensor]
    chain: int = 1
    """Run as a chain of this many (a shape-preserving unary op) under one backward call, and
    report the time per op: a program's ops share one `backward()`, whose own overhead would
    otherwise count as the op's."""


def linear(label: str, m: int, k: int, n: int) -> OpCase:
    return OpCase(
        label, "pcg.linear", (), (((m, k), "float"), ((n, k), "float"), ((n,), "float")), (m, n), F.linear
    )


def attention(label: str, b: int, s: int, e: int, heads: int, kv_heads: int) -> OpCase:
    ekv = e * kv_heads // heads

    def run(
        x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, wo: torch.Tensor
    ) -> torch.Tensor:
        return rk.attention(x, x, x, wq, wk, wv, wo, None, None, None, None, None, heads)

    x = ((b, s, e), "float")
    operands = (x, x, x, ((e, e), "float"), ((ekv, e), "float"), ((ekv, e), "float"), ((e, e), "float"))
    return OpCase(label, "pcg.attention", (("heads", heads),), (*operands, *(None,) * 7), (b, s, e), run)


def conv2d(label: str, n: int, c: int, hw: int, o: int, kernel: int, stride: int) -> OpCase:
    pad = kernel // 2
    out = (hw + 2 * pad - kernel) // stride + 1

    def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, None, stride, pad)

    operands = (((n, c, hw, hw), "float"), ((o, c, kernel, kernel), "float"), None)
    return OpCase(label, "pcg.conv2d", (), operands, (n, o, out, out), run)


def layer_norm(label: str, m: int, e: int) -> OpCase:
    def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (e,), w, b)

    return OpCase(
        label, "pcg.layer_norm", (), (((m, e), "float"), ((e,), "float"), ((e,), "float")), (m, e), run
    )


def gelu(label: str, m: int, e: int, chain: int = 1) -> OpCase:
    return OpCase(label, "pcg.gelu", (("tanh", False),), (((m, e), "float"),), (m, e), F.gelu, chain)


def add(label: str, m: int, e: int) -> OpCase:
    return OpCase(label, "pcg.add", (), (((m, e), "float"), ((m, e), "float")), (m, e), torch.add)


def embedding(label: str, tokens: int, vocab: int, e: int) -> OpCase:
    def run(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, table)

    return OpCase(label, "pcg.embedding", (), (((tokens,), "i64"), ((vocab, e), "float")), (tokens, e), run)


def gpu_cases() -> list[OpCase]:
    """Layer shapes of the models the zoo and the `hf:` importer bring (per-GPU batches of the
    Unity paper: BERT-Large 4 x 512 tokens; GPT-2 8 x 1024; Llama-3-8B 1 x 4096)."""
    return [
        gelu("launch: gelu 8x8 (kernel latency), a chain of 64", 8, 8, 64),
        linear("BERT-Large QKV/out 2048x1024x1024", 2048, 1024, 1024),
        linear("BERT-Large FFN up 2048x1024x4096", 2048, 1024, 4096),
        linear("BERT-Large FFN down 2048x4096x1024", 2048, 4096, 1024),
        linear("GPT-2 QKV 8192x768x2304", 8192, 768, 2304),
        linear("GPT-2 FFN up 8192x768x3072", 8192, 768, 3072),
        linear("GPT-2 LM head 8192x768x50257", 8192, 768, 50257),
        linear("Llama-8B q 4096x4096x4096", 4096, 4096, 4096),
        linear("Llama-8B kv 4096x4096x1024", 4096, 4096, 1024),
        linear("Llama-8B FFN 4096x4096x14336", 4096, 4096, 14336),
        linear("Llama-8B FFN down 4096x14336x4096", 4096, 14336, 4096),
        attention("BERT-Large attention 4x512, 16 heads", 4, 512, 1024, 16, 16),
        attention("GPT-2 attention 8x1024, 12 heads", 8, 1024, 768, 12, 12),
        attention("Llama-8B attention 1x4096, 32/8 heads", 1, 4096, 4096, 32, 8),
        conv2d("ResNet conv 7x7/2 64x3x224", 64, 3, 224, 64, 7, 2),
        conv2d("ResNet conv 3x3 64x256x14", 64, 256, 14, 256, 3, 1),
        conv2d("ResNet conv 1x1 64x1024x14", 64, 1024, 14, 256, 1, 1),
        layer_norm("layer norm 2048x1024", 2048, 1024),
        layer_norm("layer norm 4096x4096", 4096, 4096),
        gelu("GELU 2048x4096", 2048, 4096),
        add("add 8192x768", 8192, 768),
        embedding("GPT-2 embedding backward 8192 of 50257x768", 8192, 50257, 768),
        embedding("BERT embedding backward 2048 of 30522x1024", 2048, 30522, 1024),
    ]


def cpu_cases() -> list[OpCase]:
    """The same kinds of op at tiny shapes (the CPU path the test suite runs)."""
    return [
        gelu("launch: gelu 8x8 (kernel latency), a chain of 64", 8, 8, 64),
        linear("linear 64x64x128", 64, 64, 128),
        linear("linear 128x128x256", 128, 128, 256),
        linear("linear 128x256x64", 128, 256, 64),
        attention("attention 2x32, 4 heads", 2, 32, 64, 4, 4),
        attention("attention 1x32, 4/2 heads", 1, 32, 64, 4, 2),
        conv2d("conv 3x3 4x16x8", 4, 16, 8, 16, 3, 1),
        layer_norm("layer norm 256x64", 256, 64),
        gelu("GELU 256x256", 256, 256),
        add("add 256x256", 256, 256),
        embedding("embedding backward 256 of 1000x64", 256, 1000, 64),
    ]


DTYPES = {"f32": (torch.float32, False), "tf32": (torch.float32, True), "bf16": (torch.bfloat16, False)}
"""Name: (torch dtype, TF32 matmuls). The pieces the cost model sees are f32 for tf32 rows; the
device kind is priced with `allow_tf32` then."""


def pieces(case: OpCase, dtype: str) -> tuple[list[Piece | None], list[Piece]]:
    element = "f32" if dtype == "tf32" else dtype
    operands = [
        None if o is None else Piece(o[0], element if o[1] == "float" else "i64") for o in case.operands
    ]
    return operands, [Piece(case.result, element)]


def priced(case: OpCase, dtype: str, kind: DeviceKind) -> OpCost:
    operands, results = pieces(case, dtype)
    device = dataclasses.replace(kind, allow_tf32=dtype == "tf32")
    return op_cost(case.kind, dict(case.attrs), operands, results, device)


def inputs(case: OpCase, dtype: str, device: torch.device) -> list[torch.Tensor]:
    float_dtype = DTYPES[dtype][0]
    out = []
    for operand in case.operands:
        if operand is None:
            continue
        shape, role = operand
        if role == "i64":
            vocab = case.operands[1][0][0]  # type: ignore[index]
            out.append(torch.randint(0, vocab, shape, device=device))
            continue
        t = torch.randn(shape, device=device, dtype=float_dtype) * shape[-1] ** -0.5
        out.append(t.requires_grad_())
    # attention reads one x three times (self-attention); the table lists it once per operand
    return out[2:] if case.kind == "pcg.attention" else out


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, budget_s: float) -> float:
    """Seconds per call: the median of 3 rounds of back-to-back calls (wall clock, synchronized
    at the ends of each round), after 2 warm-up calls; rounds sized to the budget."""
    fn()
    fn()
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    once = max(time.perf_counter() - start, 1e-6)
    reps = max(1, min(200, int(budget_s / 3 / once)))
    rounds = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        synchronize(device)
        rounds.append((time.perf_counter() - start) / reps)
    return statistics.median(rounds)


def measure_op(case: OpCase, dtype: str, device: torch.device, budget_s: float) -> float:
    """Seconds of one forward + backward of the op (every float operand wants a gradient, as
    `op_cost` assumes)."""
    torch.backends.cuda.matmul.allow_tf32 = DTYPES[dtype][1]
    torch.backends.cudnn.allow_tf32 = DTYPES[dtype][1]
    args = inputs(case, dtype, device)
    seed = torch.randn(case.result, device=device, dtype=DTYPES[dtype][0])

    def step() -> None:
        for a in args:
            a.grad = None
        out = case.run(*args)
        for _ in range(case.chain - 1):
            out = case.run(out)
        out.backward(seed)

    return timed(step, device, budget_s) / case.chain


@dataclass(frozen=True)
class OpRow:
    case: OpCase
    dtype: str
    measured_s: float
    before: OpCost
    after: OpCost | None = None


def fit(rows: Sequence[OpRow], kind: DeviceKind) -> tuple[Calibration, dict[str, float]]:
    """Compute efficiency, memory efficiency and kernel latency of `kind` that make the cost
    model's own roofline (`op_cost`) best explain the measured rows: the mean |log(estimate /
    measured)| is minimized by a coordinate search (each figure in turn over x1/4..x4 of its
    current value, three rounds), started from direct estimates: the latency from the tiny op,
    each efficiency as the median over the rows of the one that explains that row alone
    (matmul-like rows for compute, the others for memory). Also returns those direct compute
    efficiencies per dtype, for the report."""
    tiny = [r for r in rows if r.case.label.startswith("launch:")]
    latency = statistics.median(r.measured_s / (r.before.fwd.kernels + r.before.bwd.kernels) for r in tiny)
    compute: dict[str, list[float]] = {}
    memory: list[float] = []
    for r in rows:
        if r in tiny:
            continue
        left = max(r.measured_s - latency * (r.before.fwd.kernels + r.before.bwd.kernels), 1e-9)
        if r.case.kind in MATMUL_LIKE:
            device = dataclasses.replace(kind, allow_tf32=r.dtype == "tf32")
            rate = device.op_flops("f32" if r.dtype == "tf32" else r.dtype, True)
            compute.setdefault(r.dtype, []).append((r.before.fwd.flops + r.before.bwd.flops) / rate / left)
        else:
            memory.append((r.before.fwd.bytes + r.before.bwd.bytes) / kind.memory_bandwidth / left)
    per_dtype = {d: statistics.median(v) for d, v in compute.items()}
    flat = list(itertools.chain.from_iterable(compute.values()))
    figures = {
        "compute_efficiency": min(1.0, max(1e-3, statistics.median(flat or [kind.compute_efficiency]))),
        "memory_efficiency": min(1.0, max(1e-3, statistics.median(memory or [kind.memory_efficiency]))),
        "kernel_latency": latency,
    }

    def loss(candidate: dict[str, float]) -> float:
        k = dataclasses.replace(
            kind,
            compute_efficiency=candidate["compute_efficiency"],
            memory_efficiency=candidate["memory_efficiency"],
            kernel_latency=candidate["kernel_latency"],
        )
        total = 0.0
        for r in rows:
            c = priced(r.case, r.dtype, k)
            total += abs(math.log(max(c.fwd_s + c.bwd_s, 1e-12) / r.measured_s))
        return total / len(rows)

    steps = [4 ** (i / 12 - 1) for i in range(25)]  # x1/4 .. x4
    for _ in range(3):
        for name in figures:
            ceiling = 1.0 if name.endswith("efficiency") else 1.0 - 1e-9
            values = {
                min(ceiling, max(1e-4 if name != "kernel_latency" else 0.0, figures[name] * f)) for f in steps
            }
            figures[name] = min(sorted(values), key=lambda v: loss({**figures, name: v}))
    return Calibration(**figures, source=source_line()), per_dtype


def calibrated_kind(kind: DeviceKind, c: Calibration) -> DeviceKind:
    return dataclasses.replace(
        kind,
        compute_efficiency=c.compute_efficiency,
        memory_efficiency=c.memory_efficiency,
        kernel_latency=c.kernel_latency,
    )


# --- phase 2 and 3: programs ------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    name: str
    spec: ModelSpec
    precision: str = "fp32"
    recompute: bool = False


LLAMA_8B_LAYERS = (
    ("hidden", "4096"), ("heads", "32"), ("kv_heads", "8"), ("ffn", "14336"), ("layers", "2"),
    ("vocab", "32000"), ("seq", "512"),
)  # fmt: skip
MLP_4096 = (("in_features", "4096"), ("hidden_dims", "[4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096]"))
GPU_PROGRAMS = [  # most telling first: a phase past its budget skips the rest
    Program("bert", ModelSpec("bert", "paper", batch=4)),
    Program("hf:gpt2", ModelSpec("hf:gpt2", "paper", batch=8)),
    Program("hf:gpt2 bf16", ModelSpec("hf:gpt2", "paper", batch=8), "bf16-mixed"),
    Program("llama-8b x2", ModelSpec("hf:llama", "paper", batch=2, overrides=LLAMA_8B_LAYERS)),
    Program(
        "llama-8b x2 recompute",
        ModelSpec("hf:llama", "paper", batch=2, overrides=LLAMA_8B_LAYERS),
        recompute=True,
    ),
    Program(
        "llama-8b x2 bf16", ModelSpec("hf:llama", "paper", batch=2, overrides=LLAMA_8B_LAYERS), "bf16-mixed"
    ),
    Program("mlp 4096", ModelSpec("mlp", "paper", batch=256, overrides=MLP_4096)),
    Program("resnext50", ModelSpec("resnext50", "paper", batch=32)),
]
CPU_PROGRAMS = [
    Program("mlp", ModelSpec("mlp", "small", batch=16)),
    Program("bert", ModelSpec("bert", "small", batch=4)),
    Program("hf:gpt2", ModelSpec("hf:gpt2", "small", batch=2)),
    Program("hf:llama", ModelSpec("hf:llama", "small", batch=2)),
    Program("hf:llama recompute", ModelSpec("hf:llama", "small", batch=2), recompute=True),
    Program("hf:llama bf16", ModelSpec("hf:llama", "small", batch=2), "bf16-mixed"),
]


@dataclass
class ProgramRow:
    program: Program
    before: Estimate | None = None
    after: Estimate | None = None
    measured_ms: float | None = None
    measured_peak: int | None = None
    check: str = "not run"
    error: str = ""
    path: Path | None = None


def estimated_peak(e: Estimate) -> float:
    """The estimate's peak memory of the fullest device without the framework reserve (the CUDA
    context and workspaces, which `max_memory_allocated` does not count)."""
    return max(d.memory.total - d.memory.reserved for d in e.devices)


def machine_dict(kind: DeviceKind, name: str) -> dict[str, Any]:
    """A one-device machine spec of `kind` (as a TOML spec file holds it)."""
    return {
        "name": name,
        "kinds": {
            "gpu": {
                "flops_tflops": {dtype: rate / 1e12 for dtype, rate in kind.flops},
                "memory_bandwidth_gbs": kind.memory_bandwidth / GB,
                "memory_gib": kind.memory / GIB,
                "compute_efficiency": kind.compute_efficiency,
                "memory_efficiency": kind.memory_efficiency,
                "kernel_latency_us": kind.kernel_latency * 1e6,
                **({"vector_gflops": kind.vector_flops / 1e9} if kind.vector_flops else {}),
                **({"cold_bandwidth_gbs": kind.cold_bandwidth / GB} if kind.cold_bandwidth else {}),
                **({"scatter_row_ns": kind.scatter_row_time * 1e9} if kind.scatter_row_time else {}),
            }
        },
        "links": {"intra_socket": {"bandwidth_gbs": 1000, "latency_us": 1}},
        "nodes": {"devices_per_socket": 1, "kind": "gpu"},
    }


def toml(data: dict[str, Any]) -> str:
    """The few TOML forms `machine_dict` uses."""

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)

    lines = [f"name = {value(data['name'])}"]
    for kind, table in data["kinds"].items():
        lines += [f"[kinds.{kind}]", *(f"{k} = {value(v)}" for k, v in table.items())]
    lines += ["[links]", *(f"{k} = {value(v)}" for k, v in data["links"].items())]
    lines += ["[nodes]", *(f"{k} = {value(v)}" for k, v in data["nodes"].items())]
    return "\n".join(lines) + "\n"


def run_command(command: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Exit status and output tail; 124 past the timeout, after ending the command's whole
    process group (torchrun's workers too, so none keeps the GPU)."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        return 124, (out or "")[-1500:] + f"\n(timed out after {timeout:.0f} s)"
    return process.returncode, out[-1500:]


def build_program(p: Program, machine_ref: str, work: Path, timeout: float) -> Path:
    """Import, plan on the one device (recompute on every op if asked), emit; the plan file."""
    module = import_model(p.spec)
    if p.precision != "fp32":
        record_precision(module, p.precision)
    work, stem = work.resolve(), p.name.replace(":", "-").replace(" ", "-")
    source, plan = work / f"{stem}.mlir", work / f"{stem}-plan.mlir"
    source.write_text(str(module))
    option = (
        f'zero{{machine="{machine_ref}" stage=1 recompute=true}}'
        if p.recompute
        else f'data-parallel{{machine="{machine_ref}"}}'
    )
    status, out = run_command(
        [sys.executable, "-m", "unityc.tools.opt", str(source), "-p", option, "-o", str(plan)], timeout
    )
    if status:
        raise RuntimeError(f"planning failed: {out.strip().splitlines()[-1] if out.strip() else status}")
    return plan


def last_line(output: str) -> str:
    """The last line of a command's output, fit for a table cell."""
    lines = output.strip().splitlines()
    return (lines[-1][:200] if lines else "").replace("|", "/")


def torchrun(program: Path, args: list[str], timeout: float) -> tuple[int, str]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=1",
        str(program),
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return run_command(command, timeout, env)


# --- the report -------------------------------------------------------------------------------


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-a: (concordant - discordant pairs) / all pairs."""
    pairs = list(itertools.combinations(range(len(xs)), 2))
    if not pairs:
        return float("nan")
    score = sum(
        ((xs[i] - xs[j]) * (ys[i] - ys[j]) > 0) - ((xs[i] - xs[j]) * (ys[i] - ys[j]) < 0) for i, j in pairs
    )
    return score / len(pairs)


def summary(predicted: Sequence[float], measured: Sequence[float]) -> str:
    if not predicted:
        return "no rows"
    errors = [abs(p - m) / m for p, m in zip(predicted, measured, strict=True)]
    tau = kendall_tau(predicted, measured)
    ranked = f"Kendall tau {tau:.3f}" if len(predicted) > 1 else "Kendall tau n/a (one row)"
    return f"{ranked}, median error {statistics.median(errors) * 100:.1f} %"


def error(p: float, m: float) -> str:
    return f"{(p - m) / m * 100:+.1f} %"


def source_line() -> str:
    return f"{device_name()}, {versions()}, {datetime.date.today().isoformat()}, `{RAN}`"


def device_name() -> str:
    if torch.cuda.is_available() and DEVICE.type == "cuda":
        return torch.cuda.get_device_name(DEVICE)
    return f"CPU ({platform.processor() or platform.machine()}, 1 thread)"


def versions() -> str:
    return f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}"


def preset_kind(device: torch.device) -> tuple[DeviceKind, str]:
    """The preset device kind for the device found, and how it was chosen."""
    if device.type == "cpu":
        return load_machine("cpu:1").kinds[0], "cpu:1's core (the `cpu:P` preset)"
    name = torch.cuda.get_device_name(device)
    for tag, kind in (("H100", H100_SXM_80GB), ("A100", A100_SXM_80GB), ("V100", V100_SXM2_16GB)):
        if tag in name:
            return kind, f"{kind.name} (preset, matched by '{tag}' in '{name}')"
    if "H200" in name:  # no preset: the H100's compute with the H200 datasheet's HBM3e
        kind = dataclasses.replace(H100_SXM_80GB, name="H200", memory_bandwidth=4800 * GB, memory=141e9)
        return kind, "H100's rates with the H200 datasheet's 4.8 TB/s and 141 GB (no H200 preset)"
    kind = dataclasses.replace(H100_SXM_80GB, name=name)
    return kind, f"H100's figures (no preset matches '{name}')"


DEVICE = torch.device("cpu")
RAN = COMMAND
"""The command of this run, as the results and a recorded calibration name it."""


def cells(*values: object) -> str:
    return "| " + " | ".join(str(v) for v in values) + " |"


def op_lines(ops: list[OpRow]) -> list[str]:
    lines = ["## 1. Ops: the cost model's table, forward + backward", ""]
    lines.append(
        cells(
            "op", "dtype", "measured ms", "estimate ms (preset)", "error", "estimate ms (calibrated)", "error"
        )
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|")
    for r in ops:
        before = r.before.fwd_s + r.before.bwd_s
        after = (r.after.fwd_s + r.after.bwd_s) if r.after else float("nan")
        m = r.measured_s
        lines.append(
            cells(r.case.label, r.dtype, f"{m * 1e3:.4f}", f"{before * 1e3:.4f}", error(before, m),
                  f"{after * 1e3:.4f}", error(after, m))
        )  # fmt: skip
    measured = [r.measured_s for r in ops]
    before_s = [r.before.fwd_s + r.before.bwd_s for r in ops]
    after_s = [r.after.fwd_s + r.after.bwd_s for r in ops if r.after]
    lines += ["", f"- before calibration: {summary(before_s, measured)}"]
    lines += [
        f"- after calibration: {summary(after_s, measured)}" if after_s else "- after calibration: not fitted"
    ]
    return lines


def calibration_lines(fitted: tuple[Calibration, dict[str, float]] | None, kind: DeviceKind) -> list[str]:
    lines = ["## Calibration (fitted to the op rows)", ""]
    if fitted is None:
        return [*lines, "Not fitted: no op row was measured."]
    c, per_dtype = fitted
    lines += [cells("figure", "preset", "fitted"), "|---|---:|---:|"]
    lines.append(
        cells(
            "compute efficiency (matmul-like rows)",
            f"{kind.compute_efficiency:.3f}",
            f"{c.compute_efficiency:.3f}",
        )
    )
    for dtype, value in sorted(per_dtype.items()):
        label = f"compute efficiency, {dtype} rows alone (direct, latency subtracted)"
        lines.append(cells(label, "", f"{value:.3f}"))
    lines.append(
        cells("memory efficiency (other rows)", f"{kind.memory_efficiency:.3f}", f"{c.memory_efficiency:.3f}")
    )
    latency = (f"{kind.kernel_latency * 1e6:.2f}", f"{c.kernel_latency * 1e6:.2f}")
    lines.append(cells("kernel latency (us per op and pass)", *latency))
    return [*lines, "", f"Source recorded with them: {c.source}"]


def program_lines(programs: list[ProgramRow]) -> list[str]:
    lines = ["## 2. Programs: one device, estimate against measurement", ""]
    lines.append(
        cells("program", "precision", "recompute", "measured ms", "estimate ms (preset)", "error",
              "estimate ms (calibrated)", "error", "measured peak MiB", "estimated peak MiB", "memory error")
    )  # fmt: skip
    lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ran: list[tuple[ProgramRow, Estimate, Estimate, float]] = []
    for r in programs:
        p = r.program
        if r.measured_ms is None or r.before is None or r.after is None:
            lines.append(cells(p.name, p.precision, p.recompute, r.error, *[""] * 7))
            continue
        ran.append((r, r.before, r.after, r.measured_ms))
        before, after, m = r.before.iteration_s * 1e3, r.after.iteration_s * 1e3, r.measured_ms
        peak = estimated_peak(r.before) / 2**20
        if r.measured_peak is None:
            memory = (f"n/a ({DEVICE.type})", f"{peak:.1f}", "n/a")
        else:
            memory = (f"{r.measured_peak / 2**20:.1f}", f"{peak:.1f}", error(peak, r.measured_peak / 2**20))
        times = (f"{m:.2f}", f"{before:.2f}", error(before, m), f"{after:.2f}", error(after, m))
        lines.append(cells(p.name, p.precision, p.recompute, *times, *memory))
    measured = [m for *_, m in ran]
    lines += [
        "",
        f"- step time before calibration: {summary([b.iteration_s * 1e3 for _, b, _, _ in ran], measured)}",
    ]
    lines += [
        f"- step time after calibration: {summary([a.iteration_s * 1e3 for _, _, a, _ in ran], measured)}"
    ]
    lines += ["- issue 30 asks Kendall tau >= 0.8 and median error <= 20 %, before and after calibration"]
    peaks = [(estimated_peak(b), r.measured_peak) for r, b, _, _ in ran if r.measured_peak]
    if peaks:
        worst = max(abs(e - m) / m for e, m in peaks)
        lines.append(
            f"- memory: worst peak error {worst * 100:.1f} % over {len(peaks)} program(s) (issue 30: <= 10 %)"
        )
    else:
        lines.append(
            f"- memory: not measured on {DEVICE.type} (`torch.cuda.max_memory_allocated` needs CUDA)"
        )
    return lines


def write_results(
    path: Path,
    head: list[str],
    ops: list[OpRow],
    fitted: tuple[Calibration, dict[str, float]] | None,
    kind: DeviceKind,
    programs: list[ProgramRow],
    skipped: list[str],
) -> None:
    lines = [*head, "", *op_lines(ops), "", *calibration_lines(fitted, kind), "", *program_lines(programs)]
    lines += ["", f"## 3. `--check` on {DEVICE.type} against the single-device model", ""]
    lines += [cells("program", "result"), "|---|---|", *(cells(r.program.name, r.check) for r in programs)]
    lines += ["", "## Skipped", "", *([f"- {s}" for s in skipped] or ["- nothing"])]
    path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    global DEVICE, RAN
    RAN = " ".join(["python benchmarks/gpu_truth.py", *(sys.argv[1:] if argv is None else argv)])
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--out", default=str(HERE / "gpu_truth_results.md"), help="the results file")
    parser.add_argument("--programs", nargs="*", help="program names to run (default: all of the device's)")
    parser.add_argument("--no-ops", action="store_true", help="skip the op table (and the calibration)")
    parser.add_argument(
        "--steps", type=int, default=6, help="timed steps per program (default 6, after 2 warm-up)"
    )
    parser.add_argument(
        "--budget-scale", type=float, default=None, help="multiply every phase's budget (cpu: 0.5)"
    )
    parser.add_argument("--budgets", help="seconds per phase, e.g. ops=10,check=60 (over --budget-scale)")
    parser.add_argument(
        "--write-preset",
        action="store_true",
        help="record the fitted figures in unityc/machine/calibration.py",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "error: --device cuda: no CUDA device is visible (use --device cpu for the CPU path)",
            file=sys.stderr,
        )
        return 1
    unknown = set(args.programs or ()) - {p.name for p in (GPU_PROGRAMS + CPU_PROGRAMS)}
    if unknown:
        print(f"error: --programs: unknown {', '.join(sorted(unknown))}", file=sys.stderr)
        return 1
    out = Path(args.out)
    if not out.parent.is_dir():
        print(f"error: --out {out}: no such directory", file=sys.stderr)
        return 1
    DEVICE = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if DEVICE.type == "cpu":
        torch.set_num_threads(1)  # the cpu:P preset: one core per process
    scale = args.budget_scale if args.budget_scale is not None else (1.0 if DEVICE.type == "cuda" else 0.5)
    budget = {phase: s * scale for phase, s in BUDGET_S.items()}
    for item in args.budgets.split(",") if args.budgets else ():
        phase, _, seconds = item.partition("=")
        if phase not in budget or not seconds.replace(".", "", 1).isdigit():
            print(
                f"error: --budgets {args.budgets}: expected PHASE=SECONDS, PHASE one of ops, programs, check",
                file=sys.stderr,
            )
            return 1
        budget[phase] = float(seconds)
    kind, chosen = preset_kind(DEVICE)
    skipped: list[str] = []
    started = time.monotonic()
    head = [
        "# Ground truth: the cost and memory models against measurement (`benchmarks/gpu_truth.py`)",
        "",
        f"The one command, on the machine with the GPU, from the repository root: `{COMMAND}`",
        "",
        f"- this run: `{RAN}`",
        f"- device: {device_name()}; {versions()}; {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- device kind priced: {chosen}",
    ]
    if DEVICE.type == "cuda":
        head.append(
            f"- TF32 as the programs run it (PyTorch's defaults): matmul "
            f"{torch.backends.cuda.matmul.allow_tf32}, cuDNN convolutions {torch.backends.cudnn.allow_tf32}; "
            "the presets price f32 contractions at the f32 rate"
        )
    if DEVICE.type == "cpu":
        head.append(
            "- **the CPU path** (tiny shapes, one core, a shared machine): it shows the script runs end to "
            "end; its figures say nothing about a GPU. The GPU figures come from the command above."
        )

    # phase 1
    rows: list[OpRow] = []
    fitted = None
    if not args.no_ops:
        cases = gpu_cases() if DEVICE.type == "cuda" else cpu_cases()
        dtypes = ("f32", "tf32", "bf16") if DEVICE.type == "cuda" else ("f32", "bf16")
        deadline = time.monotonic() + budget["ops"]
        # tf32 changes matmul-like ops only; the latency row runs once, in f32
        work = [
            (c, d)
            for c in cases
            for d in dtypes
            if (d != "tf32" or c.kind in MATMUL_LIKE) and (d == "f32" or not c.label.startswith("launch:"))
        ]
        per_row = budget["ops"] / len(work) / 2
        for case, dtype in work:
            if time.monotonic() > deadline:
                skipped.append(f"op {case.label} ({dtype}): past the ops phase's {budget['ops']:.0f} s")
                continue
            try:
                measured = measure_op(case, dtype, DEVICE, per_row)
            except (RuntimeError, torch.OutOfMemoryError) as e:
                skipped.append(f"op {case.label} ({dtype}): {str(e).splitlines()[0][:200]}")
                continue
            rows.append(OpRow(case, dtype, measured, priced(case, dtype, kind)))
        torch.backends.cuda.matmul.allow_tf32 = False
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()  # the programs run in other processes: leave them the memory
        if any(r.case.label.startswith("launch:") for r in rows) and len(rows) > 1:
            fitted = fit(rows, kind)
            better = calibrated_kind(kind, fitted[0])
            rows = [dataclasses.replace(r, after=priced(r.case, r.dtype, better)) for r in rows]
    calibrated = calibrated_kind(kind, fitted[0]) if fitted else kind

    # phase 2
    programs = [
        p
        for p in (GPU_PROGRAMS if DEVICE.type == "cuda" else CPU_PROGRAMS)
        if not args.programs or p.name in args.programs
    ]
    results = [ProgramRow(p) for p in programs]
    deadline = time.monotonic() + budget["programs"]
    with tempfile.TemporaryDirectory(prefix="gpu_truth-") as tmp:
        work_dir = Path(tmp)
        if DEVICE.type == "cuda":
            spec_file = work_dir / "gpu1.toml"
            spec_file.write_text(toml(machine_dict(kind, "gpu1")))
            machine_ref = str(spec_file)
            machines = (
                load_machine(machine_ref),
                machine_from_dict(machine_dict(calibrated, "gpu1-calibrated")),
            )
        else:
            machine_ref = "cpu:1"
            machines = (
                load_machine(machine_ref),
                machine_from_dict(machine_dict(calibrated, "cpu1-calibrated")),
            )
        for row in results:
            left = deadline - time.monotonic()
            if left <= MIN_LEFT_S:
                skipped.append(
                    f"program {row.program.name}: past the programs phase's {budget['programs']:.0f} s"
                )
                row.error = "skipped (time budget)"
                continue
            row.path = measure_program(row, machine_ref, machines, work_dir, args.steps, left)
        # phase 3
        deadline = time.monotonic() + budget["check"]
        for row in results:
            if row.path is None or row.measured_ms is None:
                continue
            left = deadline - time.monotonic()
            if left <= MIN_LEFT_S:
                skipped.append(
                    f"--check of {row.program.name}: past the check phase's {budget['check']:.0f} s"
                )
                row.check = "skipped (time budget)"
                continue
            status, output = torchrun(row.path, ["--check", "--steps", "2"], left)
            last = [
                line for line in output.splitlines() if line.startswith(("check passed", "error", "step 2"))
            ]
            verdict = {0: "passed", 124: "out of time (budget)"}.get(status, f"FAILED (exit {status})")
            row.check = f"{verdict}: {last[-1] if last else last_line(output)}".replace("|", "/")
    head.append(
        f"- wall time: {time.monotonic() - started:.0f} s (budget {sum(budget.values()):.0f} s plus imports)"
    )
    write_results(out, head, rows, fitted, kind, results, skipped)
    print(f"wrote {out}")
    if fitted:
        return write_preset(kind, fitted[0], DEVICE, args.write_preset, results)
    return 0


def measure_program(
    row: ProgramRow, machine_ref: str, machines: tuple[Machine, Machine], work: Path, steps: int, left: float
) -> Path | None:
    """Build, estimate and run one program; fills `row` (its error on failure)."""
    p = row.program
    started = time.monotonic()
    try:
        plan = build_program(p, machine_ref, work, left)
        module = read_module(str(plan))
        row.before = estimate_module(module, machines[0])
        row.after = estimate_module(module, machines[1])
        program = plan.with_suffix(".py")
        program.write_text(emit_program(module, source=plan.name))
    except Exception as e:  # an import or plan this version cannot make is a row, not a crash
        row.error = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}".replace(
            "|", "/"
        )
        return None
    timing = work / f"{plan.stem}.json"
    status, output = torchrun(
        program,
        ["--steps", str(steps + 2), "--warmup", "2", "--json", str(timing)],
        max(5.0, left - (time.monotonic() - started)),
    )
    if status or not timing.exists():
        verdict = "out of time (budget)" if status == 124 else f"run failed (exit {status})"
        row.error = f"{verdict}: {last_line(output)}"
        return None
    result = json.loads(timing.read_text())
    row.measured_ms = float(result["median_ms"])
    row.measured_peak = result.get("peak_memory_bytes")
    return program


def program_error(rows: Sequence[ProgramRow], after: bool) -> float | None:
    """Median relative error of the programs' step-time estimates (None: no program ran)."""
    errors = [
        abs(e.iteration_s * 1e3 - r.measured_ms) / r.measured_ms
        for r in rows
        if r.measured_ms is not None and (e := r.after if after else r.before) is not None
    ]
    return statistics.median(errors) if errors else None


def write_preset(
    kind: DeviceKind, c: Calibration, device: torch.device, write: bool, programs: Sequence[ProgramRow]
) -> int:
    """Print the calibration entry for `kind`; with `write`, record it in calibration.py, unless
    it makes the programs' estimates worse than the preset's (isolated ops can mislead)."""
    path = Path(calibration.__file__)
    if device.type != "cuda" or kind.name not in (
        H100_SXM_80GB.name,
        A100_SXM_80GB.name,
        V100_SXM2_16GB.name,
    ):
        note = (
            "the cpu:P preset is measured by benchmarks/measure_cpu_machine.py"
            if device.type == "cpu"
            else f"no preset holds {kind.name}"
        )
        print(f"calibration not written to the presets: {note}")
        return 1 if write else 0
    patched = calibration.with_calibration(path.read_text(), kind.name, c)
    before, after = program_error(programs, False), program_error(programs, True)
    if before is not None and after is not None and after > before:
        print(
            f"calibration not written: it fits the ops but worsens the programs' median error "
            f"({before * 100:.1f} % -> {after * 100:.1f} %): {c}"
        )
        return 1 if write else 0
    if not write:
        print(f"fitted for {kind.name} (write with --write-preset): {c}")
        return 0
    path.write_text(patched)
    print(f"recorded in {path}: {kind.name}: {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
