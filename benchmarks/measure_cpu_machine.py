"""Measure the constants of the `cpu:P` machine preset on this machine.

    .venv/bin/python benchmarks/measure_cpu_machine.py [--quick]

Each gloo process of a `cpu:P` run gets one core, so compute and memory are measured on one
thread. What it prints (and what `unityc/machine/presets.py` records):

* matmul throughput per dtype: `torch.mm` of two n x n matrices, best of several runs,
  2 n^3 FLOPs each;
* memory bandwidth: `dst.copy_(src)` of a 256 MiB tensor, counting a read and a write;
* per-op overhead: an eager `torch.relu` of a 1-element tensor (what a tiny op costs);
* gloo all-reduce between two local processes (torch.multiprocessing, TCP rendezvous on
  127.0.0.1) for sizes from 4 B to 64 MiB, fitted to the two-process ring formula
  t(S) = 2 alpha + S / beta (for n = 2, 2(n-1)/n = 1 and 2(n-1) = 2).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def best_time(fn: Callable[[], object], repeat: int, inner: int = 1) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner)
    return min(times)


def matmul_flops(dtype: torch.dtype, n: int, repeat: int) -> float:
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    return 2 * n**3 / best_time(lambda: torch.mm(a, b), repeat)


def copy_bandwidth(mib: int, repeat: int) -> float:
    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / best_time(lambda: dst.copy_(src), repeat)


def op_overhead(repeat: int) -> float:
    x = torch.ones(1)
    return best_time(lambda: torch.relu(x), repeat, inner=1000)


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


def gloo_all_reduce(sizes: list[int], repeat: int) -> dict[int, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_worker, args=(port, sizes, repeat, out), nprocs=2, join=True)
    return dict(out)


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
    print(f"copy bandwidth (1 thread, 256 MiB): {copy_bandwidth(256, repeat) / 1e9:.2f} GB/s")
    print(f"eager op overhead (relu of 1 element): {op_overhead(repeat) * 1e6:.2f} us")
    times = gloo_all_reduce(SIZES, repeat)
    for size, t in sorted(times.items()):
        print(f"gloo all_reduce, 2 processes, {size:>9} B: {t * 1e6:10.1f} us")
    alpha, beta = fit_alpha_beta(times)
    print(f"fit t = 2 alpha + S / beta: alpha = {alpha * 1e6:.1f} us, beta = {beta / 1e9:.2f} GB/s")


if __name__ == "__main__":
    main()
