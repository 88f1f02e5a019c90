"""Runs a `Graph` with the reference interpreter's kernels, node by node.

Used where building and interpreting an xDSL module per graph would be too slow: rule
fingerprints and numeric rule checks. Each node runs exactly as `run_graph` runs its op (same
kernels, same parallel forms). Source values are random pieces: every partial sum and every
shard gets its own values, so a graph that mishandles partial sums cannot pass by luck.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import torch
from xdsl.dialects.builtin import StringAttr

from unityc.dialects import pcg
from unityc.dialects.forms import Form
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.syntax import UnitycOp, to_attr
from unityc.graph import Graph, Node, Ref, op_class
from unityc.graph.convert import _grouped, _grouped_results
from unityc.interpreter.functions import run_parallel, run_tasks, sum_concat
from unityc.interpreter.kernels import literal_tensor, torch_dtype
from unityc.interpreter.pieces import Pieces, scatter

Values = dict[Ref, Pieces]


def random_pieces(
    t: TensorType, gen: torch.Generator, dtype: torch.dtype = torch.float64, int_bound: int = 4
) -> Pieces:
    """Independent random values for every shard and partial sum; equal copies."""
    out = Pieces.empty(t)
    elt = torch_dtype(t.element_type, dtype)
    for coord in itertools.product(*(range(k) for k in t.shard), range(t.sum_degree)):
        if elt.is_floating_point:
            piece = (torch.rand(t.piece_shape, generator=gen, dtype=torch.float64) * 2 - 1).to(elt)
        elif elt == torch.bool:
            piece = torch.randint(0, 2, t.piece_shape, generator=gen).bool()
        else:
            piece = torch.randint(0, int_bound, t.piece_shape, generator=gen, dtype=elt)
        for r in range(t.copy_degree):
            out.array[(*coord, r)] = piece.clone()
    return out


def source_pieces(node: Node, seed: int, dtype: torch.dtype) -> Pieces:
    (t,) = node.types
    if node.op == "pcg.constant":
        return scatter(literal_tensor(node.attr("value"), torch_dtype(t.element_type, dtype)), t)
    key = node.attr("key")
    gen = torch.Generator().manual_seed((zlib.crc32(f"{node.op}:{key}".encode()) ^ seed) & 0x7FFFFFFF)
    return random_pieces(t, gen, dtype)


@lru_cache(maxsize=20_000)
def _op(
    name: str,
    attrs: tuple[tuple[str, Any], ...],
    operand_types: tuple[TensorType | None, ...],
    types: tuple[TensorType, ...],
) -> UnitycOp:
    """An unattached xDSL op of this kind (operands are results of placeholder inputs)."""
    cls = op_class(name)
    kinds = {p: kind for p, kind, _ in cls.PROPS}
    flat = [
        None if t is None else pcg.InputOp.build(result_types=[t], properties={"key": StringAttr("_")}).result
        for t in operand_types
    ]
    return cls.build(
        operands=_grouped(cls, flat),
        result_types=_grouped_results(cls, list(types)),
        properties={p: to_attr(kinds[p], v) for p, v in attrs},
    )


@lru_cache(maxsize=20_000)
def _op_form(
    name: str,
    attrs: tuple[tuple[str, Any], ...],
    operand_types: tuple[TensorType | None, ...],
    types: tuple[TensorType, ...],
) -> tuple[UnitycOp, Form]:
    """The op and its parallel form, computed once (inference is the costly part of a node)."""
    op = _op(name, attrs, operand_types, types)
    return op, op.parallel_form()


def run_node(graph: Graph, node: Node, values: Values, dtype: torch.dtype) -> tuple[Pieces, ...]:
    operand_types = tuple(None if r is None else graph.type_of(r) for r in node.operands)
    op, form = _op_form(node.op, node.attrs, operand_types, node.types)
    operands = [None if r is None else values[r] for r in node.operands]
    if node.op == "parallel.sum_concat":
        a, b = operands
        assert a is not None and b is not None
        return (sum_concat(node.types[0], a, b),)
    if node.op.startswith("parallel."):
        (value,) = operands
        assert value is not None
        return (run_parallel(op, value),)
    return run_tasks(op, operands, dtype, form)


def evaluate(
    graph: Graph,
    sources: Mapping[str, Pieces] | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    values: Values | None = None,
) -> Values:
    """Every tensor's pieces. `sources` gives values by key; others are random (seeded by key).
    `values` may hold already computed tensors (it is extended in place)."""
    values = {} if values is None else values
    given = sources or {}
    for nid in graph.topological():
        if (nid, 0) in values:
            continue
        node = graph.nodes[nid]
        if node.is_source:
            key = node.attr("key")
            values[(nid, 0)] = given[key] if key in given else source_pieces(node, seed, dtype)
            continue
        for i, result in enumerate(run_node(graph, node, values, dtype)):
            values[(nid, i)] = result
    return values
