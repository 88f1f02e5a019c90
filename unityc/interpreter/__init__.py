"""The reference interpreter: the executable definition of pcg + parallel semantics."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Operation, SSAValue

from unityc.dialects import parallel, pcg
from unityc.dialects.container import graph_function as entry_function
from unityc.dialects.diagnostics import located
from unityc.dialects.pcg_types import TensorType
from unityc.interpreter.functions import PcgFunctions, SourceValues
from unityc.interpreter.pieces import CopiesDiffer, MicroBatches, Pieces, assemble, scatter
from unityc.runtime.parts import WeightKey

__all__ = ["CopiesDiffer", "Pieces", "assemble", "entry_function", "int_bounds", "run_graph", "scatter"]

_PASS_THROUGH: tuple[type[Operation], ...] = (
    pcg.ReshapeOp,
    pcg.TransposeOp,
    pcg.SplitOp,
    pcg.ConcatOp,
    pcg.IdentityOp,
    pcg.GatherOp,
    *parallel.ALL_OPS,
)


def _dim(value: SSAValue, d: int) -> int:
    t = value.type
    assert isinstance(t, TensorType)
    return t.shape[d]


def _padding(table: SSAValue) -> int:
    """The padded rows of an embedding table (a padded vocabulary's: `search/vocabulary.py`)."""
    owner = table.owner
    while isinstance(owner, Operation) and isinstance(owner, tuple(parallel.ALL_OPS)) and owner.operands:
        owner = owner.operands[0].owner  # (a plan's copies or shards of it)
    if not isinstance(owner, pcg.WeightOp):
        return 0
    return WeightKey.parse(owner.attrs()["key"]).zeros(0)


def _bound_from_use(value: SSAValue, seen: set[SSAValue]) -> int | None:
    """The exclusive upper bound an integer value must respect for the ops that read it."""
    if value in seen:
        return None
    seen.add(value)
    bounds: list[int] = []
    for use in value.uses:
        user = use.operation
        if isinstance(user, pcg.EmbeddingOp | pcg.EmbeddingBagOp) and use.index == 0:
            bounds.append(_dim(user.weight, 0) - _padding(user.weight))
        elif isinstance(user, pcg.CrossEntropyOp) and use.index == 1:
            bounds.append(user.attrs().get("classes") or _dim(user.logits, 1))
        elif isinstance(user, _PASS_THROUGH):
            bounds.extend(b for r in user.results if (b := _bound_from_use(r, seen)) is not None)
    return min(bounds) if bounds else None


def int_bounds(module: ModuleOp) -> dict[str, int]:
    """For each integer input, the bound its users need (vocabulary size, class count)."""
    bounds: dict[str, int] = {}
    for op in module.walk():
        if isinstance(op, pcg.InputOp) and (b := _bound_from_use(op.result, set())) is not None:
            bounds[op.attrs()["key"]] = b
    return bounds


MAX_BYTES = 8 << 30
"""What the interpreter may hold: the values of every op, counted at 8 bytes an element over all
their pieces (it keeps every value until the end), at most this or half this machine's memory."""

MAX_PIECES = 1 << 20
"""Pieces, summed over every value: each is a tensor of its own."""


def interpreter_limit() -> int:
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return MAX_BYTES
    return min(MAX_BYTES, physical // 2)


def check_size(graph: func.FuncOp, limit: int | None = None) -> None:
    """Refuses, located at the largest value, a graph too big to interpret, before any work."""
    limit = interpreter_limit() if limit is None else limit
    total = pieces = 0
    largest: tuple[int, Operation | None] = (0, None)
    for op in graph.body.block.ops:
        for t in op.result_types:
            if not isinstance(t, TensorType):
                continue
            nbytes = 8 * math.prod(t.shape) * t.sum_degree * t.copy_degree
            total, pieces = total + nbytes, pieces + t.num_pieces
            largest = max(largest, (nbytes, op), key=lambda x: x[0])
    gib = 1 << 30
    if total > limit:
        raise located(
            largest[1],
            f"the graph's values take {total / gib:.3g} GiB in the interpreter (8 bytes an element; this "
            f"value {largest[0] / gib:.3g} GiB), more than it may hold ({limit / gib:.3g} GiB)",
        )
    if pieces > MAX_PIECES:
        msg = f"the graph's values have {pieces} pieces, more than the interpreter runs ({MAX_PIECES})"
        raise located(graph, msg)


def run_graph(
    module: ModuleOp,
    seed: int = 0,
    feeds: Mapping[str, torch.Tensor] | None = None,
    float_dtype: torch.dtype | None = None,
) -> tuple[list[Pieces], SourceValues]:
    """Runs the graph; returns its outputs as pieces and the source values it used."""
    graph = entry_function(module)
    check_size(graph)
    sources = SourceValues(seed, feeds, int_bounds(module), float_dtype)
    interpreter = Interpreter(module)
    interpreter.register_implementations(FuncFunctions())
    interpreter.register_implementations(PcgFunctions(sources))
    outputs: Any = interpreter.call_op(graph.sym_name.data, ())
    for i, out in enumerate(outputs):
        if isinstance(out, MicroBatches):
            raise ValueError(f"output {i} is still split into micro-batches: add parallel.batch")
    return list(outputs), sources
