"""Builds a pcg graph (`func.func @main()`) op by op, inferring every result type."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    ModuleOp,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.dialects.builtin import TensorType as BuiltinTensorType
from xdsl.ir import Attribute, Block, Region, SSAValue

from unityc.dialects import pcg
from unityc.dialects.literals import splat_of_bytes
from unityc.dialects.pcg_types import TORCH_NAMES, TensorType

ELEMENT_TYPES: dict[torch.dtype, Attribute] = {
    getattr(torch, TORCH_NAMES[t]): t for t in (f32, f64, f16, bf16, i64, i32, i1)
}
"""The dtypes the importer takes (int32: integer arithmetic on ids, as RoBERTa's position ids)."""


def element_type(dtype: torch.dtype) -> Attribute:
    if dtype not in ELEMENT_TYPES:
        supported = ", ".join(str(d).removeprefix("torch.") for d in ELEMENT_TYPES)
        raise ValueError(f"tensors of dtype {dtype} are not supported (supported: {supported})")
    return ELEMENT_TYPES[dtype]


class GraphBuilder:
    """Appends ops to the body of the graph function; `module()` closes it with the outputs."""

    def __init__(self) -> None:
        self.block = Block()

    def add(self, op: Any) -> Any:
        self.block.add_op(op)
        return op

    def op(self, cls: type[pcg.PcgOp], operands: Sequence[Any], hint: str | None = None, **attrs: Any) -> Any:
        """Adds `cls` with inferred result types; returns its result (or list of results)."""
        op = self.add(cls.build_inferred(list(operands), **attrs))
        results = list(op.results)
        if hint:
            for r in results:
                r.name_hint = hint
        return results[0] if len(results) == 1 else results

    def source(
        self,
        cls: type[pcg.SourceOp],
        key: str,
        shape: Sequence[int],
        dtype: torch.dtype,
        frozen: bool = False,
    ) -> SSAValue:
        op = cls.named(key, TensorType(list(shape), element_type(dtype)), frozen)
        self.block.add_op(op)
        op.result.name_hint = _hint(key)
        return op.result

    def constant(self, value: torch.Tensor, hint: str | None = None) -> SSAValue:
        elt = element_type(value.dtype)
        shape = list(value.shape)
        literal = dense_literal(value, BuiltinTensorType(elt, shape))  # `value` may be a broadcast
        op = pcg.ConstantOp.build(result_types=[TensorType(shape, elt)], properties={"value": literal})
        self.block.add_op(op)
        if hint:
            op.result.name_hint = _hint(hint)
        return op.result

    def module(self, outputs: Sequence[SSAValue], attributes: dict[str, Attribute] | None = None) -> ModuleOp:
        self.block.add_op(func.ReturnOp(*outputs))
        graph = func.FuncOp("main", ((), [o.type for o in outputs]), Region(self.block))
        return ModuleOp([graph], attributes=attributes or {})


def dense_literal(value: torch.Tensor, literal_type: BuiltinTensorType[Any]) -> DenseIntOrFPElementsAttr[Any]:
    """`value` as a dense literal, from its row-major little-endian bytes (true as the signless
    i1 -1, one byte 0xFF, as xDSL holds it), so a large constant never becomes a list of Python
    numbers; bf16, which has no byte format in xDSL, goes through its values. A tensor of one
    value is a splat literal (`dialects/literals.py`: a large one holds the value once), read
    from the part it is not broadcast along, so a broadcast zero base is never expanded."""
    part = compact(value)
    if value.numel() > 1 and _one_value(part):
        one = dense_literal(part.reshape(-1)[:1], BuiltinTensorType(literal_type.get_element_type(), [1]))
        return splat_of_bytes(literal_type, one.data.data)
    if value.dtype == torch.bfloat16:
        return DenseIntOrFPElementsAttr.from_list(literal_type, value.flatten().tolist())
    if value.dtype == torch.bool:
        value = -value.to(torch.int8)
    array = value.detach().cpu().contiguous().numpy()
    raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return DenseIntOrFPElementsAttr(literal_type, BytesAttr(raw))


def _one_value(part: torch.Tensor) -> bool:
    """Whether every element of `part` has the same bits (-0.0 is not 0.0; one NaN is itself)."""
    if part.dtype.is_floating_point:
        part = part.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[part.element_size()])
    return bool((part == part.reshape(-1)[:1]).all())


def compact(value: torch.Tensor) -> torch.Tensor:
    """`value` with each dim it is broadcast along (stride 0) narrowed to size 1: the part that
    holds its values, of the same rank, which broadcasting restores."""
    for d in range(value.dim()):
        if value.stride(d) == 0 and value.shape[d] > 1:
            value = value.narrow(d, 0, 1)
    return value


def _hint(key: str) -> str:
    """A readable SSA name from a state_dict key or input name (`fc1.weight` -> `fc1_weight`;
    MLIR names are ASCII: `couche_é.weight` -> `couche___weight`)."""
    text = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in key)
    return text if text and not text[0].isdigit() else f"v{text}"
