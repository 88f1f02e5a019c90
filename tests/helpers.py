"""Helpers for building tiny pcg/parallel graphs programmatically and running them.

A `Graph` collects ops into the body of `func.func @main()`; sources are `pcg.input` /
`pcg.weight` ops whose values are fed explicitly, so that a test knows every value exactly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    ModuleOp,
    StringAttr,
    f32,
    f64,
    i64,
)
from xdsl.dialects.builtin import TensorType as BuiltinTensorType
from xdsl.ir import Attribute, SSAValue

from unityc.dialects import parallel, pcg
from unityc.dialects.pcg_types import TensorType
from unityc.frontend.builder import GraphBuilder
from unityc.interpreter import Pieces, assemble, run_graph

DTYPES = {torch.float32: f32, torch.float64: f64, torch.int64: i64}


def ttype(
    shape: Sequence[int],
    elt: Attribute = f32,
    shard: Sequence[int] | None = None,
    sum: int = 1,
    copy: int = 1,
) -> TensorType:
    return TensorType(list(shape), elt, list(shard) if shard is not None else None, sum, copy)


class Graph(GraphBuilder):
    """Builds `func.func @main()` op by op, with sources of any degrees (the importer's builder
    makes only unparallelized ones)."""

    def _source(
        self, cls: Any, key: str, shape: Sequence[int], elt: Attribute, shard: Sequence[int] | None, copy: int
    ) -> SSAValue:
        t = ttype(shape, elt, shard, 1, copy)
        return self.add(cls.named(key, t)).result

    def input(
        self,
        key: str,
        shape: Sequence[int],
        elt: Attribute = f32,
        shard: Sequence[int] | None = None,
        copy: int = 1,
    ) -> SSAValue:
        return self._source(pcg.InputOp, key, shape, elt, shard, copy)

    def weight(
        self,
        key: str,
        shape: Sequence[int],
        elt: Attribute = f32,
        shard: Sequence[int] | None = None,
        copy: int = 1,
    ) -> SSAValue:
        return self._source(pcg.WeightOp, key, shape, elt, shard, copy)

    def constant(
        self, value: torch.Tensor, elt: Attribute = f32, shard: Sequence[int] | None = None, copy: int = 1
    ) -> SSAValue:
        shape = list(value.shape)
        literal = DenseIntOrFPElementsAttr.from_list(
            BuiltinTensorType(elt, shape), [v.item() for v in value.flatten()]
        )
        t = ttype(shape, elt, shard, 1, copy)
        return self.add(pcg.ConstantOp.build(result_types=[t], properties={"value": literal})).result

    # parallel-op shorthands
    def partition(self, x: SSAValue, dim: int, degree: int) -> SSAValue:
        return self.op(parallel.PartitionOp, [x], dim=dim, degree=degree)

    def combine(self, x: SSAValue, dim: int, degree: int) -> SSAValue:
        return self.op(parallel.CombineOp, [x], dim=dim, degree=degree)

    def replicate(self, x: SSAValue, degree: int) -> SSAValue:
        return self.op(parallel.ReplicateOp, [x], degree=degree)

    def reduce(self, x: SSAValue, degree: int) -> SSAValue:
        return self.op(parallel.ReduceOp, [x], degree=degree)

    def module(self, outputs: Sequence[SSAValue], attributes: dict[str, Attribute] | None = None) -> ModuleOp:
        module = super().module(outputs, attributes)
        module.verify()
        return module


def run(
    module: ModuleOp,
    feeds: Mapping[str, torch.Tensor] | None = None,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> list[Pieces]:
    outputs, _ = run_graph(module, seed=seed, feeds=feeds, float_dtype=dtype)
    return outputs


def run_assembled(
    module: ModuleOp,
    feeds: Mapping[str, torch.Tensor] | None = None,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> list[torch.Tensor]:
    return [assemble(p, f"output {i}") for i, p in enumerate(run(module, feeds, dtype, seed))]


def gather(g: Graph, x: SSAValue) -> SSAValue:
    """Appends parallel ops that reduce x's partial sums and combine its shards (copies stay:
    no parallel op drops copies, and `assemble` checks that they agree)."""
    t: TensorType = x.type  # type: ignore[assignment]
    if t.sum_degree > 1:
        x = g.reduce(x, t.sum_degree)
    for d, k in enumerate(t.shard):
        if k > 1:
            x = g.combine(x, d, k)
    return x


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype = torch.float64) -> None:
    """float64: absolute/relative 1e-10; float32: relative error (norm-wise) at most 1e-5."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if not actual.dtype.is_floating_point:
        assert torch.equal(actual, expected.to(actual.dtype))
        return
    a, e = actual.double(), expected.double()
    if dtype == torch.float64:
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10)
    else:
        denom = max(e.abs().max().item(), 1e-30)
        err = (a - e).abs().max().item() / denom
        assert err <= 1e-5, f"relative error {err:.3g} > 1e-5"


