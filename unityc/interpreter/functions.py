"""xDSL interpreter functions for the pcg and parallel dialects.

Every pcg op runs task by task (its parallel form says which operand pieces a task reads);
parallel ops move, concatenate and sum pieces. So a plan's data movement really happens here,
and `assemble` of any value gives its logical tensor.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.utils.exceptions import InterpretationError

from unityc.dialects import parallel, pcg
from unityc.dialects.diagnostics import located
from unityc.dialects.forms import Form
from unityc.dialects.pcg_types import TensorType
from unityc.interpreter.kernels import KERNELS, Task, literal_tensor, torch_dtype
from unityc.interpreter.pieces import MicroBatches, Pieces, scatter
from unityc.runtime.parts import WeightKey


class SourceValues:
    """Values of inputs and weights: given feeds, else seeded random tensors keyed by name, so
    that the same name gets the same logical value in every graph (plan or unparallelized)."""

    def __init__(
        self,
        seed: int,
        feeds: Mapping[str, torch.Tensor] | None = None,
        int_bounds: Mapping[str, int] | None = None,
        float_dtype: torch.dtype | None = None,
    ):
        self.seed = seed
        self.feeds = dict(feeds or {})
        self.int_bounds = dict(int_bounds or {})
        self.float_dtype = float_dtype
        self.generated: dict[str, torch.Tensor] = {}

    def value(self, key: str, t: TensorType, kind: str) -> torch.Tensor:
        if key in self.feeds:
            return self.feeds[key].to(torch_dtype(t.element_type, self.float_dtype))
        part = WeightKey.parse(key) if kind == "weight" else None
        if part is not None and part.pad:  # a padded vocabulary's: the unpadded value, then zeros
            real = TensorType(part.real_shape(t.shape), t.element_type)
            return part.padding(self.value(str(part.unpadded()), real, kind))
        if key not in self.generated:
            self.generated[key] = self._random(f"{kind}:{key}", t)
        return self.generated[key]

    def _random(self, name: str, t: TensorType) -> torch.Tensor:
        g = torch.Generator().manual_seed((zlib.crc32(name.encode()) ^ self.seed) & 0x7FFFFFFF)
        dtype = torch_dtype(t.element_type, self.float_dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, t.shape, generator=g).bool()
        if not dtype.is_floating_point:
            bound = self.int_bounds.get(name.split(":", 1)[1], 2)
            return torch.randint(0, bound, t.shape, generator=g, dtype=dtype)
        fan_in = max(1, int(np.prod(t.shape[1:]))) if len(t.shape) > 1 else 1
        scale = 1.0 / fan_in**0.5
        return (torch.rand(t.shape, generator=g, dtype=torch.float64) * 2 - 1).mul(scale).to(dtype)


def _flat_operands(op: Any, args: PythonValues) -> list[Any]:
    """Operand values in definition order, None where an optional operand is absent."""
    values = iter(args)
    flat: list[Any] = []
    for t in op.typed_operands():
        flat.append(None if t is None else next(values))
    return flat


def _per_micro_batch(
    op: Any, run: Callable[[list[Any]], tuple[Any, ...]], operands: list[Any]
) -> tuple[Any, ...]:
    counts = {len(v.items) for v in operands if isinstance(v, MicroBatches)}
    if not counts:
        return run(operands)
    if len(counts) > 1:
        raise located(op, f"{op.name}: operands have different micro-batch counts {sorted(counts)}")
    n = counts.pop()
    runs = [run([v.items[m] if isinstance(v, MicroBatches) else v for v in operands]) for m in range(n)]
    return tuple(MicroBatches([r[i] for r in runs]) for i in range(len(runs[0])))


def run_tasks(
    op: Any, operands: list[Pieces | None], float_dtype: torch.dtype | None, form: Form | None = None
) -> tuple[Pieces, ...]:
    """Runs every task of the op; `form` may be given when the caller has it cached."""
    form = form or op.parallel_form()
    attrs = op.attrs()
    kernel = KERNELS[type(op)]
    outs = [Pieces.empty(r.type) for r in op.results]
    for coords in form.tasks():
        local = [
            None if layout is None or value is None else value[form.coord(layout, coords)]
            for layout, value in zip(form.operands, operands, strict=True)
        ]
        produced = kernel(Task(op, form, coords, attrs, float_dtype, operands), *local)
        produced = produced if isinstance(produced, list | tuple) else [produced]
        for out, layout, piece in zip(outs, form.results, produced, strict=True):
            out.array[form.coord(layout, coords)] = piece
    return tuple(outs)


def _coords(shape: tuple[int, ...]) -> itertools.product:
    return itertools.product(*(range(d) for d in shape))


def _regroup(
    value: Pieces,
    t: TensorType,
    axis: int,
    n: int,
    grow: bool,
    combine: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
    split: Callable[[torch.Tensor], list[torch.Tensor]] | None = None,
) -> Pieces:
    """Multiply (grow) or divide the degree of one task axis by n, per the index convention:
    piece i becomes pieces i*n .. i*n+n-1, or pieces i*n .. i*n+n-1 merge into piece i."""
    out = Pieces.empty(t)
    for coord in _coords(t.task_degrees() if not grow else value.type.task_degrees()):
        if grow:
            parts = split(value[coord]) if split else [value[coord].clone() for _ in range(n)]
            for j, part in enumerate(parts):
                out.array[(*coord[:axis], coord[axis] * n + j, *coord[axis + 1 :])] = part
        else:
            group = [value[(*coord[:axis], coord[axis] * n + j, *coord[axis + 1 :])] for j in range(n)]
            assert combine is not None
            out.array[coord] = combine(group)
    return out


def partition(value: Pieces, t: TensorType, dim: int, n: int) -> Pieces:
    return _regroup(value, t, dim, n, True, split=lambda p: [c.clone() for c in torch.chunk(p, n, dim)])


def combine(value: Pieces, t: TensorType, dim: int, n: int) -> Pieces:
    return _regroup(value, t, dim, n, False, combine=lambda g: torch.cat(g, dim))


def replicate(value: Pieces, t: TensorType, n: int) -> Pieces:
    return _regroup(value, t, t.rank + 1, n, True)


def reduce(value: Pieces, t: TensorType, n: int) -> Pieces:
    return _regroup(value, t, t.rank, n, False, combine=lambda g: torch.stack(g).sum(0))


def sum_concat(t: TensorType, a: Pieces, b: Pieces) -> Pieces:
    """Partial sums of `a`, then those of `b` (see parallel.sum_concat)."""
    out = Pieces.empty(t)
    half = a.type.sum_degree
    for coord in _coords(a.type.task_degrees()):
        j = coord[-2]
        out.array[coord] = a[coord].clone()
        out.array[(*coord[:-2], half + j, coord[-1])] = b[coord].clone()
    return out


def _between(t: TensorType, **changes: Any) -> TensorType:
    """The intermediate type of a fused collective after its first step."""
    shard = list(changes.get("shard", t.shard))
    return TensorType(
        t.shape, t.element_type, shard, changes.get("sum", t.sum_degree), changes.get("copy", t.copy_degree)
    )


def _shard_with(t: TensorType, dim: int, k: int) -> list[int]:
    shard = list(t.shard)
    shard[dim] = k
    return shard


def run_parallel(op: Any, value: Pieces) -> Pieces:
    t: TensorType = op.output.type
    src: TensorType = value.type
    a = op.attrs()
    n = a["degree"]
    match op:
        case parallel.PartitionOp():
            return partition(value, t, a["dim"], n)
        case parallel.CombineOp():
            return combine(value, t, a["dim"], n)
        case parallel.ReplicateOp():
            return replicate(value, t, n)
        case parallel.ReduceOp():
            return reduce(value, t, n)
        case parallel.AllReduceOp():
            return replicate(reduce(value, _between(src, sum=t.sum_degree), n), t, n)
        case parallel.ReduceScatterOp():
            return partition(reduce(value, _between(src, sum=t.sum_degree), n), t, a["dim"], n)
        case parallel.AllGatherOp():
            return replicate(combine(value, _between(src, shard=t.shard), a["dim"], n), t, n)
        case parallel.AllToAllOp():
            mid = _between(src, shard=_shard_with(src, a["src"], t.shard[a["src"]]))
            return partition(combine(value, mid, a["src"], n), t, a["dst"], n)
    raise InterpretationError(f"no interpreter for {op.name}")


def _pipeline(op: Any, value: Pieces) -> MicroBatches:
    a = op.attrs()
    t: TensorType = op.output.type
    items = [Pieces.empty(t) for _ in range(a["degree"])]
    for coord in _coords(value.type.task_degrees()):
        for m, chunk in enumerate(torch.chunk(value[coord], a["degree"], a["dim"])):
            items[m].array[coord] = chunk.clone()
    return MicroBatches(items)


def _batch(op: Any, value: MicroBatches) -> Pieces:
    a = op.attrs()
    out = Pieces.empty(op.output.type)
    for coord in _coords(out.type.task_degrees()):
        out.array[coord] = torch.cat([item[coord] for item in value.items], a["dim"])
    return out


def _make_functions() -> type[InterpreterFunctions]:
    methods: dict[str, Any] = {}

    def source_impl(kind: str) -> Callable[..., PythonValues]:
        def run(self: PcgFunctions, interpreter: Interpreter, op: Any, args: PythonValues) -> PythonValues:
            t: TensorType = op.result.type
            if kind == "constant":
                dtype = torch_dtype(t.element_type, self.sources.float_dtype)
                return (scatter(literal_tensor(op.properties["value"], dtype), t),)
            return (scatter(self.sources.value(op.attrs()["key"], t, kind), t),)

        return run

    def pcg_impl(self: PcgFunctions, interpreter: Interpreter, op: Any, args: PythonValues) -> PythonValues:
        try:
            return _per_micro_batch(
                op, lambda ops: run_tasks(op, ops, self.sources.float_dtype), _flat_operands(op, args)
            )
        except RuntimeError as e:  # a torch kernel refused what the verifier let through
            raise located(op, f"{op.name}: the kernel failed: {str(e).splitlines()[0]}") from None

    def parallel_impl(
        self: PcgFunctions, interpreter: Interpreter, op: Any, args: PythonValues
    ) -> PythonValues:
        if isinstance(op, parallel.SumConcatOp):
            return _per_micro_batch(op, lambda vs: (sum_concat(op.output.type, vs[0], vs[1]),), list(args))
        (value,) = args
        if isinstance(op, parallel.PipelineOp):
            if isinstance(value, MicroBatches):
                raise located(op, "nested parallel.pipeline is not supported")
            return (_pipeline(op, value),)
        if isinstance(op, parallel.BatchOp):
            if not isinstance(value, MicroBatches):
                raise located(op, "parallel.batch of a value that is not micro-batched")
            return (_batch(op, value),)
        return _per_micro_batch(op, lambda vs: (run_parallel(op, vs[0]),), [value])

    for source_type, kind in ((pcg.InputOp, "input"), (pcg.WeightOp, "weight"), (pcg.ConstantOp, "constant")):
        methods[f"run_{kind}"] = impl(source_type)(source_impl(kind))
    # keyed by the op name: class names clash across dialects (pcg.ReduceOp, parallel.ReduceOp)
    for kernel_type in KERNELS:
        methods[f"run_{kernel_type.name.replace('.', '_')}"] = impl(kernel_type)(pcg_impl)
    for parallel_type in parallel.ALL_OPS:
        methods[f"run_{parallel_type.name.replace('.', '_')}"] = impl(parallel_type)(parallel_impl)
    return register_impls(type("PcgFunctions", (PcgFunctionsBase,), methods))


class PcgFunctionsBase(InterpreterFunctions):
    def __init__(self, sources: SourceValues):
        self.sources = sources


PcgFunctions: Any = _make_functions()
