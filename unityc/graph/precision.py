"""A graph under its training precision: the element type each value has when the program runs
it (`dialects/precision.py`), and the graph retyped so for the cost model.

Under `unityc.precision = "bf16-mixed"` contractions write bf16, losses fp32, every other op the
widest float type it reads; weights, inputs and constants keep their types (fp32 master weights,
so their gradients and the gradient reductions stay fp32). The generated program casts each
collective's piece to the element type given here, so what moves is what the cost model prices.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from xdsl.dialects.builtin import StringAttr

from unityc.dialects.pcg_types import ELEMENT_TYPES, TensorType
from unityc.dialects.precision import BF16_MIXED, FP32, PRECISION, autocast_dtype
from unityc.graph import Graph, Ref, op_class


def graph_precision(graph: Graph) -> str:
    """The graph's `unityc.precision` (fp32 when it names none; verification checked it)."""
    attr = graph.function_attrs.get(PRECISION)
    return attr.data if isinstance(attr, StringAttr) else FP32


def run_dtypes(graph: Graph) -> dict[Ref, str]:
    """The element type of every value as the program holds it (declared types under fp32)."""
    mixed = graph_precision(graph) == BF16_MIXED
    out: dict[Ref, str] = {}
    for nid in graph.topological():
        node = graph.nodes[nid]
        rule = op_class(node.op).AUTOCAST if mixed else "declared"
        operands = [None if r is None else out[r] for r in node.operands]
        for i, t in enumerate(node.types):
            out[(nid, i)] = autocast_dtype(rule, operands, str(t.element_type))
    return out


ELEMENT_TYPE_BY_NAME = {str(t): t for t in ELEMENT_TYPES}


@lru_cache(maxsize=100_000)
def _retyped(t: TensorType, dtype: str) -> TensorType:
    return TensorType(t.shape, ELEMENT_TYPE_BY_NAME[dtype], t.shard, t.sum_degree, t.copy_degree)


def priced_graph(graph: Graph) -> Graph:
    """`graph` with each value in the element type the program runs it in (the graph itself
    under fp32): what the cost model prices. Node ids, views and plans are unchanged."""
    if graph_precision(graph) == FP32:
        return graph
    dtypes = run_dtypes(graph)
    out = graph.copy()
    for nid, node in graph.nodes.items():
        types = tuple(
            t if str(t.element_type) == dtypes[(nid, i)] else _retyped(t, dtypes[(nid, i)])
            for i, t in enumerate(node.types)
        )
        if types != node.types:
            out.nodes[nid] = replace(node, types=types)
    return out


__all__ = ["graph_precision", "priced_graph", "run_dtypes"]
