"""The op base shared by the pcg and parallel dialects: typed properties declared once,
one readable custom syntax, result-type inference, and verification against inference.

Custom syntax of every op:

    %r = pcg.linear %x, %w bias %b {view = #pcg.view<...>} : !t0, !t1, !t2 -> !t3
    %s:2 = pcg.split %x dim 1 sizes [2, 6] : !t0 -> !t1, !t2
    %w = pcg.weight name "fc1.weight" : !t0            (no operands: result types only)

Required operands come first, optional operands follow as `keyword %value`, then properties
as `keyword value`; the attribute dictionary holds discardable attributes (the machine view).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from enum import Enum
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    I64,
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    OptOperandDef,
    VarOperandDef,
    VarResultDef,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from unityc.dialects.forms import Form, FormError
from unityc.dialects.literals import parse_optional_splat


class Kind(Enum):
    """How a property is stored, printed and handed to inference as a Python value."""

    INT = "int"
    INTS = "ints"
    FLOAT = "float"
    STR = "str"
    FLAG = "flag"
    TYPE = "type"
    ATTR = "attr"
    DENSE = "dense"
    """A dense literal (`pcg.constant`'s value): printed `zlib<"..."> : tensor<...>` (its bytes
    compressed, `runtime/packing.py`) when that is shorter than MLIR's hex form."""


_CONSTRAINT: dict[Kind, Any] = {
    Kind.INT: IntegerAttr[I64],
    Kind.INTS: DenseArrayBase,
    Kind.FLOAT: FloatAttr,
    Kind.STR: StringAttr,
    Kind.FLAG: UnitAttr,
    Kind.TYPE: Attribute,
    Kind.ATTR: Attribute,
    Kind.DENSE: Attribute,  # verify_source names a value that is not a dense literal
}

PACK_BYTES = 1024
"""Dense literals of more bytes than this print packed (`Kind.DENSE`) unless they are splats."""


def to_attr(kind: Kind, value: Any) -> Attribute:
    match kind:
        case Kind.INT:
            return IntegerAttr(int(value), i64)
        case Kind.INTS:
            return DenseArrayBase.from_list(i64, [int(v) for v in value])
        case Kind.FLOAT:
            return FloatAttr(float(value), f64)
        case Kind.STR:
            return StringAttr(value)
        case Kind.FLAG:
            return UnitAttr()
    return value


def from_attr(kind: Kind, attr: Attribute) -> Any:
    match kind:
        case Kind.INT:
            assert isinstance(attr, IntegerAttr)
            return attr.value.data
        case Kind.INTS:
            assert isinstance(attr, DenseArrayBase)
            return tuple(int(v) for v in attr.get_values())
        case Kind.FLOAT:
            assert isinstance(attr, FloatAttr)
            return float(attr.value.data)
        case Kind.STR:
            assert isinstance(attr, StringAttr)
            return attr.data
        case Kind.FLAG:
            return True
    return attr


def op_definition(cls: type[UnitycOp]) -> type[UnitycOp]:
    """`irdl_op_definition` that first turns the class's PROPS table into property fields
    (and marks upper-case class constants as ClassVar, which IRDL requires)."""
    annotations = dict(inspect.get_annotations(cls))
    for name in cls.__dict__:
        if name.isupper() and name not in annotations:
            annotations[name] = ClassVar[Any]
    cls.__annotations__ = annotations
    for name, kind, optional in cls.PROPS:
        define = opt_prop_def if optional or kind is Kind.FLAG else prop_def
        setattr(cls, name, define(_CONSTRAINT[kind]))
    return irdl_op_definition(cls)


