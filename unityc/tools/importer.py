"""unityc-import: a PyTorch model (zoo name, file.py:factory, hf:<name>) -> pcg MLIR."""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from io import StringIO
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

from unityc.dialects import pcg
from unityc.dialects.container import graph_function
from unityc.dialects.precision import precision_attrs
from unityc.dialects.source import output_problem

if TYPE_CHECKING:
    from unityc.models.spec import ModelSpec

EXAMPLES = """\
examples:
  unityc-import mlp -o mlp.mlir                      the zoo MLP, small config
  unityc-import bert --config paper --stats -o b.mlir BERT-Large at paper scale (weights never built)
  unityc-import dlrm --batch 64 bottom_mlp=[13,64,16] -o d.mlir
  unityc-import my_model.py:make -o m.mlir           make(**overrides) returns (module, example inputs)
  unityc-import hf:bert --check                      HuggingFace BERT from a config; compare outputs
  unityc-import hf:llama kv_heads=1 --check          Llama with one KV head for its 4 query heads
"""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="unityc-import",
        description="Import a PyTorch model into the pcg dialect (every degree 1). The model's forward "
        "must return its training loss first. Weights are not stored: weight ops name their state_dict "
        "key, and the model spec is recorded in the module so later stages can rebuild the model.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "model",
        nargs="?",
        help="zoo name (see --list), path/to/file.py:factory, hf:bert, hf:gpt2, hf:roberta, hf:llama, hf:vit "
        "or hf:<ConfigClass>",
    )
    parser.add_argument("settings", nargs="*", metavar="key=value", help="override config settings")
    parser.add_argument("--config", default="small", help="small (default, for tests) or paper")
    parser.add_argument("--batch", type=int, help="batch size (default: the config's; paper: per-GPU batch)")
    parser.add_argument("--seed", type=int, default=0, help="seed recorded for rebuilding the model")
    parser.add_argument("-o", "--output", help="write the MLIR here (default: stdout)")
    parser.add_argument("--stats", action="store_true", help="print op counts and parameter count (stderr)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="build the model with real weights and compare the interpreter's outputs on the imported "
        "graph with the module's (fp32, relative error <= 1e-5 plus fp32's own error against float64, "
        "element by element), and the loss and every gradient in float64",
    )
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=("fp32", "bf16-mixed"),
        help="training precision, recorded as the graph function's unityc.precision: bf16-mixed computes "
        "in bf16 under torch.autocast with fp32 master weights and fp32 gradient reductions (default fp32)",
    )
    parser.add_argument("--debug", action="store_true", help="show a traceback on internal errors")
    parser.add_argument("--list", action="store_true", help="list the zoo models and exit")
    args = parser.parse_intermixed_args(argv)
    if not args.list and not args.model:
        parser.error("the model is required (a zoo name, file.py:factory or hf:<name>)")
    if args.batch is not None and args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    if args.output:  # checked before the import, which can take minutes
        problem = output_problem(args.output)
        if problem:
            parser.error(f"-o {args.output}: {problem}")
    return args


def list_zoo() -> None:
    from unityc.models import zoo

    for name, model in zoo().items():
        print(f"{name:14} {model.summary}")


def stats(module: ModuleOp, seconds: float) -> str:
    counts = Counter(op.name for op in module.walk() if op.name.startswith("pcg."))
    params = sum(math.prod(op.result.type.shape) for op in module.walk() if isinstance(op, pcg.WeightOp))
    sources = counts["pcg.weight"] + counts["pcg.input"] + counts["pcg.constant"]
    lines = [f"ops: {sum(counts.values()) - sources} (plus {sources} inputs, weights, constants)"]
    lines += [f"  {name:22} {n}" for name, n in counts.most_common()]
    lines.append(f"parameters: {params:,}")
    lines.append(f"import time: {seconds:.1f} s")
    return "\n".join(lines)


def show_warning(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
    """A warning (e.g. the model's mode changed) as one line, when it happens."""
    print(f"unityc-import: warning: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        list_zoo()
        return 0
    from unityc.frontend import ImportFailure, ModelError, import_model
    from unityc.models.huggingface import SmallDefaultsWarning
    from unityc.models.spec import ModelSpec, TrainingModeWarning, parse_overrides

    start = time.perf_counter()
    try:
        spec = ModelSpec(args.model, args.config, args.batch, parse_overrides(args.settings), args.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("always", TrainingModeWarning)
            warnings.simplefilter("always", SmallDefaultsWarning)
            warnings.showwarning = show_warning
            module = run_check(spec) if args.check else import_model(spec)
    except (ModelError, ImportFailure) as e:
        print(f"unityc-import: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("unityc-import: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.debug:
            raise
        print(
            f"unityc-import: internal error: {type(e).__name__}: {e} (--debug shows where)", file=sys.stderr
        )
        return 2
    elapsed = time.perf_counter() - start
    record_precision(module, args.precision)
    text = StringIO()
    Printer(stream=text).print_op(module)
    text.write("\n")
    if args.output:
        with open(args.output, "w") as f:
            f.write(text.getvalue())
    elif not args.check:
        sys.stdout.write(text.getvalue())
    if args.stats:
        print(stats(module, elapsed), file=sys.stderr)
    return 0


def record_precision(module: ModuleOp, precision: str) -> None:
    """Records the training precision on the graph function (`unityc.precision`)."""
    graph_function(module).attributes.update(precision_attrs(precision))


def run_check(spec: ModelSpec) -> ModuleOp:
    from unityc.frontend.check import check_import

    module, checks = check_import(spec)
    for c in checks:
        widened = c.within and c.relative_error > 1e-5  # (frontend.check.OUTPUT_TOLERANCE)
        note = f" (within fp32's own error against float64: up to {c.tolerance:.1e})" if widened else ""
        print(f"{c.what} {list(c.shape)}: relative error {c.relative_error:.2e}{note}")
    failed = [c for c in checks if not c.ok]
    if failed:
        from unityc.frontend import ImportFailure

        named = "; ".join(
            f"{c.what}: {c.relative_error:.2e} > {c.tolerance:.0e}"
            if c.within is None
            else f"{c.what}: {c.relative_error:.2e}, beyond 1e-05 plus fp32's own error at some element"
            for c in failed
        )
        raise ImportFailure(f"the imported graph differs from the module: {named}")
    print("check: the imported graph matches the module (outputs, loss and gradients)")
    return module


if __name__ == "__main__":
    sys.exit(main())
