"""Reading MLIR with located diagnostics.

xDSL's parser does not keep op locations and its verifier reports none, so we record where
each op starts while parsing and verify op by op, turning a failure into
`file:line:col: error: reason` with the source line underneath. We also check that every
operand is defined before its use (xDSL does not check dominance) and that inputs and weights
of one key agree.

Before parsing, input that would make the parser misbehave is refused, located: bytes that are
not UTF-8, numbers of more than MAX_DIGITS digits, brackets nested deeper than MAX_NESTING,
dense literals of more than MAX_LITERAL_ELEMENTS elements (checked before they are expanded).
Our parser's lexer reads string literals with a linear regex (xDSL 0.74's backtracks
exponentially on a string that is never closed).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import cast

from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.parser import Parser
from xdsl.traits import IsTerminator, NoTerminator
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Input, Span

from unityc.dialects.container import check_sources
from unityc.dialects.diagnostics import (
    LocatedError,
    LocatedParseError,
    format_diagnostic,
    op_span,
    record_spans,
)
from unityc.dialects.pipeline import check_pipeline
from unityc.dialects.precision import check_precision

__all__ = [
    "LocatedError",
    "LocatedParseError",
    "format_diagnostic",
    "format_parse_error",
    "make_context",
    "op_span",
    "parse_source",
    "read_module",
]

INTERNAL = "internal error while reading this op (please report it)"

MAX_NESTING = 48
"""Brackets (`( [ { <`) open at once: beyond this, input is refused before parsing (the
parser and printer recurse per level)."""

MAX_DIGITS = 100
"""Digits in one number literal (an i64 has 19; a printed f64 at most 17 plus its exponent)."""

MAX_LITERAL_ELEMENTS = 1 << 26
"""Elements of a dense literal (`pcg.constant`): 64 Mi, checked before it is materialized."""

# A string literal as xDSL 0.74 lexes it, without its nested repetition (`(?:[^"...]+|...)*`
# backtracks exponentially on a string that is never closed): linear, same language.
_STRING_LITERAL = re.compile(r'"(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')

# What the pre-scan steps over: comments, strings (to the end of the line if unclosed), names,
# hex and decimal digit runs, arrows, brackets, anything else one character at a time.
_SCAN = re.compile(
    r'//[^\n]*|"(?:[^"\\\n]|\\.)*+"?|[A-Za-z_%@#!^$][\w.$-]*|0[xX][0-9A-Fa-f]+|\d+|->|[\[\](){}<>]|[^\S\n]+|.',
    re.DOTALL,
)
_OPEN, _CLOSE = "[({<", "])}>"


def format_parse_error(e: ParseError) -> str:
    return format_diagnostic(cast(Span[str], e.span), e.msg)


def _error_at(text: str, name: str, line_offset: int, start: int, end: int, msg: str) -> LocatedParseError:
    span = Span(start, max(end, start + 1), Input(text, name), line_offset)
    return LocatedParseError(format_diagnostic(span, msg))


def decode(data: str | bytes, name: str, line_offset: int = 0) -> str:
    """The text of `data`; a located error at the first byte that is not UTF-8."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        good = data[: e.start].decode("utf-8")
        text = good + data[e.start :].decode("utf-8", errors="replace")
        raise _error_at(text, name, line_offset, len(good), len(good) + 1, "the input is not UTF-8") from None


def prescan(text: str, name: str, line_offset: int = 0) -> None:
    """Refuses, located, what would make the parser recurse or compute without bound: numbers
    of more than MAX_DIGITS digits and brackets nested deeper than MAX_NESTING."""
    depth = 0
    for m in _SCAN.finditer(text):
        token = m.group()
        if token[0].isdigit() and len(token) > MAX_DIGITS:
            msg = f"a number of {len(token)} digits is too long (at most {MAX_DIGITS})"
            raise _error_at(text, name, line_offset, m.start(), m.start() + 20, msg)
        if token in _CLOSE:
            depth = max(depth - 1, 0)
        elif token in _OPEN:
            depth += 1
            if depth > MAX_NESTING:
                msg = f"brackets nested more than {MAX_NESTING} deep"
                raise _error_at(text, name, line_offset, m.start(), m.end(), msg)


class LocatedParser(Parser):
    """A Parser that remembers the span of each op's first token."""

    def __init__(self, ctx: Context, text: str, name: str, line_offset: int = 0):
        super().__init__(ctx, text, name)
        self.lexer._unescaped_characters_regex = _STRING_LITERAL  # type: ignore[attr-defined]  # this lexer only
        self.op_spans: dict[Operation, Span] = {}
        self.line_offset = line_offset
        self.failed_in: Span | None = None  # the innermost op whose parsing raised

    def parse_operation(self) -> Operation:
        start = dataclasses.replace(self._current_token.span, line_offset=self.line_offset)
        try:
            op = super().parse_operation()
        except Exception:
            self.failed_in = self.failed_in or start
            raise
        self.op_spans[op] = start
        return op

    def _parse_dense_literal_type(self):  # type: ignore[override]  # xDSL's private hook
        start = self.pos
        t = super()._parse_dense_literal_type()
        count = math.prod(t.get_shape())
        if count > MAX_LITERAL_ELEMENTS:
            self.raise_error(
                f"a dense literal of {count} elements is too large (at most {MAX_LITERAL_ELEMENTS})",
                start,
                self.pos,
            )
        return t