class UnitycOp(IRDLOperation):
    """Base of every pcg and parallel op: see the module docstring for the syntax."""

    PROPS: ClassVar[tuple[tuple[str, Kind, bool], ...]] = ()
    """(name, kind, optional) of each property, in printing order."""

    # --- inference -------------------------------------------------------------------------

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        """The parallel form and result types for operand types (None: optional, absent)."""
        raise NotImplementedError(f"{cls.name} has no inference")  # every concrete op overrides

    def attrs(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, kind, _ in self.PROPS:
            attr = self.properties.get(name)
            values[name] = ((kind is Kind.FLAG and False) or None) if attr is None else from_attr(kind, attr)
        return values

    def flat_operands(self) -> list[SSAValue | None]:
        """The operands in definition order, variadic ones spread, None for an absent optional."""
        flat: list[SSAValue | None] = []
        for (_, definition), value in zip(
            self.get_irdl_definition().operands, self._operand_groups(), strict=True
        ):
            if isinstance(definition, OptOperandDef):
                flat.append(value[0] if value else None)
            else:
                flat.extend(value)
        return flat

    def typed_operands(self) -> list[Any]:
        """The operands' types as `infer` takes them (None for an absent optional operand)."""
        return [None if v is None else v.type for v in self.flat_operands()]

    def _operand_groups(self) -> list[Sequence[SSAValue]]:
        groups: list[Sequence[SSAValue]] = []
        for name, _ in self.get_irdl_definition().operands:
            value = getattr(self, name)
            groups.append(
                tuple(value) if isinstance(value, Sequence) else (value,) if value is not None else ()
            )
        return groups

    def parallel_form(self) -> Form:
        return self.infer(self.typed_operands(), self.attrs())[0]

    @classmethod
    def build_inferred(cls, operands: Sequence[SSAValue | Sequence[SSAValue] | None], **attrs: Any):
        """Build the op, computing its result types from operand types and properties."""
        groups = [() if o is None else (o,) if isinstance(o, SSAValue) else tuple(o) for o in operands]
        groups += [()] * (len(cls.get_irdl_definition().operands) - len(groups))  # trailing optionals
        types: list[Any] = []
        for (_, definition), group in zip(cls.get_irdl_definition().operands, groups, strict=True):
            if isinstance(definition, OptOperandDef):
                types.append(group[0].type if group else None)
            else:
                types.extend(v.type for v in group)
        full = {name: attrs.get(name) for name, _, _ in cls.PROPS}
        _, result_types = cls.infer(types, full)
        props = {
            name: to_attr(kind, full[name])
            for name, kind, _ in cls.PROPS
            if full[name] is not None and full[name] is not False
        }
        result_defs = cls.get_irdl_definition().results
        grouped: list[Any] = list(result_types)
        if len(result_defs) == 1 and isinstance(result_defs[0][1], VarResultDef):
            grouped = [grouped]
        return cls.build(operands=list(groups), result_types=grouped, properties=props)

    # --- verification ----------------------------------------------------------------------

    def verify_(self) -> None:
        try:
            _, expected = self.infer(self.typed_operands(), self.attrs())
        except FormError as e:
            raise VerifyException(str(e)) from None
        results = list(self.results)
        if len(expected) != len(results):
            raise VerifyException(f"expected {len(expected)} results, got {len(results)}")
        for i, (got, want) in enumerate(zip((r.type for r in results), expected, strict=True)):
            if got != want:
                raise VerifyException(f"result {i} has type {got}, but its operands give {want}")
        self.verify_extra()

    def verify_extra(self) -> None:
        """Checks beyond inference (machine views); overridden in the pcg base."""

    # --- syntax ----------------------------------------------------------------------------

    @classmethod
    def parse(cls, parser: Parser) -> UnitycOp:
        definitions = cls.get_irdl_definition().operands
        start = parser.pos
        positional = (
            parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
            if _at_operand(parser)
            else []
        )
        optional: dict[str, Any] = {}
        props: dict[str, Attribute] = {}
        optional_names = {n for n, d in definitions if isinstance(d, OptOperandDef)}
        kinds = {n: k for n, k, _ in cls.PROPS}
        while (keyword := parser.parse_optional_keyword_in([*optional_names, *kinds])) is not None:
            if keyword in optional_names:
                optional[keyword] = parser.parse_unresolved_operand()
            else:
                props[keyword] = _parse_value(parser, kinds[keyword])
        attributes = parser.parse_optional_attr_dict()
        colon = parser.pos
        parser.parse_punctuation(":")
        first = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        if parser.parse_optional_punctuation("->") is None:
            operand_types, result_types = [], first
        else:
            operand_types = first
            result_types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        unresolved = list(positional) + [optional[n] for n, _ in definitions if n in optional]
        if len(unresolved) != len(operand_types):
            msg = f"{cls.name} has {len(unresolved)} operands but {len(operand_types)} operand types"
            parser.raise_error(msg, start, colon)
        values = [parser.resolve_operand(u, t) for u, t in zip(unresolved, operand_types, strict=True)]
        groups = _group_operands(definitions, values[: len(positional)], values[len(positional) :], optional)
        if groups is None:
            parser.raise_error(f"wrong number of operands for {cls.name}", start, colon)
        result_defs = cls.get_irdl_definition().results
        grouped: list[Any] = list(result_types)
        if len(result_defs) == 1 and isinstance(result_defs[0][1], VarResultDef):
            grouped = [result_types]
        try:
            return cls.build(operands=groups, result_types=grouped, properties=props, attributes=attributes)
        except ValueError as e:  # a result count the op does not have
            parser.raise_error(f"{cls.name}: {e}", start, colon)

    def print(self, printer: Printer) -> None:
        definitions = self.get_irdl_definition().operands
        groups = self._operand_groups()
        positional = [
            v
            for (_, d), g in zip(definitions, groups, strict=True)
            if not isinstance(d, OptOperandDef)
            for v in g
        ]
        if positional:
            printer.print_string(" ")
            printer.print_list(positional, printer.print_operand)
        for (name, d), g in zip(definitions, groups, strict=True):
            if isinstance(d, OptOperandDef) and g:
                printer.print_string(f" {name} ")
                printer.print_operand(g[0])
        for name, kind, _ in self.PROPS:
            if (attr := self.properties.get(name)) is not None:
                printer.print_string(f" {name}")
                _print_value(printer, kind, attr)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        operands = [v for g in groups for v in g]
        if operands:
            printer.print_list([o.type for o in operands], printer.print_attribute)
            printer.print_string(" -> ")
        printer.print_list([r.type for r in self.results], printer.print_attribute)


def _at_operand(parser: Parser) -> bool:
    from xdsl.utils.mlir_lexer import MLIRTokenKind

    return parser._current_token.kind == MLIRTokenKind.PERCENT_IDENT


def _group_operands(definitions, positional, optional_values, optional) -> list[list[SSAValue]] | None:
    fixed = [d for _, d in definitions if not isinstance(d, VarOperandDef)]
    variadic = [
        d for _, d in definitions if isinstance(d, VarOperandDef) and not isinstance(d, OptOperandDef)
    ]
    spare = len(positional) - len(fixed)
    if spare < 0 or (spare and not variadic):
        return None
    groups: list[list[SSAValue]] = []
    pos = iter(positional)
    opt = iter(optional_values)
    for name, d in definitions:
        if isinstance(d, OptOperandDef):
            groups.append([next(opt)] if name in optional else [])
        elif isinstance(d, VarOperandDef):
            groups.append([next(pos) for _ in range(spare)])
        else:
            groups.append([next(pos)])
    return groups


def float_text(value: float) -> str:
    """Shortest round-tripping text that the MLIR lexer reads as a float (`1.0e-05`)."""
    text = repr(float(value))
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + ("e" + exponent if exponent else "")


def _parse_i64(parser: Parser) -> int:
    start = parser.pos
    value = parser.parse_integer()
    if not -(1 << 63) <= value < 1 << 63:
        parser.raise_error(f"{value} does not fit in a 64-bit integer", start, parser.pos)
    return value


def _parse_value(parser: Parser, kind: Kind) -> Attribute:
    match kind:
        case Kind.INT:
            return to_attr(kind, _parse_i64(parser))
        case Kind.INTS:
            return to_attr(
                kind, parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: _parse_i64(parser))
            )
        case Kind.FLOAT:
            return to_attr(kind, parser.parse_number())
        case Kind.STR:
            return to_attr(kind, _parse_text(parser))
        case Kind.FLAG:
            return UnitAttr()
        case Kind.TYPE:
            return parser.parse_type()
        case Kind.DENSE if parser.parse_optional_keyword("zlib") is not None:
            return _parse_packed(parser)
        case Kind.DENSE if (splat := parse_optional_splat(parser)) is not None:
            return splat
    return parser.parse_attribute()


