"""Named machines: `summit:N`, `dgx-a100:N`, `dgx-h100:N`, `cpu:P`.

GPU numbers are vendor peak figures (cited next to each); latencies are typical per-step NCCL
latencies, assumed rather than measured. Efficiency factors say what fraction of peak real
kernels reach (0.7 of peak FLOP/s, 0.8 of peak bandwidth: typical of large cuBLAS GEMMs and
streaming kernels); they are assumptions, to be replaced by `cost="profile"` where it matters.

`cpu:P` — P local gloo processes, one core each — was measured on this machine with

    .venv/bin/python benchmarks/measure_cpu_machine.py      (2026-11-27 00:48 UTC, load 0.1)

The machine is a 2-core KVM guest on an Intel Xeon (family 6 model 207, AVX-512 and AMX),
23.6 GiB RAM; until 2026-11-26 it ran on a 2-core AMD EPYC guest, whose figures follow each
line in brackets. Every rate is the CPU time of one thread, so little disturbed by other load:

    matmul, 1 thread, n = 1024:   f32 221, f64 109, bf16 1640 GFLOP/s  [f64 55, bf16 465]
    matmul f32 at layer shapes:   213 GFLOP/s [99]: the median over the forward, input-gradient
                                  and weight-gradient products of the benchmark models' linear
                                  layers (128-512 rows, 13-1024 features), operands in cache
    the same products, cold:      27.6 GB/s [10] (`cold_bandwidth`): with the caches evicted
                                  before each run (a 64 MiB read), a product takes longer by its
                                  operand and result bytes at this rate. In a step a layer's
                                  weight was last touched a step ago, so its products run cold
    embedding backward:           55 ns per looked-up row [60] (`scatter_row_time`;
                                  `embedding_dense_backward`), on top of zeroing the table's
                                  gradient
    copy of 256 MiB, 1 thread:    13.0 GB/s [38.5] (read + write counted): DRAM, the
                                  `memory_bandwidth` of kernels moving more than fits in the L3
    element-wise kernels in L3:   33 GB/s (`cache_bandwidth`; add, mul, relu, copy and an
                                  in-place axpy moving 4-48 MiB, by thread CPU, 2026-11-27
                                  03:45, load 12: a ratio of one thread's CPU time, little
                                  disturbed), 26-31 GB/s at 192 MiB, 15 at 768 MiB: kernels moving
                                  up to 192 MiB (`cache_bytes`) stream from the L3 (the guest
                                  reports 300 MiB). A step of the benchmark models touches a few
                                  to 100 MiB, so its element-wise ops and the optimizer's update
                                  run at this rate; at 13 GB/s the serial plans were priced
                                  1.1-1.3x their measured step
    gloo all_reduce, 2 processes: beta = 2.52 GB/s [1.16] (t = 2 alpha + S / beta; alone,
                                  alpha = 35 us [68])
    element-wise f32 ops:         11.6 GFLOP/s [6] (`vector_flops`; add, mul, relu, gelu, exp,
                                  sigmoid, tanh on 64 Ki-1 Mi elements, FLOPs as the cost model
                                  counts them)
    op in a training step:        10 us per op and pass (`kernel_latency`): a bare chain of one
                                  torch op costs 3.57 us forward and backward [3.6], and an op
                                  of a program (its views, the generated code around it) is ~3
                                  torch ops; checked against generated programs at tiny sizes,
                                  where a step is all fixed cost, by CPU time
                                  (`benchmarks/fixed_costs.py`). The runtime's attention and
                                  dropout pay more (`cost.compute.KERNELS`)
    gloo all-gather, reduce-scatter: 2 and 4.5 times the ring formula's bytes time
                                  (`collective_bytes`): `all_gather_single` of an output of
                                  S bytes takes what an all-reduce of S does (7.4 ms for 16 MiB
                                  and 2 processes, 1.8 for 4 MiB), `reduce_scatter_single` of
                                  an input of S twice that (14.9, 4.4 ms), where a ring moves
                                  half of S once
    gloo alpha in a step:         190 us [890] (`GLOO_ALPHA`): an MLP's steps with tiny
                                  all-reduces between layers against the same steps without;
                                  in a step the ranks arrive apart and gloo's threads wait for
                                  the core the other process computes on
    dropout:                      about 10 f32 adds per element [19-23]
                                  (`cost.compute.DROPOUT_HASH_FLOPS`)
    gloo's threads on the rank's core (`comm_shares_core`, `collective_handoff`; 2026-11-27
                                  06:46-06:54, `measure_cpu_machine.handoff`, load 2.4-3.7,
                                  the script at nice -20): each rank fills a core, so gloo's
                                  threads (busy-polling while a collective is in flight) run on
                                  the core the rank computes on. An all-reduce started
                                  asynchronously before 8 layer matmuls ends when the matmuls
                                  plus the all-reduce alone would, under SCHED_FIFO and the
                                  default scheduler alike (none of it hides under the compute):
                                  a rank's communication and compute take turns. Under the default
                                  scheduler a blocking all-reduce between layers takes 100-1900 us
                                  (median 640 over 4 B-4 MiB and 6 runs) more than the preset's
                                  2 alpha + S / beta: the hand-offs between the training thread
                                  and gloo's threads, each woken one waiting for the running
                                  one's time slice; under SCHED_FIFO, where a woken thread gets
                                  the core at once, 270-920 us less (gloo's own time). The cpu
                                  kind models the default scheduler (what a user runs): a run
                                  under SCHED_FIFO is priced without the hand-off

Those rates are achieved, not peak, so the cpu kind has efficiency 1.0. Matmul-like ops run at
the matmul rate, every other op at `vector_flops` (a CPU core runs element-wise kernels one
pass each, far below its blocked GEMM rate). With more processes than cores (P > 2 here) the
processes share cores and the estimate is optimistic. Memory capacity per process is the
machine's RAM divided by P.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from unityc.machine.calibration import calibrated
from unityc.machine.errors import MachineSpecError
from unityc.machine.loader import GB, GIB, MIB, TFLOPS, us
from unityc.machine.spec import DeviceKind, Link, Machine, NodeSpec, check_size

GPU_COMPUTE_EFFICIENCY = 0.7
GPU_MEMORY_EFFICIENCY = 0.8
GPU_KERNEL_LATENCY = us(4)  # CUDA launch plus framework overhead per kernel (assumed)
GPU_RESERVED = 1 * GIB
"""Held on a GPU whatever the plan (assumed, as PyTorch on CUDA 12 typically shows): the CUDA
context and kernels (~0.5 GiB), NCCL's communicators and buffers (~0.25 GiB), cuBLAS workspaces
and the caching allocator's fragmentation (~0.25 GiB)."""

