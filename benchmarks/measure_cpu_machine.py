"""Measure the constants of the `cpu:P` machine preset on this machine.

    .venv/bin/python benchmarks/measure_cpu_machine.py [--quick]

Each gloo process of a `cpu:P` run gets one core, so compute and memory are measured on one
thread, by the thread's CPU time (`time.thread_time`: other processes on a shared machine
hardly count; the collectives below are wall-clock). What it prints (and what
`unityc/machine/presets.py` records):

* matmul throughput per dtype: `torch.mm` of two n x n matrices, best of several runs,
  2 n^3 FLOPs each;
* f32 matmuls at the shapes of the benchmark models' layers, each layer's forward, input- and
  weight-gradient products: the median rate with operands in cache (the preset's f32 rate), and
  the same products after evicting the caches, the extra time over their bytes
  (`cold_bandwidth`);
* embedding backward (`embedding_dense_backward`) per looked-up row (`scatter_row_time`);
* element-wise throughput (`vector_flops`): f32 add, mul, relu, gelu, exp, sigmoid and tanh on
  activations of 64 Ki to 1 Mi elements, FLOPs counted as the cost model counts them
  (`unityc.cost.compute.UNARY_FLOPS`), the median over ops and sizes;
* memory bandwidth: `dst.copy_(src)` of a 256 MiB tensor, counting a read and a write (DRAM), and
  element-wise kernels moving 1-768 MiB (`cache_bandwidth`: the rate while they fit in the L3);
* two cores at once: each of a mix of kernels (layer matmuls cached and cold, an add, a DRAM
  copy) alone and while a second process runs the same mix (`paired_slowdown`);
* per-op overhead: an eager `torch.relu` of a 1-element tensor (what a tiny op costs), and the
  cost per op inside a training step (`kernel_latency`): a chain of tiny element-wise ops on a
  tensor that requires a gradient, forward and backward, per op and pass (autograd records each
  op and runs a backward node for it);
* the dropout of a program (`unityc.runtime.context`: a hash of each element's index), as
  f32 adds of the same size (`unityc.cost.compute.DROPOUT_HASH_FLOPS`);
* gloo all-reduce between two local processes (torch.multiprocessing, TCP rendezvous on
  127.0.0.1) for sizes from 4 B to 64 MiB, fitted to the two-process ring formula
  t(S) = 2 alpha + S / beta (for n = 2, 2(n-1)/n = 1 and 2(n-1) = 2): alpha in isolation;
* alpha inside a training step: both processes run steps of a small MLP's forward and backward
  with k tiny all-reduces interleaved (each after a layer, as a plan's collectives are), and
  without; the extra time per collective over 2 is the alpha a plan's collectives pay (the
  ranks' skew, gloo's thread hand-offs and the cores shared with the other process's compute);
* gloo collectives between layers (`gloo_in_step`): all-reduce, reduce-scatter and all-gather of
  4 B to 4 MiB after each of 8 matmuls, against the same matmuls without: wall, thread CPU and
  process CPU per collective. Run the script under `chrt --fifo 1` too: the difference is what
  the default scheduler adds around a collective on a fully subscribed machine;
* the hand-off (`handoff`, `DeviceKind.collective_handoff` and `comm_shares_core`): both ranks
  compute layer matmuls with a blocking all-reduce of 4 B-4 MiB after each, against the same
  matmuls alone, under the default scheduler (three rounds) and under SCHED_FIFO (set in the
  workers, root only): per collective, what it costs beyond the preset's alpha-beta time; and
  an all-reduce started asynchronously before the matmuls, whether it runs beside them. Run it
  on a quiet machine (other load lengthens the default scheduler's hand-offs, not FIFO's).
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from unityc.cost.communication import collective_time
from unityc.machine import load_machine
from unityc.machine.presets import CPU_CORE, GLOO_ALPHA


def best_time(
    fn: Callable[[], object], repeat: int, inner: int = 1, before: Callable[[], object] | None = None
) -> float:
    """Least CPU time of this thread (`time.thread_time`: other processes on the core do not
    count) over `repeat` runs of `inner` calls; `before` runs untimed ahead of each run."""
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.thread_time()
        for _ in range(inner):
            fn()
        times.append((time.thread_time() - start) / inner)
    return min(times)


def matmul_flops(dtype: torch.dtype, n: int, repeat: int) -> float:
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    return 2 * n**3 / best_time(lambda: torch.mm(a, b), repeat)


LAYERS = {  # (rows, in, out) of the linear layers of the accuracy benchmark's models
    "mlp": [(128, 256, 512), (128, 512, 512)],
    "mlp-wide": [(256, 512, 1024), (256, 1024, 1024)],
    "mlp-demo": [(256, 256, 512), (256, 512, 512)],
    "bert": [(512, 128, 128), (512, 128, 512), (512, 512, 128), (512, 128, 1024)],
    "dlrm": [(512, 13, 512), (512, 512, 64), (512, 74, 512), (512, 512, 256)],
}


def layer_products(m: int, k: int, n: int) -> list[tuple[str, Callable[[], object], int, int]]:
    """The three products of a linear layer y = x w^T (x: m x k, w: n x k) in a training step,
    as autograd runs them: forward, input gradient dy w, weight gradient dy^T x (transposed
    operands). Each: (name, kernel, FLOPs, bytes of operands and result)."""
    x, w, dy = torch.randn(m, k), torch.randn(n, k), torch.randn(m, n)
    flops, size = 2 * m * k * n, 4 * (m * k + n * k + m * n)
    return [
        (f"{m}x{k}x{n} forward", lambda: torch.mm(x, w.t()), flops, size),
        (f"{m}x{k}x{n} input grad", lambda: torch.mm(dy, w), flops, size),
        (f"{m}x{k}x{n} weight grad", lambda: torch.mm(dy.t(), x), flops, size),
    ]


def matmul_layers(repeat: int, evict_mib: int = 64) -> tuple[float, float, list[str]]:
    """f32 matmuls at the shapes of real layers, forward and backward: the median FLOP/s with
    operands in cache (best of repeated runs), and the median bandwidth at which the same
    products read operands that are not (`DeviceKind.cold_bandwidth`): before each timed run a
    read of `evict_mib` MiB evicts the caches, and the extra time over the cached run is
    charged to the bytes the product reads and writes. In a training step a layer's weight was
    last touched a step ago and its activations a whole forward ago, so the step's products
    run cold. Returns (rate, cold bandwidth, table lines)."""
    evict = torch.ones(evict_mib * 2**20 // 4)
    rates, bandwidths, lines = [], [], []
    for shapes in LAYERS.values():
        for m, k, n in shapes:
            for name, kernel, flops, size in layer_products(m, k, n):
                hot = best_time(kernel, repeat)
                cold = best_time(kernel, repeat, before=evict.sum)
                rates.append(flops / hot)
                bandwidths.append(size / max(cold - hot, 1e-9))
                lines.append(
                    f"  {name:28s} {flops / hot / 1e9:6.1f} GFLOP/s cached, {flops / cold / 1e9:6.1f} cold"
                    f" ({size / 2**20:.2f} MiB: {size / max(cold - hot, 1e-9) / 1e9:.1f} GB/s)"
                )
    return statistics.median(rates), statistics.median(bandwidths), lines


def embedding_backward_row(repeat: int) -> float:
    """Seconds per looked-up row of an embedding's backward (`embedding_dense_backward`: the
    indices are sorted and each row's gradient added into the table's), the slope between
    1 Ki and 16 Ki rows, median over tables of 1000 x 64 and 1024 x 128."""
    slopes = []
    for vocab, dim in ((1000, 64), (1024, 128)):
        times = {}
        for n in (1024, 16 * 1024):
            ids = torch.randint(0, vocab, (n,))
            grad = torch.randn(n, dim)
            backward = torch.ops.aten.embedding_dense_backward
            times[n] = best_time(lambda: backward(grad, ids, vocab, -1, False), repeat)  # noqa: B023
        slopes.append((times[16 * 1024] - times[1024]) / (15 * 1024))
    return statistics.median(slopes)


def copy_bandwidth(mib: int, repeat: int) -> float:
    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / best_time(lambda: dst.copy_(src), repeat)


STREAM_MIB = (4, 16, 48)
"""Bytes a kernel moves (operands and results, MiB) in `cache_bandwidth`: past the 2 MiB L2 of
a core, within the L3, as a step's activations and weights of the benchmark models are (0.25-16
MiB a tensor, the whole step's a few to 100 MiB; operands a kernel just wrote may still sit in
L2, which is not modelled: a lower bound of the rate)."""


def stream_kernels(n: int) -> dict[str, tuple[int, Callable[[], object]]]:
    """Element-wise kernels on f32 vectors of n elements: (bytes moved, kernel)."""
    a, b, out = torch.randn(n), torch.randn(n), torch.empty(n)
    return {
        "add": (12 * n, lambda: torch.add(a, b, out=out)),
        "mul": (12 * n, lambda: torch.mul(a, b, out=out)),
        "relu": (8 * n, lambda: torch.clamp_min(a, 0, out=out)),
        "copy": (8 * n, lambda: out.copy_(a)),
        "axpy": (12 * n, lambda: a.add_(b, alpha=-1e-6)),  # an SGD update: w -= lr g
    }


def cache_bandwidth(repeat: int) -> tuple[float, list[str]]:
    """Bytes/s of element-wise kernels whose operands and result fit in the last-level cache
    (`DeviceKind.cache_bandwidth`): add, mul, relu, copy and an in-place axpy moving 4-48 MiB,
    the median rate; and, per size, the median over the kernels, up to 768 MiB, where the
    rate falls to the DRAM stream rate (`memory_bandwidth`; the L3 bound `cache_bytes`).
    Returns (rate, table lines)."""
    rates, lines = [], []
    for mib in (1, *STREAM_MIB, 192, 768):
        at_size = []
        for nbytes, kernel in stream_kernels(mib * 2**20 // 12).values():
            at_size.append(nbytes / best_time(kernel, repeat))
        if mib in STREAM_MIB:
            rates.extend(at_size)
        lines.append(
            f"  {mib:4d} MiB moved: {statistics.median(at_size) / 1e9:5.1f} GB/s (median of 5 kernels)"
        )
    return statistics.median(rates), lines


def op_overhead(repeat: int) -> float:
    x = torch.ones(1)
    return best_time(lambda: torch.relu(x), repeat, inner=1000)


def vector_flops(repeat: int) -> float:
    """FLOP/s of f32 element-wise ops, as the cost model counts their FLOPs."""
    import torch.nn.functional as F

    ops = {  # op: (FLOPs per element, the kernel)
        "add": (1, lambda a, b: a + b),
        "mul": (1, lambda a, b: a * b),
        "relu": (1, lambda a, b: torch.relu(a)),
        "gelu": (8, lambda a, b: F.gelu(a)),
        "exp": (4, lambda a, b: torch.exp(a)),
        "sigmoid": (4, lambda a, b: torch.sigmoid(a)),
        "tanh": (4, lambda a, b: torch.tanh(a)),
    }
    rates = []
    for n in (64 * 1024, 256 * 1024, 1024 * 1024):
        a, b = torch.randn(n), torch.randn(n)
        for flops, kernel in ops.values():
            rates.append(flops * n / best_time(lambda: kernel(a, b), repeat, inner=10))  # noqa: B023
    return statistics.median(rates)


def step_op_overhead(repeat: int, ops: int = 200) -> float:
    """Seconds per op and pass of tiny element-wise ops in a forward + backward."""
    x = torch.ones(8, requires_grad=True)

    def run() -> None:
        y = x
        for _ in range(ops):
            y = y * 1.0001
        y.sum().backward()

    return best_time(run, repeat) / (2 * ops)


def dropout_flops(repeat: int, n: int = 256 * 1024) -> float:
    """A dropout of the program (`unityc.runtime.context`: the keep mask hashes each element's
    logical index, then x * mask / (1 - p)) in f32 adds of the same size: its cost in
    element-wise FLOPs per element. A ratio, so other load on the machine cancels out."""
    from unityc.runtime.context import Context

    ctx = Context.__new__(Context)  # only what the mask reads
    ctx.device, ctx.seed, ctx.step, ctx.check = torch.device("cpu"), 0, 0, False
    ctx._index_terms = {}
    shape = (n // 256, 256)
    x, y = torch.randn(shape), torch.randn(shape)
    dropout = best_time(lambda: ctx.dropout(x, 0.1, "k", (0, 0), shape), repeat)
    return dropout / best_time(lambda: x + y, repeat, inner=10)


SIZES = [4, 1024, 64 * 1024, 1024**2, 16 * 1024**2, 64 * 1024**2]


def _worker(rank: int, port: int, sizes: list[int], repeat: int, out: dict) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    results = {}
    for size in sizes:
        t = torch.ones(max(size // 4, 1))
        times = []
        for _ in range(repeat * 3 + 2):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - start)
        results[size] = statistics.median(times[2:])
    if rank == 0:
        out.update(results)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_all_reduce(sizes: list[int], repeat: int) -> dict[int, float]:
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_worker, args=(_free_port(), sizes, repeat, out), nprocs=2, join=True)
    return dict(out)


def _step_worker(rank: int, port: int, repeat: int, out: dict) -> None:
    """Steps of an MLP (8 layers of 256, batch 64) with a 4-byte all-reduce after every
    layer in forward and backward (an autograd function), and without; median step times."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    layers = [torch.randn(256, 256, requires_grad=True) for _ in range(8)]
    x = torch.randn(64, 256)
    flag = torch.zeros(1)

    class Sync(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):  # type: ignore[no-untyped-def, override]
            dist.all_reduce(flag)
            return t

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def, override]
            dist.all_reduce(flag)
            return g

    def step(sync: bool) -> float:
        dist.barrier()
        start = time.perf_counter()
        h = x
        for w in layers:
            h = torch.relu(h @ w)
            if sync:
                h = Sync.apply(h)
        h.sum().backward()
        for w in layers:
            w.grad = None
        return time.perf_counter() - start

    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(repeat * 10 + 4):
        for sync in (True, False):
            if i >= 4:
                times[sync].append(step(sync))
    if rank == 0:
        out["with"], out["without"] = statistics.median(times[True]), statistics.median(times[False])
        out["collectives"] = 2 * len(layers)
    dist.destroy_process_group()


