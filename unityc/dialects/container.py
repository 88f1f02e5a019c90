"""The graph container: a module holds one `func.func` without arguments whose body lists pcg
and parallel ops and ends in `func.return` of the graph's outputs, the loss first.

`graph_function` is the one entry every stage that reads a graph goes through (interpreter,
conversion to the search's graph, cost estimate, codegen); `check_sources` is part of
verification; `training_function` adds what training needs (a scalar loss). Each failure is
located at the op at fault.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block

from unityc.dialects.diagnostics import located, where
from unityc.dialects.pcg import InputOp, WeightOp
from unityc.dialects.pcg_types import FLOAT_TYPES, TensorType
from unityc.dialects.syntax import UnitycOp
from unityc.runtime.parts import WeightKey


def graph_function(module: ModuleOp, name: str | None = None) -> func.FuncOp:
    """The module's graph function; a located error if there is not exactly one well-formed one."""
    funcs = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    if name is not None:
        funcs = [f for f in funcs if f.sym_name.data == name]
    wanted = f"func.func @{name}" if name is not None else "func.func (the graph)"
    if not funcs:
        raise located(module, f"expected one {wanted}, found none")
    if len(funcs) > 1:
        raise located(funcs[1], f"expected exactly one {wanted}, found {len(funcs)}")
    fn = funcs[0]
    for op in module.ops:  # the function alone at the top (an op after `}` makes a module around it)
        if op is not fn and not op.is_ancestor(fn):
            raise located(op, f"'{op.name}' is outside the graph function: a module holds the graph alone")
    if fn.parent_op() is not module:
        raise located(fn, "the graph function must be at the top level of the module, not nested")
    if fn.is_declaration:
        raise located(fn, f"@{fn.sym_name.data} has no body: the graph lists its ops and ends in func.return")
    if fn.function_type.inputs.data:
        raise located(fn, "the graph function must take no arguments: inputs are pcg.input ops")
    if len(fn.body.blocks) != 1:
        raise located(fn, f"the graph must be one block, found {len(fn.body.blocks)}")
    last = fn.body.block.last_op
    if not isinstance(last, func.ReturnOp) or not last.operands:
        raise located(last or fn, "the graph has no outputs: func.return must list them, the loss first")
    for op in fn.body.block.ops:
        if not isinstance(op, UnitycOp | func.ReturnOp):
            raise located(op, f"'{op.name}' is not a pcg or parallel op; the graph holds only those")
    return fn


def training_function(module: ModuleOp) -> func.FuncOp:
    """The graph function of a graph to train: its first output, the loss, is a float scalar."""
    fn = graph_function(module)
    check_loss(fn)
    return fn


def check_loss(fn: func.FuncOp) -> None:
    """The first output of a graph function (see `graph_function`) is a float scalar: the loss."""
    ret = fn.body.block.last_op
    assert isinstance(ret, func.ReturnOp)  # graph_function checked it
    loss = ret.operands[0].type
    if not isinstance(loss, TensorType) or loss.rank != 0 or loss.element_type not in FLOAT_TYPES:
        raise located(ret, f"the first output is the loss and must be a floating-point scalar, got {loss}")


def _trained(op: WeightOp) -> str:
    return "frozen" if op.attrs()["frozen"] else "trained"


def check_sources(block: Block) -> None:
    """Inputs and weights are fed by key: one key, one logical shape and element type. Weights
    that are parts of one stored tensor (`key[:, 0:8]`) do not overlap, nor does a part overlap
    the whole: each element of a parameter is trained as one weight."""
    seen: dict[tuple[type, str], InputOp | WeightOp] = {}
    parts: dict[str, list[tuple[WeightKey, WeightOp]]] = {}
    for op in block.ops:
        if not isinstance(op, InputOp | WeightOp):
            continue
        key = op.attrs()["key"]
        if isinstance(op, WeightOp) and (WeightOp, key) not in seen:
            wk = WeightKey.parse(key)
            for other, at in parts.setdefault(wk.stored, []):
                if wk.overlaps(other):
                    raise located(op, f"pcg.weight '{key}' overlaps the pcg.weight '{other}' at {where(at)}")
                if op.attrs()["frozen"] != at.attrs()["frozen"]:
                    raise located(
                        op,
                        f"pcg.weight '{key}' is {_trained(op)} but the pcg.weight '{other}' of the "
                        f"same stored tensor at {where(at)} is {_trained(at)}: a parameter is trained "
                        "whole or not at all",
                    )
            parts[wk.stored].append((wk, op))
        first = seen.setdefault((type(op), key), op)
        a, b = first.result.type, op.result.type
        assert isinstance(a, TensorType) and isinstance(b, TensorType)
        if isinstance(op, WeightOp) and isinstance(first, WeightOp) and _trained(op) != _trained(first):
            raise located(
                op,
                f"pcg.weight '{key}' is {_trained(op)}, but the one at {where(first)} is {_trained(first)}",
            )
        if (a.shape, a.element_type) != (b.shape, b.element_type):
            raise located(
                op,
                f"{op.name} '{key}' has shape {list(b.shape)} x {b.element_type}, but the {op.name} of "
                f"that key at {where(first)} has {list(a.shape)} x {a.element_type}",
            )
