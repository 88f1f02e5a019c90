"""Reading MLIR with located diagnostics.

xDSL's parser does not keep op locations and its verifier reports none, so we record where
each op starts while parsing and verify op by op, turning a failure into
`file:line:col: error: reason` with the source line underneath. We also check that every
operand is defined before its use (xDSL does not check dominance).
"""

from __future__ import annotations

import dataclasses
from weakref import WeakKeyDictionary

from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Span


class LocatedError(DiagnosticException):
    """A diagnostic that already carries `file:line:col: error: ...` and the source line."""


class LocatedParseError(LocatedError):
    """A LocatedError for input that does not parse (what `--parsing-diagnostics` reports)."""


_SPANS: WeakKeyDictionary[Operation, Span] = WeakKeyDictionary()


def op_span(op: Operation) -> Span | None:
    """Where `parse_source` read `op`, so that later stages (codegen) can locate diagnostics."""
    return _SPANS.get(op)


def format_diagnostic(span: Span, message: str) -> str:
    context = span.print_with_context().splitlines()[1:]
    return "\n".join([f"{span.get_location()}: error: {message}", *context])


def format_parse_error(e: ParseError) -> str:
    return format_diagnostic(e.span, e.msg)


class LocatedParser(Parser):
    """A Parser that remembers the span of each op's first token."""

    def __init__(self, ctx: Context, text: str | bytes, name: str, line_offset: int = 0):
        super().__init__(ctx, text, name)
        self.op_spans: dict[Operation, Span] = {}
        self.line_offset = line_offset

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        op = super().parse_operation()
        self.op_spans[op] = dataclasses.replace(start, line_offset=self.line_offset)
        return op


def verify_located(module: ModuleOp, spans: dict[Operation, Span]) -> None:
    """Verifies op by op and raises LocatedError at the first failure."""
    for op in module.walk():
        try:
            _check_defined_before_use(op)
            op.verify_()
        except VerifyException as e:
            span = spans.get(op)
            if span is None:
                raise LocatedError(f"error: {op.name}: {e}") from None
            message = str(e) if str(e).startswith(op.name) else f"{op.name}: {e}"
            raise LocatedError(format_diagnostic(span, message)) from None
    try:  # structural checks (terminators, successors) that verify_ does not make
        module.verify()
    except VerifyException as e:
        raise LocatedError(f"error: {str(e).splitlines()[-1]}") from None


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
    parser = LocatedParser(ctx, text, name, line_offset)
    try:
        module = parser.parse_module()
    except ParseError as e:
        e.span = dataclasses.replace(e.span, line_offset=line_offset)
        raise LocatedParseError(format_parse_error(e)) from None
    except VerifyException as e:  # a type or attribute that failed its own check while parsing
        raise LocatedError(f"{name}: error: {e}") from None
    _SPANS.update(parser.op_spans)
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
