"""The options of unityc's passes, each field declared once and shared by every pass that takes it.

An option group is a frozen `ModulePass` dataclass whose fields are pass options (xDSL reads a
pass's options from its dataclass fields), and a pass takes a group by deriving from it:

- `PricingOptions` (machine, cost, profile, optimizer, memory_budget): every pass that prices a
  plan: estimate, unity-search, the baselines, gpipe, pipedream, hetero-gpipe;
- `SearchOptions` (+ alpha, budget, rules): unity-search and the baselines;
- `UnitySearchOptions` (+ split_size, time_limit, memory_check, degrees, baselines, report,
  progress, pipelines): unity-search.

Each field's `help` (its metadata) is the one description of the option: `--unity-search`'s
command-line flags are made from `UnitySearchOptions`'s fields (`tools/search_cli.py`). This
module declares fields only, so that the command line can read them without importing the
search (the passes do that).
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any

from xdsl.passes import ModulePass

DEFAULT_BASELINES = "data-parallel,megatron"
DEFAULT_TIME_LIMIT = 600.0
"""Seconds a search runs at most unless told otherwise (a larger `--time-limit` for more): graphs that
do not cut into a chain of segments took many minutes; now a search always answers, its report
saying when the limit was hit (the plan is then the best one completed by then)."""


def option(default: Any, help: str, flag: bool = True) -> Any:
    """A pass option: its default and the one line describing it (`flag`: also a command-line
    flag of `--unity-search`)."""
    return field(default=default, metadata={"help": help, "flag": flag})


def help_of(f: Field) -> str:
    return str(f.metadata.get("help", ""))


def option_fields(cls: type) -> list[Field]:
    """The option fields of a pass class, in declaration order (groups first)."""
    return list(fields(cls))


@dataclass(frozen=True)
class PricingOptions(ModulePass):
    """The options of a pass that prices a plan: the machine, the cost model, the optimizer, the
    profile cache, a memory budget (parsed and checked once into `cost.options.CostOptions`)."""

    machine: str = option(
        "cpu:1", "machine preset (summit:N, dgx-a100:N, dgx-h100:N, cpu:P) or .toml spec (default cpu:1)"
    )
    cost: str = option("roofline", "cost model: roofline or profile (default roofline)")
    profile: str = option("", "op profile cache for --cost profile")
    optimizer: str = option("sgd", "sgd or adam (default sgd)")
    memory_budget: float | None = option(
        None, "GiB per device: overrides the machine's device memory (default: its own)"
    )


@dataclass(frozen=True)
class SearchOptions(PricingOptions):
    """The options of a pass that searches or applies rewrite rules."""

    alpha: float = option(1.05, "prune candidates costlier than alpha x the best (default 1.05)")
    budget: int = option(12, "expansions per segment search, 0 for unlimited (default 12)")
    rules: str = option("", "a .rules file or directory of them (default: the shipped library)")


@dataclass(frozen=True)
class UnitySearchOptions(SearchOptions):
    """The options of `unity-search` (and of `--unity-search`, one flag per field)."""

    split_size: int = option(12, "ops per segment when splitting the graph (default 12)")
    time_limit: float | None = option(DEFAULT_TIME_LIMIT, "seconds for the whole search (default 600)")
    """Seconds for the whole search (None, from Python only: no limit)."""
    memory_check: bool = option(
        True, "on: never return a plan that does not fit device memory; off: ignore memory"
    )
    degrees: str = option("", "comma-separated parallel degrees to try (default: from the machine)")
    baselines: str = option(
        DEFAULT_BASELINES, "baselines to compare in the report (default data-parallel,megatron; none)"
    )
    report: str = option("", "also write the plan report as JSON to this file")
    progress: bool = option(True, "a progress bar on stderr while the search runs", flag=False)
    pipelines: bool = option(
        True, "on: pipelined plans compete (partition DP, schedules, micro-batches); off: not"
    )