# ------------------------------------------------------------------------------------------
# One op, fed through a whole graph (sources scatter the fed values into pieces)
# ------------------------------------------------------------------------------------------


def _elt(value: torch.Tensor) -> Attribute:
    return f32 if value.dtype.is_floating_point else i64


def build_op_graph(
    cls: Any, operands: Sequence[Any], attrs: Mapping[str, Any], degrees: Sequence[Any] | None = None
) -> tuple[ModuleOp, dict[str, torch.Tensor], Any]:
    """A graph feeding each operand (a tensor, None, or a list of tensors for a variadic operand)
    from an input `in{i}` (typed with `degrees[i]` = (shard, copy) if given) into one `cls` op.
    Returns (module, feeds, op)."""
    g = Graph()
    feeds: dict[str, torch.Tensor] = {}
    values: list[Any] = []

    def source(key: str, v: torch.Tensor, deg: Any) -> SSAValue:
        shard, copy = deg if deg is not None else (None, 1)
        feeds[key] = v
        return g.input(key, list(v.shape), _elt(v), shard, copy)

    for i, v in enumerate(operands):
        deg = degrees[i] if degrees is not None else None
        if v is None:
            values.append(None)
        elif isinstance(v, list | tuple):
            values.append([source(f"in{i}_{j}", u, deg[j] if deg else None) for j, u in enumerate(v)])
        else:
            values.append(source(f"in{i}", v, deg))
    op = g.add(cls.build_inferred(values, **attrs))
    module = g.module(list(op.results))
    return module, feeds, op


def run_op(
    cls: Any,
    operands: Sequence[Any],
    attrs: Mapping[str, Any],
    dtype: torch.dtype = torch.float64,
    degrees: Sequence[Any] | None = None,
) -> list[torch.Tensor]:
    module, feeds, _ = build_op_graph(cls, operands, attrs, degrees)
    return run_assembled(module, feeds, dtype)


# ------------------------------------------------------------------------------------------
# One op, run task by task on hand-made pieces (partial sums that are random, not zeros)
# ------------------------------------------------------------------------------------------


def make_pieces(value: torch.Tensor, t: TensorType, gen: torch.Generator) -> Pieces:
    """Pieces of `value` for type t: partial sums are random parts adding up to the piece
    (so a non-linear op fed partial sums would give a wrong result), copies are clones."""
    import itertools

    from unityc.interpreter.pieces import shard_slices

    out = Pieces.empty(t)
    s, c = t.sum_degree, t.copy_degree
    for shard in itertools.product(*(range(k) for k in t.shard)):
        piece = value[shard_slices(t, shard)]
        if s > 1:
            assert piece.dtype.is_floating_point, "integer values cannot hold partial sums"
            parts = [
                torch.randn(piece.shape, generator=gen, dtype=torch.float64).to(piece.dtype)
                for _ in range(s - 1)
            ]
            first = piece - sum(parts)
            parts = [first, *parts]
        else:
            parts = [piece]
        for j, part in enumerate(parts):
            for r in range(c):
                out.array[(*shard, j, r)] = part.clone()
    return out


