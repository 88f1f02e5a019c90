"""What `unityc-opt` gets from the search: its passes, the `--unity-search` flag and options,
and the `dot` target.

`--unity-search` is shorthand for the pass `unity-search{...}` run before any `-p` passes:

    unityc-opt model.mlir --unity-search --machine summit:8 --budget 32 --report plan.json -o plan.mlir
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from xdsl.passes import ModulePass
from xdsl.utils.target import Target

from unityc.dialects.source import output_problem

SEARCH_FLAGS = (
    (
        "machine",
        str,
        "machine preset (summit:N, dgx-a100:N, dgx-h100:N, cpu:P) or .toml spec (default cpu:1)",
    ),
    ("alpha", float, "prune candidates costlier than alpha x the best (default 1.05)"),
    ("budget", int, "expansions per segment search, 0 for unlimited (default 12)"),
    ("split-size", int, "ops per segment when splitting the graph (default 12)"),
    ("time-limit", float, "seconds for the whole search (default 600)"),
    ("cost", str, "cost model: roofline or profile (default roofline)"),
    ("profile", str, "op profile cache for --cost profile"),
    ("optimizer", str, "sgd or adam (default sgd)"),
    ("memory-budget", float, "GiB per device: overrides the machine's device memory (default: its own)"),
    ("memory-check", str, "on: never return a plan that does not fit device memory; off: ignore memory"),
    ("rules", str, "a .rules file or directory of them (default: the shipped library)"),
    ("degrees", str, "comma-separated parallel degrees to try (default: from the machine)"),
    ("baselines", str, "baselines to compare in the report (default data-parallel,megatron; none)"),
    ("report", str, "also write the plan report as JSON to this file"),
    ("pipelines", str, "on: pipelined plans compete (partition DP, schedules, micro-batches); off: not"),
)


def search_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    def unity_search() -> type[ModulePass]:
        from unityc.passes.unity_search import UnitySearchPass

        return UnitySearchPass

    def baseline(name: str) -> Callable[[], type[ModulePass]]:
        def factory() -> type[ModulePass]:
            from unityc.passes.baselines import BASELINE_PASSES

            return next(p for p in BASELINE_PASSES if p.name == name)

        return factory

    def gpipe() -> type[ModulePass]:
        from unityc.passes.gpipe import GpipePass

        return GpipePass

    def pipelines(name: str) -> Callable[[], type[ModulePass]]:
        def factory() -> type[ModulePass]:
            from unityc.passes.pipelines import HeteroGpipePass, PipedreamPass

            return PipedreamPass if name == "pipedream" else HeteroGpipePass

        return factory

    passes = {"unity-search": unity_search, "gpipe": gpipe}
    passes["pipedream"] = pipelines("pipedream")
    passes["hetero-gpipe"] = pipelines("hetero-gpipe")
    for name in (
        "data-parallel",
        "megatron",
        "megatron-lm",
        "sequential",
        "exhaustive",
        "zero",
        "galvatron",
        "spatial",
    ):
        passes[name] = baseline(name)
    return passes


def search_targets() -> dict[str, Callable[[], type[Target]]]:
    def dot() -> type[Target]:
        from unityc.search.dot import DotTarget

        return DotTarget

    return {"dot": dot}


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
        if flag in ("memory-check", "pipelines"):
            if value not in ("on", "off"):
                raise ValueError(f"--{flag}: expected on or off, got '{value}'")
            value = value == "on"
        if flag == "report" and (problem := output_problem(value)):
            raise ValueError(f"--report {value}: {problem}")
        options.append((flag.replace("-", "_"), value))
    from unityc.passes.unity_search import spec

    args.passes = spec(options) + ("," + args.passes if args.passes else "")