# NVIDIA Tesla V100 datasheet (SXM2): FP64 7.8, FP32 15.7, tensor (FP16) 125 TFLOP/s;
# HBM2 900 GB/s; 16 GB (16 GiB of HBM2).
V100_SXM2_16GB = DeviceKind(
    name="V100-SXM2-16GB",
    flops=(("f64", 7.8 * TFLOPS), ("f32", 15.7 * TFLOPS), ("f16", 125 * TFLOPS)),
    memory_bandwidth=900 * GB,
    memory=16 * GIB,
    compute_efficiency=GPU_COMPUTE_EFFICIENCY,
    memory_efficiency=GPU_MEMORY_EFFICIENCY,
    kernel_latency=GPU_KERNEL_LATENCY,
    reserved=GPU_RESERVED,
)

# NVIDIA A100 datasheet (SXM4 80GB): FP64 9.7, FP32 19.5, TF32 156, BF16/FP16 312 TFLOP/s
# (dense); HBM2e 2039 GB/s; 80 GB.
A100_SXM_80GB = DeviceKind(
    name="A100-SXM-80GB",
    flops=(
        ("f64", 9.7 * TFLOPS),
        ("f32", 19.5 * TFLOPS),
        ("tf32", 156 * TFLOPS),
        ("bf16", 312 * TFLOPS),
        ("f16", 312 * TFLOPS),
    ),
    memory_bandwidth=2039 * GB,
    memory=80 * GIB,
    compute_efficiency=GPU_COMPUTE_EFFICIENCY,
    memory_efficiency=GPU_MEMORY_EFFICIENCY,
    kernel_latency=GPU_KERNEL_LATENCY,
    reserved=GPU_RESERVED,
)

# NVIDIA H100 datasheet (SXM5 80GB): FP64 34, FP32 67, TF32 494.5, BF16/FP16 989.5 TFLOP/s
# (dense, i.e. without the 2:4 sparsity figures); HBM3 3.35 TB/s; 80 GB.
H100_SXM_80GB = DeviceKind(
    name="H100-SXM-80GB",
    flops=(
        ("f64", 34 * TFLOPS),
        ("f32", 67 * TFLOPS),
        ("tf32", 494.5 * TFLOPS),
        ("bf16", 989.5 * TFLOPS),
        ("f16", 989.5 * TFLOPS),
    ),
    memory_bandwidth=3350 * GB,
    memory=80 * GIB,
    compute_efficiency=GPU_COMPUTE_EFFICIENCY,
    memory_efficiency=GPU_MEMORY_EFFICIENCY,
    kernel_latency=GPU_KERNEL_LATENCY,
    reserved=GPU_RESERVED,
)

# Measured efficiencies and kernel latency replace the assumed ones where a GPU run recorded them
# (`calibration.py`, written by `benchmarks/gpu_truth.py --write-preset`, each with its source).
V100_SXM2_16GB, A100_SXM_80GB, H100_SXM_80GB = (
    calibrated(k) for k in (V100_SXM2_16GB, A100_SXM_80GB, H100_SXM_80GB)
)