def _parse_packed(parser: Parser) -> DenseIntOrFPElementsAttr:
    """`zlib<"BASE64"> : tensor<...>` (after `zlib`): the literal whose bytes the text packs."""
    from unityc.runtime.packing import unpack

    start = parser.pos
    parser.parse_punctuation("<")
    text = parser.parse_str_literal()
    parser.parse_punctuation(">")
    parser.parse_punctuation(":")
    t = parser.parse_type()
    if not isinstance(t, TensorType) or not t.has_static_shape():
        msg = f"a packed literal needs a tensor type of static shape, got {t}"
        parser.raise_error(msg, start, parser.pos)
    size = getattr(t.get_element_type(), "compile_time_size", None)
    if not isinstance(size, int):
        parser.raise_error(f"a packed literal cannot hold {t.get_element_type()} elements", start, parser.pos)
    count = 1
    for d in t.get_shape():
        count *= d
    from unityc.dialects.source import MAX_LITERAL_ELEMENTS

    if count > MAX_LITERAL_ELEMENTS:
        msg = f"a dense literal of {count} elements is too large (at most {MAX_LITERAL_ELEMENTS})"
        parser.raise_error(msg, start, parser.pos)
    try:
        raw = unpack(text, count * size)
    except ValueError as e:
        parser.raise_error(f"packed literal of {t}: {e}", start, parser.pos)
    return DenseIntOrFPElementsAttr(t, BytesAttr(raw))


