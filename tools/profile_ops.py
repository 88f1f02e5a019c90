"""profile-ops: time every distinct op task of a graph on the local device, for `cost="profile"`.

    python tools/profile_ops.py plan.mlir -o profile.json [--device cuda] [--device-name NAME]

For each pcg op of the graph (sources excepted) it builds one task's operand pieces (random
values, the piece shapes and dtypes of the plan), runs the reference interpreter's kernel for
that task with torch, and times forward, then forward + backward (gradients for every floating
operand); the backward time is the difference. Medians over `--repeat` runs after `--warmup`.
Distinct (op, attributes, piece shapes, dtypes) are timed once. Entries are written under the
device name the machine spec uses for the local device kind (`cpu` for the `cpu:P` preset), and
merged into an existing cache file. Then:

    unityc-opt plan.mlir -p 'estimate{machine="cpu:2" cost="profile" profile="profile.json"}'
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from unityc.cost.compute import SOURCES
from unityc.cost.estimate import graph_function, piece
from unityc.cost.profile import ProfileCache, op_key
from unityc.dialects.pcg_types import PcgOp, TensorType


def _parse(path: str) -> Any:
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    from unityc.dialects.parallel import PARALLEL
    from unityc.dialects.pcg import PCG
    from unityc.dialects.source import parse_source

    ctx = Context()
    for dialect in (Builtin, Func, PCG, PARALLEL):
        ctx.load_dialect(dialect)
    with open(path) as f:
        return parse_source(ctx, f.read(), path, 0, True)


def distinct_tasks(module: Any) -> dict[str, PcgOp]:
    """One op per distinct cache key (sources and parallel ops are not profiled)."""
    found: dict[str, PcgOp] = {}
    for op in graph_function(module).body.block.ops:
        if not isinstance(op, PcgOp) or op.name in SOURCES or op.name.startswith("parallel."):
            continue
        operands = [piece(t) for t in op.typed_operands()]
        results = [piece(r.type) for r in op.results]  # type: ignore[arg-type]
        found.setdefault(op_key(op.name, op.attrs(), operands, results), op)
    return found


def _int_bound(op: PcgOp, index: int) -> int:
    """A safe exclusive bound for an integer operand (indices, class labels) of one task."""
    types = op.typed_operands()
    if op.name in ("pcg.embedding", "pcg.embedding_bag"):
        return types[1].piece_shape[0]
    if op.name == "pcg.cross_entropy":
        return types[0].piece_shape[1]
    return 2


def task_runner(op: PcgOp, device: str) -> tuple[Callable[[], Any], list[Any]]:
    """A function running the op's first task once, and the operands that want gradients."""
    import torch

    from unityc.interpreter.kernels import KERNELS, Task, torch_dtype

    kernel = KERNELS.get(type(op))
    if kernel is None:
        raise KeyError(op.name)
    form = op.parallel_form()
    task = Task(op, form, next(iter(form.tasks())), op.attrs())
    generator = torch.Generator().manual_seed(0)
    operands: list[Any] = []
    for i, t in enumerate(op.typed_operands()):
        if t is None:
            operands.append(None)
            continue
        assert isinstance(t, TensorType)
        dtype = torch_dtype(t.element_type)
        if dtype.is_floating_point:
            value = torch.rand(t.piece_shape, generator=generator).to(dtype).to(device).requires_grad_()
        elif dtype == torch.bool:
            value = torch.zeros(t.piece_shape, dtype=dtype, device=device)
        else:
            value = (
                torch.randint(0, _int_bound(op, i), t.piece_shape, generator=generator).to(dtype).to(device)
            )
        operands.append(value)
    return (lambda: kernel(task, *operands)), [o for o in operands if o is not None and o.requires_grad]


def time_task(
    run: Callable[[], Any], grads: Sequence[Any], device: str, repeat: int, warmup: int
) -> tuple[float, float]:
    """Median seconds of forward, and of backward (forward + backward minus forward)."""
    import torch

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def forward() -> Any:
        out = run()
        return out if isinstance(out, list | tuple) else [out]

    def both() -> None:
        outs = [o for o in forward() if o.requires_grad]
        if outs:
            torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])

    def median(fn: Callable[[], Any]) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeat):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    fwd = median(forward)
    if not grads:
        return fwd, 0.0
    return fwd, max(median(both) - fwd, 0.0)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/profile_ops.py",
        description="Time each distinct op task of a graph on the local device and write a cache for "
        '`estimate{cost="profile" profile="FILE"}`.',
    )
    parser.add_argument("graph", help="an MLIR file with a pcg graph (a plan or an unparallelized model)")
    parser.add_argument("-o", "--output", default="profile.json", help="cache file to write or extend")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument(
        "--device-name",
        default=None,
        help="name to file the entries under: the device kind name of the machine spec "
        "(default: 'cpu' on CPU, torch's name of the GPU)",
    )
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per op (median is kept)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs before timing")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (1: one core per gloo process)")
    args = parser.parse_args(argv)

    import torch
    from tqdm import tqdm

    torch.set_num_threads(args.threads)
    device = args.device or default_device()
    name = args.device_name or device_name(device)
    try:
        module = _parse(args.graph)
        cache = ProfileCache.load(args.output) if os.path.exists(args.output) else ProfileCache()
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    tasks = distinct_tasks(module)
    skipped: list[str] = []
    for key, op in tqdm(tasks.items(), desc=f"profiling on {name}", unit="op", file=sys.stderr):
        try:
            run, grads = task_runner(op, device)
        except KeyError:
            skipped.append(op.name)
            continue
        cache.entries[f"{name}|{key}"] = time_task(run, grads, device, args.repeat, args.warmup)
    cache.save(args.output)
    print(f"{len(tasks) - len(skipped)} op shape(s) timed on {name} ({device}), written to {args.output}")
    if skipped:
        print(f"no kernel to time for: {', '.join(sorted(set(skipped)))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