GLOO_ALPHA = us(190)
"""A gloo collective's latency per ring step as a training step sees it (see the docstring)."""

CPU_CORE = DeviceKind(
    name="cpu",
    flops=(("f32", 213e9), ("f64", 109e9), ("bf16", 1640e9)),
    memory_bandwidth=13 * GB,
    memory=23.5 * GIB,  # divided by P in `cpu`
    kernel_latency=us(10),
    vector_flops=11.6e9,
    cold_bandwidth=27.6 * GB,
    cache_bandwidth=33 * GB,
    cache_bytes=192 * MIB,
    scatter_row_time=55e-9,
    collective_bytes=(("all_gather", 2.0), ("reduce_scatter", 4.5)),
    comm_shares_core=True,
    collective_handoff=us(640),
)


def summit(n: int) -> Machine:
    """OLCF Summit (Summit user guide, "System overview"): per node two POWER9 sockets with three
    V100s each; GPUs of one socket (and their CPU) are linked by NVLink 2.0 bricks at 50 GB/s per
    direction; the sockets by the X-bus (64 GB/s, taken as 32 GB/s per direction); nodes by
    dual-rail EDR InfiniBand, 2 ports x 12.5 GB/s = 25 GB/s per node."""
    node = NodeSpec(
        sockets=((V100_SXM2_16GB.name,) * 3,) * 2,
        intra_socket=Link(50 * GB, us(2)),
        cross_socket=Link(32 * GB, us(4)),
        inter_node=Link(25 * GB, us(6)),
    )
    return Machine(
        f"summit:{n}", (V100_SXM2_16GB,), (node,) * n, "Summit nodes: 6x V100 16GB, NVLink2, EDR IB"
    )


def dgx_a100(n: int) -> Machine:
    """NVIDIA DGX A100 datasheet: 8x A100 80GB on NVSwitch (NVLink3, 600 GB/s bidirectional, so
    300 GB/s per direction per GPU); 8 ConnectX-6 HDR ports, 8 x 200 Gb/s = 200 GB/s per node."""
    node = NodeSpec(
        sockets=((A100_SXM_80GB.name,) * 8,),
        intra_socket=Link(300 * GB, us(2)),
        cross_socket=Link(300 * GB, us(2)),
        inter_node=Link(200 * GB, us(6)),
    )
    return Machine(f"dgx-a100:{n}", (A100_SXM_80GB,), (node,) * n, "DGX A100: 8x A100 80GB, NVSwitch, HDR IB")


def dgx_h100(n: int) -> Machine:
    """NVIDIA DGX H100 datasheet: 8x H100 80GB on NVSwitch (NVLink4, 900 GB/s bidirectional, so
    450 GB/s per direction per GPU); 8 ConnectX-7 NDR ports, 8 x 400 Gb/s = 400 GB/s per node."""
    node = NodeSpec(
        sockets=((H100_SXM_80GB.name,) * 8,),
        intra_socket=Link(450 * GB, us(2)),
        cross_socket=Link(450 * GB, us(2)),
        inter_node=Link(400 * GB, us(6)),
    )
    return Machine(f"dgx-h100:{n}", (H100_SXM_80GB,), (node,) * n, "DGX H100: 8x H100 80GB, NVSwitch, NDR IB")


def cpu(p: int) -> Machine:
    """P local gloo processes on one node, one socket; see the module docstring."""
    kind = dataclasses.replace(CPU_CORE, memory=CPU_CORE.memory / p)
    gloo = Link(2.52 * GB, GLOO_ALPHA)
    node = NodeSpec(((kind.name,) * p,), gloo, gloo, Link(float("inf"), 0.0))
    return Machine(f"cpu:{p}", (kind,), (node,), "local gloo processes, one core each (measured 2026-11-27)")


PRESETS: dict[str, Callable[[int], Machine]] = {
    "summit": summit,
    "dgx-a100": dgx_a100,
    "dgx-h100": dgx_h100,
    "cpu": cpu,
}


def preset(name: str) -> Machine:
    """`summit:2` and the like: N nodes (N processes for cpu). The count is required."""
    base, colon, count = name.partition(":")
    if base not in PRESETS:
        raise MachineSpecError(f"unknown machine preset '{base}' (known: {', '.join(PRESETS)})")
    unit = "processes" if base == "cpu" else "nodes"
    if not colon:
        raise MachineSpecError(f"machine '{name}': give the number of {unit}, e.g. '{base}:1'")
    if not count.isdigit() or int(count) < 1:
        raise MachineSpecError(
            f"machine '{name}': the count after ':' must be a positive integer, got '{count}'"
        )
    n = int(count)
    per_node = PRESETS[base](1).num_devices if base != "cpu" else 1
    check_size(name, n * per_node)
    return PRESETS[base](n)
