"""Located diagnostics: `file:line:col: error: reason`, with the source line underneath.

xDSL's parser keeps no op locations, so the parser entry (`unityc.dialects.source`) records where
each op starts; any later stage (verifier, graph checks, codegen) locates an error at an op
with `located(op, message)`.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from xdsl.ir import Operation
from xdsl.utils.exceptions import DiagnosticException
from xdsl.utils.lexer import Span


class LocatedError(DiagnosticException):
    """A diagnostic that already carries `file:line:col: error: ...` and the source line."""


class LocatedParseError(LocatedError):
    """A LocatedError for input that does not parse (what `--parsing-diagnostics` reports)."""


_SPANS: WeakKeyDictionary[Operation, Span] = WeakKeyDictionary()


def record_spans(spans: dict[Operation, Span]) -> None:
    _SPANS.update(spans)


def op_span(op: Operation) -> Span | None:
    """Where the parser read `op`, if it was read from a file."""
    return _SPANS.get(op)


def format_diagnostic(span: Span, message: str) -> str:
    context = span.print_with_context().splitlines()[1:]
    return "\n".join([f"{span.get_location()}: error: {message}", *context])


def located(op: Operation | None, message: str) -> LocatedError:
    """An error at `op` (`file:line:col` when the op was parsed, else `error: message`)."""
    span = op_span(op) if op is not None else None
    if span is None:
        return LocatedError(f"error: {message}")
    return LocatedError(format_diagnostic(span, message))


def where(op: Operation) -> str:
    """`line L` of the op, for messages that name a second place."""
    span = op_span(op)
    return f"line {span.get_location().line}" if span is not None else "another op"
