"""unityc-opt: xDSL's opt driver with the pcg and parallel dialects, unityc's passes and targets.

Every xDSL flag works. On top of xDSL's behaviour: input is verified op by op with
`file:line:col` diagnostics, errors exit with status 1 and no traceback, and `-o FILE` is
written only when the whole run succeeded.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
from collections.abc import Callable, Sequence
from io import StringIO
from typing import IO, Any, get_type_hints

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec, ArgSpecConvertible, parse_pipeline, parse_spec
from xdsl.utils.arg_spec import _convert_arg_to_type as convert_option
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from unityc.dialects.source import (
    LocatedError,
    LocatedParseError,
    format_parse_error,
    output_problem,
    parse_source,
)
from unityc.passes.lazy import lazy
from unityc.tools.search_cli import add_search_arguments, search_passes, search_pipeline, search_targets

# Dialects, passes and targets are loaded when first used (`passes.lazy`): a run on a small
# file (one lit RUN line) then loads no cost model, rewrite library, numpy or torch.
_pcg = lazy("unityc.dialects.pcg", "PCG")
_parallel = lazy("unityc.dialects.parallel", "PARALLEL")
_fuse_collectives = lazy("unityc.passes.fuse_collectives", "FuseCollectivesPass")
_fuse_attention = lazy("unityc.passes.fuse_attention", "FuseAttentionPass")
_fuse_norms = lazy("unityc.passes.fuse_norms", "FuseNormsPass")
_estimate = lazy("unityc.passes.estimate", "EstimatePass")
_apply_rules = lazy("unityc.passes.apply_rules", "ApplyRulesPass")
_fold_scalar_mul = lazy("unityc.passes.fold_scalar_mul", "FoldScalarMulPass")
_pad_images = lazy("unityc.passes.pad_images", "PadImagesPass")


def unityc_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    return {
        "fuse-collectives": _fuse_collectives,
        "fuse-attention": _fuse_attention,
        "fuse-norms": _fuse_norms,
        "estimate": _estimate,
        "apply-rules": _apply_rules,
        "fold-scalar-mul": _fold_scalar_mul,
        "pad-images": _pad_images,
        **search_passes(),
    }


class UnitycOptMain(xDSLOptMain):
    def __init__(self, args: Sequence[str] | None = None):
        self._chunk_offset = 0
        self._buffer: StringIO | None = None
        super().__init__(
            description="unityc optimizer driver (xDSL opt with the pcg and parallel dialects)", args=args
        )

    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        self.ctx.register_dialect("pcg", _pcg)
        self.ctx.register_dialect("parallel", _parallel)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in unityc_passes().items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        super().register_all_targets()

        def torch_target() -> type:
            # imported here: the torch target imports torch, which takes a second to load
            from unityc.codegen.target import TorchTarget

            return TorchTarget.for_source(self.get_input_name())

        self.available_targets["torch"] = torch_target
        self.available_targets.update(search_targets())

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        add_search_arguments(arg_parser)

    def setup_pipeline(self) -> None:
        search_pipeline(self.args)  # --unity-search: the search pass first
        # Options are checked here, before any input is read: xDSL checks a target's options
        # only when it writes the output, after every pass has run.
        for spec in parse_pipeline(self.args.passes):
            if spec.name in self.available_passes:
                check_options("-p", self.available_passes[spec.name](), spec)
        target = parse_spec(self.args.target)
        factory = self.available_targets[target.name]
        if not inspect.signature(factory).parameters:
            made: Any = factory()  # type: ignore[call-arg]  # xDSL types factories loosely
            check_options("-t", made, target)
        super().setup_pipeline()

    def register_all_frontends(self) -> None:
        super().register_all_frontends()

        def parse_mlir(io: IO[bytes]) -> ModuleOp:
            return parse_source(
                self.ctx, io.read(), self.get_input_name(), self._chunk_offset, not self.args.disable_verify
            )

        self.available_frontends["mlir"] = parse_mlir

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        self._chunk_offset = start_offset
        try:
            return super().parse_chunk(chunk, file_extension, start_offset)
        except LocatedParseError as e:  # our frontend locates parse errors; report them as xDSL would
            if not self.args.parsing_diagnostics:
                raise
            print(e)
            return None

    def prepare_output(self) -> IO[str]:
        # Buffer `-o` output: the file is written by `commit_output` only after a successful run,
        # but a place it cannot be written to is refused before any work.
        if not self.args.output_file:
            return sys.stdout
        if problem := output_problem(self.args.output_file):
            raise ValueError(f"-o {self.args.output_file}: {problem}")
        self._buffer = _KeepOpen()
        return self._buffer

    def commit_output(self) -> None:
        if self.args.output_file and self._buffer is not None:
            with open(self.args.output_file, "w") as f:
                f.write(self._buffer.getvalue())


_EXPECTED = {int: "an integer", float: "a number", str: 'a string in quotes ("...")', bool: "true or false"}


def check_options(flag: str, cls: type[ArgSpecConvertible], spec: ArgSpec) -> None:
    """Each option of `spec` is one `cls` has, of its type; else a ValueError naming both."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != "name"}
    hints = get_type_hints(cls)
    for name, values in spec.normalize_parameter_names().parameters.items():
        if name not in fields:
            known = ", ".join(n.replace("_", "-") for n in fields) or "none"
            raise ValueError(f"{flag} {spec.name}: unknown option '{name}' (options: {known})")
        expected = hints[name]
        try:
            convert_option(values, expected)
        except ValueError:
            given = ",".join(repr(v) if isinstance(v, str) else str(v).lower() for v in values) or "nothing"
            wanted = _EXPECTED.get(expected, str(expected))
            option = name.replace("_", "-")
            raise ValueError(f"{flag} {spec.name}: option '{option}' expects {wanted}, got {given}") from None


class _KeepOpen(StringIO):
    def close(self) -> None:  # xDSL closes the output stream when done; keep what it wrote
        pass


def main(argv: Sequence[str] | None = None) -> int:
    try:
        driver = UnitycOptMain(args=argv)
        driver.run()
        driver.commit_output()
    except LocatedError as e:
        print(str(e), file=sys.stderr)
        return 1
    except ParseError as e:
        print(format_parse_error(e), file=sys.stderr)
        return 1
    except (DiagnosticException, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ArgSpecParseError as e:  # a malformed -p/-t spec (xDSL raises a BaseException)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # outside a search (which returns its best plan so far)
        print("error: interrupted; nothing written", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