def packed_text(attr: Attribute) -> str | None:
    """`attr` packed (`Kind.DENSE`), or None where the hex or splat form is as short."""
    if not isinstance(attr, DenseIntOrFPElementsAttr):
        return None
    raw = attr.data.data
    step = attr.get_element_type().compile_time_size  # type: ignore[union-attr]
    if len(raw) <= PACK_BYTES or raw == raw[:step] * (len(raw) // step):
        return None
    from unityc.runtime.packing import pack

    text = pack(raw)
    return text if len(text) < 2 * len(raw) else None


def _print_value(printer: Printer, kind: Kind, attr: Attribute) -> None:
    match kind:
        case Kind.FLAG:
            return
        case Kind.INTS:
            printer.print_string(" [" + ", ".join(str(v) for v in from_attr(kind, attr)) + "]")
        case Kind.INT:
            printer.print_string(f" {from_attr(kind, attr)}")
        case Kind.FLOAT:
            printer.print_string(" " + float_text(from_attr(kind, attr)))
        case Kind.STR:
            printer.print_string(" ")
            printer.print_string_literal(from_attr(kind, attr))
        case Kind.DENSE if (text := packed_text(attr)) is not None:
            printer.print_string(f' zlib<"{text}"> : ')
            printer.print_attribute(attr.get_type())  # type: ignore[attr-defined]
        case _:
            printer.print_string(" ")
            printer.print_attribute(attr)


def _parse_text(parser: Parser) -> str:
    """A string literal. xDSL prints non-ASCII characters as escaped UTF-8 bytes (`é` as
    `\\C3\\A9`) and lexes such a literal as bytes: UTF-8 bytes read back as the text."""
    text = parser.parse_optional_str_literal()
    if text is not None:
        return text
    start = parser.pos
    data = parser.parse_optional_bytes_literal()
    if data is None:
        parser.raise_error("string literal expected")
    try:
        return data.decode()
    except UnicodeDecodeError:
        parser.raise_error("expected a string literal of UTF-8 text", start, parser.pos)


__all__ = ["Kind", "UnitycOp", "op_definition"]