def gloo_alpha_in_a_step(repeat: int) -> float:
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_step_worker, args=(_free_port(), repeat, out), nprocs=2, join=True)
    return (out["with"] - out["without"]) / out["collectives"] / 2


def kernel_mix() -> dict[str, tuple[Callable[[], object], Callable[[], object] | None]]:
    """Kernels of a training step at the benchmark models' sizes: (kernel, untimed setup)."""
    evict = torch.ones(64 * 2**20 // 4)
    mix: dict[str, tuple[Callable[[], object], Callable[[], object] | None]] = {}
    for m, k, n in ((128, 256, 512), (256, 1024, 1024), (512, 512, 128)):
        product = functools.partial(torch.mm, torch.randn(m, k), torch.randn(n, k).t())
        mix[f"matmul {m}x{k}x{n}"] = (product, None)
        mix[f"matmul {m}x{k}x{n}, cold"] = (product, evict.sum)
    a, b = torch.randn(2**20), torch.randn(2**20)
    mix["add, 12 MiB moved"] = (lambda: a + b, None)
    src = torch.ones(64 * 2**20 // 4)
    dst = torch.empty_like(src)
    mix["copy, 128 MiB moved (DRAM)"] = (lambda: dst.copy_(src), None)
    return mix


def _partner(go: object, stop: object) -> None:
    """Runs the kernel mix over and over while `go` is set (a busy second core)."""
    torch.set_num_threads(1)
    mix = kernel_mix()
    while not stop.is_set():  # type: ignore[attr-defined]
        if not go.is_set():  # type: ignore[attr-defined]
            time.sleep(0.001)
            continue
        for kernel, setup in mix.values():
            if setup is not None:
                setup()
            kernel()


def paired_slowdown(rounds: int) -> dict[str, float]:
    """Each kernel of `kernel_mix` alone and while a second process runs the same mix on the
    other core (two ranks of a cpu:2 plan computing at once share the L3 and the memory
    bandwidth): thread CPU time paired over alone, the median over alternating rounds (other
    load on the machine touches both alike)."""
    context = mp.get_context("spawn")
    go, stop = context.Event(), context.Event()
    partner = context.Process(target=_partner, args=(go, stop))
    partner.start()
    mix = kernel_mix()
    times: dict[str, dict[bool, list[float]]] = {name: {False: [], True: []} for name in mix}
    time.sleep(2)  # the partner's start-up
    for _ in range(rounds):
        for paired in (False, True):
            go.set() if paired else go.clear()
            time.sleep(0.2)
            for name, (kernel, setup) in mix.items():
                times[name][paired].append(best_time(kernel, 5, before=setup))
    stop.set()
    partner.join()
    return {name: statistics.median(t[True]) / statistics.median(t[False]) for name, t in times.items()}


IN_STEP_SIZES = [4, 64 * 1024, 256 * 1024, 1024**2, 4 * 1024**2]
IN_STEP_PATTERNS = ("all_reduce", "reduce_scatter", "all_gather")


def _in_step_worker(rank: int, port: int, repeat: int, out: dict) -> None:
    """Segments of 8 matmuls (128 x 512 by 512 x 512, ~0.1 ms each: a layer of the benchmark
    models) with a collective of each pattern and size after every matmul, and without; the
    extra wall, training-thread CPU and process CPU (gloo's threads too) per collective, median
    over alternating segments."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    a, b = torch.randn(128, 512), torch.randn(512, 512)
    results = {}
    for pattern in IN_STEP_PATTERNS:
        for size in IN_STEP_SIZES:
            whole = torch.ones(max(size // 4, 2))
            half, parts = torch.empty(whole.numel() // 2), list(whole.chunk(2))
            run = {
                "all_reduce": functools.partial(dist.all_reduce, whole),
                "reduce_scatter": functools.partial(dist.reduce_scatter, half, parts),
                "all_gather": functools.partial(dist.all_gather, parts, half),
            }[pattern]
            samples: dict[bool, list[tuple[float, ...]]] = {True: [], False: []}
            for i in range(3 * repeat + 2):
                for sync in (True, False):
                    dist.barrier()
                    clocks = time.perf_counter(), time.thread_time(), time.process_time()
                    for _ in range(8):
                        a @ b
                        if sync:
                            run()
                    if not sync:
                        dist.barrier()  # both ranks done, as a collective would say
                    now = time.perf_counter(), time.thread_time(), time.process_time()
                    if i >= 2:
                        samples[sync].append(tuple(x - y for x, y in zip(now, clocks, strict=True)))
            results[pattern, size] = tuple(
                (
                    statistics.median(s[k] for s in samples[True])
                    - statistics.median(s[k] for s in samples[False])
                )
                / 8
                for k in range(3)
            )
    out[rank] = results
    dist.destroy_process_group()


def gloo_in_step(repeat: int) -> dict[tuple[str, int], tuple[float, float, float]]:
    """Per pattern and size, what a collective between a plan's layers costs each rank (the mean
    over the two): seconds of wall, of the training thread's CPU and of the process's CPU.
    Under SCHED_FIFO (`chrt --fifo 1`, root) this is the collective's own time; under the
    default scheduler also the hand-offs around it on a fully subscribed machine."""
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_in_step_worker, args=(_free_port(), repeat, out), nprocs=2, join=True)
    return {key: tuple((x + y) / 2 for x, y in zip(out[0][key], out[1][key], strict=True)) for key in out[0]}


HANDOFF_SIZES = [4, 256 * 1024, 1024**2, 4 * 1024**2]
HANDOFF_MATMULS = 8
"""Matmuls (128 x 512 by 512 x 512, a layer of the benchmark models) a rank computes in each
segment of `handoff`."""


def _handoff_worker(rank: int, port: int, fifo: bool, repeat: int, out: dict) -> None:
    """Per all-reduce size, both ranks (medians over alternating segments, wall seconds):

    * `compute`: `HANDOFF_MATMULS` matmuls alone (no collective in the segment);
    * `blocking`: the same matmuls each followed by a blocking all-reduce, minus `compute`, per
      collective: what a collective between layers costs a step (the ranks' skew included);
    * `alone`: blocking all-reduces back to back, per collective: the collective by itself;
    * `overlap`: an async all-reduce started, the matmuls computed, then waited for: with the
      collective run beside the compute on a spare core this is max(compute, alone), without one
      compute + alone;
    * `while`: the matmuls' wall in `overlap` (started with the collective in flight).

    Under SCHED_FIFO (`fifo`: set before gloo starts its threads, which inherit it) a thread
    runs until it blocks, so a woken thread waits for no time slice."""
    if fifo:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    a, b = torch.randn(128, 512), torch.randn(512, 512)

    def compute() -> None:
        for _ in range(HANDOFF_MATMULS):
            a @ b

    results = {}
    for size in HANDOFF_SIZES:
        t = torch.ones(max(size // 4, 1))
        samples: dict[str, list[float]] = {
            k: [] for k in ("compute", "blocking", "alone", "overlap", "while")
        }
        for i in range(3 * repeat + 2):
            dist.barrier()
            start = time.perf_counter()
            compute()
            plain = time.perf_counter() - start
            dist.barrier()
            start = time.perf_counter()
            for _ in range(HANDOFF_MATMULS):
                a @ b
                dist.all_reduce(t)
            blocking = time.perf_counter() - start
            dist.barrier()
            start = time.perf_counter()
            for _ in range(HANDOFF_MATMULS):
                dist.all_reduce(t)
            alone = time.perf_counter() - start
            dist.barrier()
            start = time.perf_counter()
            work = dist.all_reduce(t, async_op=True)
            compute()
            computed = time.perf_counter() - start
            work.wait()
            overlap = time.perf_counter() - start
            if i < 2:
                continue
            samples["compute"].append(plain)
            samples["blocking"].append((blocking - plain) / HANDOFF_MATMULS)
            samples["alone"].append(alone / HANDOFF_MATMULS)
            samples["overlap"].append(overlap)
            samples["while"].append(computed)
        results[size] = {k: statistics.median(v) for k, v in samples.items()}
    out[rank] = results
    dist.destroy_process_group()


def handoff(repeat: int, fifo: bool) -> dict[int, dict[str, float]]:
    """`_handoff_worker`'s figures per size, the mean over the two ranks."""
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_handoff_worker, args=(_free_port(), fifo, repeat, out), nprocs=2, join=True)
    return {
        size: {k: (out[0][size][k] + out[1][size][k]) / 2 for k in out[0][size]} for size in HANDOFF_SIZES
    }


def print_handoff(repeat: int, rounds: int = 3) -> None:
    """`handoff` under the default scheduler (`rounds` times: it varies from run to run) and
    under SCHED_FIFO (where permitted), side by side: what a blocking collective between layers
    costs beyond the preset's alpha-beta time (the hand-offs between a rank's training thread
    and gloo's threads on a core the rank fills: `DeviceKind.collective_handoff`, the median
    over sizes and rounds), and how much of a collective started asynchronously runs beside the
    compute (`hidden`: 1 overlapped, 0 one after the other; `DeviceKind.comm_shares_core`)."""
    runs = {f"default {i + 1}": handoff(repeat, False) for i in range(rounds)}
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        runs["fifo"] = handoff(repeat, True)
    except PermissionError:
        print("  (SCHED_FIFO not permitted: default scheduler only)")
    print(
        "gloo all-reduce around layer matmuls, 2 processes (us; compute = "
        f"{HANDOFF_MATMULS} matmuls; overlap: async all-reduce during them, then wait):"
    )
    print("  scheduler  bytes     compute  blocking extra  alone  overlap  compute while  hidden")
    for name, run in runs.items():
        for size, r in run.items():
            hidden = (r["compute"] + r["alone"] - r["overlap"]) / min(r["compute"], r["alone"])
            print(
                f"  {name:9s} {size:>8} {r['compute'] * 1e6:8.0f} {r['blocking'] * 1e6:9.0f} "
                f"{r['alone'] * 1e6:11.0f} {r['overlap'] * 1e6:8.0f} {r['while'] * 1e6:9.0f} {hidden:10.2f}"
            )
    machine = load_machine("cpu:2")
    model = {
        s: collective_time("all_reduce", s, (0, 1), machine) - CPU_CORE.collective_handoff
        for s in HANDOFF_SIZES
    }
    print(f"a blocking all-reduce between layers over the preset's 2 x {GLOO_ALPHA * 1e6:.0f} us + S / beta:")
    default: list[float] = []
    for name, run in runs.items():
        extra = [run[s]["blocking"] - model[s] for s in HANDOFF_SIZES]
        default += extra if name.startswith("default") else []
        print(
            f"  {name:9s} "
            + ", ".join(f"{s} B {e * 1e6:+.0f} us" for s, e in zip(HANDOFF_SIZES, extra, strict=True))
        )
    print(f"hand-off per collective, default scheduler (median): {statistics.median(default) * 1e6:.0f} us")


def fit_alpha_beta(times: dict[int, float]) -> tuple[float, float]:
    """t = 2 alpha + S / beta: alpha from the smallest message, beta from the slope between the
    two largest (a least-squares fit over all sizes lets the noisy small sizes skew alpha)."""
    sizes = sorted(times)
    alpha = times[sizes[0]] / 2
    big, bigger = sizes[-2], sizes[-1]
    return alpha, (bigger - big) / (times[bigger] - times[big])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a rough check)")
    args = parser.parse_args()
    repeat = 3 if args.quick else 10
    torch.set_num_threads(1)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"cores: {os.cpu_count()}, memory: {memory:.1f} GiB")
    for name, dtype in (("f32", torch.float32), ("f64", torch.float64), ("bf16", torch.bfloat16)):
        print(f"matmul {name} (1 thread, n=1024): {matmul_flops(dtype, 1024, repeat) / 1e9:.1f} GFLOP/s")
    rate, cold, lines = matmul_layers(repeat)
    print("matmul f32 at the layers' shapes (forward and both backward products):")
    print("\n".join(lines))
    print(f"matmul f32 at layer shapes: {rate / 1e9:.1f} GFLOP/s cached, cold at {cold / 1e9:.1f} GB/s")
    print(f"embedding backward: {embedding_backward_row(repeat) * 1e9:.1f} ns per looked-up row")
    print(f"copy bandwidth (1 thread, 256 MiB): {copy_bandwidth(256, repeat) / 1e9:.2f} GB/s")
    stream, lines = cache_bandwidth(repeat)
    print("element-wise kernels by bytes moved (1 thread):")
    print("\n".join(lines))
    print(
        f"element-wise kernels in cache ({STREAM_MIB[0]}-{STREAM_MIB[-1]} MiB moved): {stream / 1e9:.1f} GB/s"
    )
    vector = vector_flops(repeat)
    print(f"element-wise f32 (1 thread, 64 Ki-1 Mi elements, median of 7 ops): {vector / 1e9:.2f} GFLOP/s")
    print(f"eager op overhead (relu of 1 element): {op_overhead(repeat) * 1e6:.2f} us")
    step_op = step_op_overhead(repeat)
    print(f"op in a training step (forward + backward, per op and pass): {step_op * 1e6:.2f} us")
    print(f"dropout (hash of the index, mask, scale): {dropout_flops(repeat):.0f} f32 adds per element")
    print("a kernel while the other core runs the same kernels (thread CPU, paired / alone):")
    for name, ratio in paired_slowdown(repeat).items():
        print(f"  {name:32s} {ratio:.2f}")
    times = gloo_all_reduce(SIZES, repeat)
    for size, t in sorted(times.items()):
        print(f"gloo all_reduce, 2 processes, {size:>9} B: {t * 1e6:10.1f} us")
    alpha, beta = fit_alpha_beta(times)
    print(f"fit t = 2 alpha + S / beta: alpha = {alpha * 1e6:.1f} us, beta = {beta / 1e9:.2f} GB/s")
    print(f"alpha inside a training step: {gloo_alpha_in_a_step(repeat) * 1e6:.1f} us")
    print("gloo collectives between layers, 2 processes (per collective: wall, thread CPU, process CPU):")
    for (pattern, size), (wall, thread, process) in gloo_in_step(repeat).items():
        print(
            f"  {pattern:15s} {size:>9} B: {wall * 1e6:7.0f} us, {thread * 1e6:6.0f} us, "
            f"{process * 1e6:6.0f} us"
        )
    print_handoff(repeat)


if __name__ == "__main__":
    main()
