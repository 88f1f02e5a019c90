"""Splat literals: a `pcg.constant` whose every element is one value, stored as that value.

A splat of more than SPLAT_BYTES bytes holds one element's bytes (xDSL's
DenseIntOrFPElementsAttr allows it: its length is the elements it holds, its type the shape),
so the zero base a `slice_scatter` writes into at a paper shape (DeepSeek-V3's keys, a
`new_empty` of batch x heads x seq x 192: 258 GB of fp32 zeros for the region the scatter
leaves) is a few bytes through import, printing (xDSL prints a splat as `dense<v>`), parsing
(`parse_optional_splat`, no element count limit), the interpreter and codegen. A smaller one
holds every element, as any other literal. Readers take the values through `literal_values`
(every element, a splat repeated) or test `stored_once` and read the one value.
"""

from __future__ import annotations

import math
from typing import Any

from xdsl.dialects.builtin import AnyFloat, BytesAttr, DenseIntOrFPElementsAttr, IntegerType, TensorType
from xdsl.parser import Parser
from xdsl.utils.mlir_lexer import MLIRTokenKind

SPLAT_BYTES = 1024
"""Splat literals of more bytes than this hold one element (as `syntax.PACK_BYTES` packs)."""


def element_count(attr: DenseIntOrFPElementsAttr) -> int:
    return math.prod(attr.get_shape())


def stored_once(attr: Any) -> bool:
    """Whether `attr` is a splat literal that holds its one value once (of more than one element)."""
    return isinstance(attr, DenseIntOrFPElementsAttr) and len(attr) == 1 and element_count(attr) != 1


def literal_values(attr: DenseIntOrFPElementsAttr) -> tuple[Any, ...]:
    """Every element's value in row-major order (a splat stored once, repeated)."""
    values = attr.get_values()
    return values * element_count(attr) if stored_once(attr) else values


def splat_of_bytes(literal_type: TensorType[Any], one: bytes) -> DenseIntOrFPElementsAttr:
    """The splat literal of `literal_type` whose every element has the bytes `one`: stored once
    when the whole would be over SPLAT_BYTES, else every element."""
    count = math.prod(literal_type.get_shape())
    whole = len(one) * count > SPLAT_BYTES
    return DenseIntOrFPElementsAttr(literal_type, BytesAttr(one if whole else one * count))


def splat_literal(literal_type: TensorType[Any], value: float | int | bool) -> DenseIntOrFPElementsAttr:
    """The splat literal of `literal_type` whose every element is `value`."""
    one = DenseIntOrFPElementsAttr.from_list(TensorType(literal_type.get_element_type(), [1]), [value])
    return splat_of_bytes(literal_type, one.data.data)


def parse_optional_splat(parser: Parser) -> DenseIntOrFPElementsAttr | None:
    """`dense<v> : tensor<...>` as a splat literal (`splat_literal`), without expanding it (xDSL
    repeats the value once per element, a list of billions at a paper shape); None, with nothing
    consumed, for any other literal (a nested list, hex bytes, empty), which xDSL then parses."""
    start = parser.pos
    if parser.parse_optional_keyword("dense") is None:
        return None
    parser.parse_punctuation("<")
    token = parser._current_token  # pyright: ignore[reportPrivateUsage]  # xDSL's lookahead
    if token.kind in (MLIRTokenKind.L_SQUARE, MLIRTokenKind.STRING_LIT, MLIRTokenKind.GREATER):
        parser._resume_from(start)  # pyright: ignore[reportPrivateUsage]
        return None
    element = parser._parse_tensor_literal_element()  # pyright: ignore[reportPrivateUsage]
    parser.parse_punctuation(">")
    parser.parse_punctuation(":")
    type_start = parser.pos
    t = parser.parse_type()
    if not isinstance(t, TensorType) or not t.has_static_shape():
        msg = f"a splat literal needs a tensor type of static shape, got {t}"
        parser.raise_error(msg, type_start, parser.pos)
    elt = t.get_element_type()
    if not isinstance(elt, AnyFloat | IntegerType):
        parser.raise_error(f"a splat literal cannot hold {elt} elements", type_start, parser.pos)
    return splat_literal(t, element.to_type(parser, elt))
