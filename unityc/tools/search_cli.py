"""What `unityc-opt` gets from the search: its passes, the `--unity-search` flag and options,
and the `dot` target.

`--unity-search` is shorthand for the pass `unity-search{...}` run before any `-p` passes:

    unityc-opt model.mlir --unity-search --machine summit:8 --budget 32 --report plan.json -o plan.mlir
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from xdsl.passes import ModulePass
from xdsl.utils.target import Target

from unityc.dialects.source import output_problem
from unityc.passes.baselines import BASELINE_PASSES
from unityc.passes.lazy import lazy
from unityc.passes.options import UnitySearchOptions, help_of, option_fields

FLAG_TYPES: dict[str, type] = {"bool": str, "int": int, "str": str, "float": float, "float | None": float}
"""argparse's type for a field's annotation (a bool option is `on` or `off`)."""

SEARCH_FLAGS = tuple(
    (f.name.replace("_", "-"), FLAG_TYPES[str(f.type)], help_of(f))
    for f in option_fields(UnitySearchOptions)
    if f.metadata.get("flag", True)
)
"""`--unity-search`'s flags: one per field of `UnitySearchOptions`, its help the field's."""
ON_OFF = {f.name.replace("_", "-") for f in option_fields(UnitySearchOptions) if f.type == "bool"}
"""The flags of bool options, given as `on` or `off`."""


def _same(pass_type: type[ModulePass]) -> type[ModulePass]:
    return pass_type


# The passes and the target are loaded when first used (`passes.lazy`): the search's modules
# load the cost model and the rewrite library. The baselines' passes are light classes whose
# `apply` imports the search.
_unity_search = lazy("unityc.passes.unity_search", "UnitySearchPass")
_gpipe = lazy("unityc.passes.gpipe", "GpipePass")
_pipedream = lazy("unityc.passes.pipelines", "PipedreamPass")
_hetero_gpipe = lazy("unityc.passes.pipelines", "HeteroGpipePass")
_dot = lazy("unityc.search.dot", "DotTarget")


def search_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    passes: dict[str, Callable[[], type[ModulePass]]] = {
        "unity-search": _unity_search,
        "gpipe": _gpipe,
        "pipedream": _pipedream,
        "hetero-gpipe": _hetero_gpipe,
    }
    for baseline in BASELINE_PASSES:
        passes[baseline.name] = functools.partial(_same, baseline)
    return passes


def search_targets() -> dict[str, Callable[[], type[Target]]]:
    return {"dot": _dot}


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("unity search", "options of --unity-search")
    group.add_argument(
        "--unity-search",
        action="store_true",
        default=False,
        help="search for a parallel plan (see --machine)",
    )
    for flag, kind, text in SEARCH_FLAGS:
        group.add_argument(f"--{flag}", type=kind, default=None, help=text)


def search_pipeline(args: argparse.Namespace) -> None:
    """Prepends `unity-search{...}` to `args.passes` when `--unity-search` is given; refuses its
    options without it."""
    given = [(flag, getattr(args, flag.replace("-", "_"))) for flag, _, _ in SEARCH_FLAGS]
    given = [(flag, value) for flag, value in given if value is not None]
    if not args.unity_search:
        if given:
            raise ValueError(f"--{given[0][0]} needs --unity-search")
        return
    options: list[tuple[str, Any]] = []
    for flag, value in given:
        if flag in ON_OFF:
            if value not in ("on", "off"):
                raise ValueError(f"--{flag}: expected on or off, got '{value}'")
            value = value == "on"
        if flag == "report" and (problem := output_problem(value)):
            raise ValueError(f"--report {value}: {problem}")
        options.append((flag.replace("-", "_"), value))
    from unityc.passes.unity_search import spec  # the search itself: imported only when asked for

    args.passes = spec(options) + ("," + args.passes if args.passes else "")