def dummy_values(types: Sequence[TensorType | list | None]) -> list[Any]:
    """SSA values of the given types (results of unverified pcg.input ops, any degrees)."""
    values: list[Any] = []
    for i, t in enumerate(types):
        if t is None:
            values.append(None)
        elif isinstance(t, list):
            values.append(dummy_values(t))
        else:
            op = pcg.InputOp.build(result_types=[t], properties={"key": StringAttr(f"v{i}")})
            values.append(op.result)
    return values


def run_tasks_on(
    cls: Any,
    types: Sequence[Any],
    values: Sequence[Any],
    attrs: Mapping[str, Any],
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> tuple[Any, list[torch.Tensor]]:
    """Builds `cls` on operands of the given (parallel) types, verifies it, runs its tasks on
    pieces of `values` and returns (op, assembled results)."""
    from unityc.interpreter.functions import run_tasks

    gen = torch.Generator().manual_seed(seed)
    op = cls.build_inferred(dummy_values(types), **attrs)
    op.verify_()

    def pieces(t: Any, v: Any) -> Any:
        if t is None:
            return None
        if isinstance(t, list):
            return [pieces(a, b) for a, b in zip(t, v, strict=True)]
        v = v.to(dtype) if v.dtype.is_floating_point else v
        return make_pieces(v, t, gen)

    flat: list[Any] = []
    for t, v in zip(types, values, strict=True):
        p = pieces(t, v)
        flat.extend(p if isinstance(p, list) else [p])
    outs = run_tasks(op, flat, dtype)
    return op, [assemble(o, f"result {i}") for i, o in enumerate(outs)]


def build_with_types(
    cls: Any, values: Sequence[Any], attrs: Mapping[str, Any], result_types: Sequence[TensorType]
) -> Any:
    """Builds `cls` with explicitly stated result types (not inferred), for verifier tests."""
    from unityc.dialects.syntax import to_attr

    groups = [() if v is None else tuple(v) if isinstance(v, list | tuple) else (v,) for v in values]
    props = {
        name: to_attr(kind, attrs[name])
        for name, kind, _ in cls.PROPS
        if attrs.get(name) is not None and attrs.get(name) is not False
    }
    return cls.build(operands=list(groups), result_types=list(result_types), properties=props)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=gen(seed), dtype=torch.float64)


def randint(high: int, *shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=gen(seed), dtype=torch.int64)


# Values for examples/mlp.mlir (16x32 input, 64 hidden, 10 classes), scaled to keep logits tame.
MLP_FEEDS = {
    "x": randn(16, 32),
    "label": randint(10, 16, seed=1),
    "fc1.weight": randn(64, 32, seed=2) / 6,
    "fc1.bias": randn(64, seed=3),
    "fc2.weight": randn(10, 64, seed=4) / 8,
    "fc2.bias": randn(10, seed=5),
}


DEEP_MLP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pipeline", "deep_mlp.py") + ":make"
"""The pipeline tests' deep MLP factory (`unityc-import` model spec)."""


BATCH_NORM = """
func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" : !pcg.tensor<8x4x2x2xf32>
  %w = pcg.weight key "w" : !pcg.tensor<4x4x1x1xf32>
  %c = pcg.conv2d %x, %w : !pcg.tensor<8x4x2x2xf32>, !pcg.tensor<4x4x1x1xf32> -> !pcg.tensor<8x4x2x2xf32>
  %n = pcg.batch_norm %c eps 1.0e-05 : !pcg.tensor<8x4x2x2xf32> -> !pcg.tensor<8x4x2x2xf32>
  %l = pcg.reduce %n kind "mean" dims [0, 1, 2, 3] : !pcg.tensor<8x4x2x2xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
"""
"""A conv2d, a training-mode batch norm over the batch, and a mean: a graph no pipeline may
micro-batch (each micro-batch would use its own statistics)."""