def verify_located(module: ModuleOp, spans: dict[Operation, Span]) -> None:
    """Verifies op by op and raises LocatedError at the first failure."""
    for op in module.walk():
        try:
            _check_defined_before_use(op)
            _check_terminators(op)
            op.verify_()
        except VerifyException as e:
            message = str(e) if str(e).startswith(op.name) else f"{op.name}: {e}"
            span = spans.get(op)
            if span is None:
                raise LocatedError(f"error: {message}") from None
            raise LocatedError(format_diagnostic(span, message)) from None
    for op in module.walk():
        if isinstance(op, func.FuncOp) and not op.is_declaration:
            for block in op.body.blocks:
                check_sources(block)
            check_pipeline(op)
            check_precision(op)
    try:  # the remaining structural checks (successors, parent pointers), a safety net
        module.verify()
    except VerifyException as e:
        raise LocatedError(f"error: {str(e).splitlines()[-1]}") from None


def _check_terminators(op: Operation) -> None:
    """xDSL's structural checks of blocks and terminators, made op by op so they can be located."""
    for body in op.regions:
        if len(body.blocks) == 1 and not body.block.ops and not op.has_trait(NoTerminator):
            raise VerifyException("its body is empty: it needs at least a terminator (func.return)")
    block = op.parent_block()
    region = block.parent if block is not None else None
    parent = region.parent if region is not None else None
    if block is None or parent is None or block.last_op is not op or op.has_trait(IsTerminator):
        return
    if len(region.blocks) > 1 or not parent.has_trait(NoTerminator):  # type: ignore[union-attr]
        raise VerifyException(f"it ends the body of {parent.name} but is not a terminator (func.return)")


def _check_defined_before_use(op: Operation) -> None:
    block = op.parent_block()
    if block is None:
        return
    for i, operand in enumerate(op.operands):
        owner = operand.owner
        if (
            isinstance(owner, Operation)
            and owner.parent_block() is block
            and not owner.is_before_in_block(op)
        ):
            raise VerifyException(f"operand {i} ({_name(operand)}) is used before it is defined")


def _name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else "a value"


def make_context() -> Context:
    from unityc.dialects.parallel import PARALLEL
    from unityc.dialects.pcg import PCG

    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, PCG, PARALLEL):
        ctx.load_dialect(dialect)
    return ctx


def parse_source(
    ctx: Context, text: str | bytes, name: str, line_offset: int = 0, verify: bool = True
) -> ModuleOp:
    """Parses and verifies; raises LocatedError (parse or verify) with a located message."""
    text = decode(text, name, line_offset)
    prescan(text, name, line_offset)
    parser = LocatedParser(ctx, text, name, line_offset)
    try:
        module = parser.parse_module()
    except ParseError as e:
        e.span = dataclasses.replace(e.span, line_offset=line_offset)
        if e.msg == "End of file reached before closing string literal.":  # xDSL's words, wrong here
            e.msg = "this string is not closed on its line"
        raise LocatedParseError(format_parse_error(e)) from None
    except VerifyException as e:  # a type or attribute that failed its own check while parsing
        span = parser.failed_in or parser._current_token.span
        raise LocatedParseError(format_diagnostic(span, str(e))) from None
    except (ValueError, ArithmeticError, RecursionError, MemoryError) as e:
        # A safety net: each cause found (by the fuzzer) is fixed where it arises; this one still
        # names the place, and says it is ours (the fuzzer counts these as "internal").
        span = parser.failed_in or parser._current_token.span
        msg = f"{INTERNAL}: {type(e).__name__}: {e}"
        raise LocatedParseError(format_diagnostic(span, msg)) from None
    if module not in parser.op_spans:  # an implicit module: locate module-level errors at 1:1
        parser.op_spans[module] = Span(0, 1, Input(text, name), line_offset)
    record_spans(parser.op_spans)
    if verify:
        verify_located(module, parser.op_spans)
    return module


def read_module(path: str, ctx: Context | None = None) -> ModuleOp:
    """Reads and verifies an MLIR file, for tools other than unityc-opt."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise LocatedError(f"error: cannot read {path}: {e.strerror}") from None
    return parse_source(ctx or make_context(), text, path)


def output_problem(path: str) -> str | None:
    """Why `path` cannot be written (checked before a run that may take minutes), or None."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path):
        return "is a directory"
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return "cannot be written (permission denied)"
    return None
