"""Lossless conversion between the pcg dialect (`func.func @main` in a module) and `Graph`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region, SSAValue
from xdsl.irdl import OptOperandDef, VarOperandDef, VarResultDef

from unityc.dialects.container import graph_function
from unityc.dialects.pipeline import op_rows
from unityc.dialects.syntax import Kind, UnitycOp, to_attr
from unityc.graph import Graph, Ref, op_class


def from_module(module: ModuleOp) -> Graph:
    """The graph of the module's single graph function: its ops as `op_rows` reads them."""
    fn = graph_function(module)
    for op in fn.body.block.ops:
        if not isinstance(op, UnitycOp | func.ReturnOp):
            raise ValueError(f"'{op.name}' is not a pcg or parallel op; the graph holds only those")
    nodes, outputs, _ = op_rows(fn)
    return Graph(nodes, outputs, dict(module.attributes), len(nodes), dict(fn.attributes))


def _grouped(cls: type[UnitycOp], flat: Sequence[SSAValue | None]) -> list[Any]:
    """Flat operands regrouped by definition: a variadic definition takes what the others leave."""
    definitions = [d for _, d in cls.get_irdl_definition().operands]
    fixed = sum(1 for d in definitions if not isinstance(d, VarOperandDef) or isinstance(d, OptOperandDef))
    variadic = len(flat) - fixed
    groups: list[Any] = []
    it = iter(flat)
    for d in definitions:
        if isinstance(d, VarOperandDef) and not isinstance(d, OptOperandDef):
            groups.append([next(it) for _ in range(variadic)])
        else:
            groups.append(next(it))
    return groups


def _grouped_results(cls: type[UnitycOp], types: list[Any]) -> list[Any]:
    definitions = [d for _, d in cls.get_irdl_definition().results]
    if len(definitions) == 1 and isinstance(definitions[0], VarResultDef):
        return [types]
    return types


def _hint(key: str) -> str:
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in key)
    return text if text and not text[0].isdigit() else f"v{text}"


def to_module(graph: Graph) -> ModuleOp:
    """A module holding `func.func @main` with the graph's live ops in topological order."""
    block = Block()
    values: dict[Ref, SSAValue] = {}
    live = graph.live()
    for nid in graph.topological():
        if nid not in live:
            continue
        node = graph.nodes[nid]
        cls = op_class(node.op)
        kinds = {p: kind for p, kind, _ in cls.PROPS}
        props = {name: to_attr(kinds[name], value) for name, value in node.attrs}
        flat = [None if r is None else values[r] for r in node.operands]
        op = cls.build(
            operands=_grouped(cls, flat),
            result_types=_grouped_results(cls, list(node.types)),
            properties=props,
            attributes=node.plan.attributes(),
        )
        block.add_op(op)
        for i, result in enumerate(op.results):
            values[(nid, i)] = result
        if node.hint is not None:
            for result in op.results:
                result.name_hint = node.hint
        elif node.op in ("pcg.input", "pcg.weight"):
            op.results[0].name_hint = _hint(node.attr("key"))
    outputs = [values[r] for r in graph.outputs]
    block.add_op(func.ReturnOp(*outputs))
    main = func.FuncOp("main", ((), [v.type for v in outputs]), Region(block))
    main.attributes.update(graph.function_attrs)
    return ModuleOp([main], attributes=dict(graph.module_attrs))


__all__ = ["Kind", "from_module", "to_module"]
