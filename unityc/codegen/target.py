"""The xDSL target `torch`: `unityc-opt plan.mlir -t torch [-o train.py]`.

`-t 'torch{machine="cpu:4"}'` overrides the plan's `unityc.machine`. A plan codegen cannot run
is refused with one located error (`file:line:col: error: ...` at the op at fault) and no output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from unityc.codegen import CodegenError, emit_program
from unityc.dialects.diagnostics import LocatedError, format_diagnostic, op_span


@dataclass(frozen=True)
class TorchTarget(Target):
    name = "torch"
    source: ClassVar[str] = "plan.mlir"

    machine: str = ""

    @classmethod
    def for_source(cls, path: str) -> type[TorchTarget]:
        """The target for the input file `path` (named in the program and in errors)."""
        return type("TorchTarget", (cls,), {"source": path})  # type: ignore[return-value]

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        try:
            text = emit_program(module, self.machine or None, self.source)
        except CodegenError as e:
            span = op_span(e.op) if e.op is not None else None
            if span is None:
                raise LocatedError(f"{self.source}: error: {e}") from None
            raise LocatedError(format_diagnostic(span, str(e))) from None
        output.write(text)
