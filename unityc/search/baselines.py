"""Baselines on the same cost model as the search (Unity §6 compares against these).

* `data_parallel`: every op that can runs on its batch (dim 0) sharded over all devices, with
  its weights replicated (their gradients all-reduced); an op that cannot (batch norm keeps
  exact batch statistics) takes the first other N-way form it accepts (e.g. channels), else
  runs unsharded.
* `megatron`: Megatron-LM's layout (`strategies.megatron_layouts`), tensor parallelism within a
  node and data parallelism across nodes: column-parallel linears paired with the row-parallel
  one that contracts their sharding through the ops between them (one all-reduce per MLP and
  per attention block in forward), attention split by heads, a vocabulary-parallel embedding;
  everything else replicated in the tensor-parallel group. Every tensor-parallel degree
  dividing a node is tried; the fastest plan wins. Its note names the ops where a column split
  could not continue (those linears run replicated).
* `megatron-lm` (`megatron_lm.py`): the 3-D configuration Megatron-LM's users pick by hand:
  tensor parallel within a node, the fewest pipeline stages that fit with ZeRO-1 and selective
  recomputation, micro-batch 1, interleaving where layers allow, data parallelism over the rest.
* `sequential` (Unity's ablation, TASO then FlexFlow): the algebraic rules (those whose target
  has no parallel op) optimize the graph for one device first, then the search parallelizes the
  result with the parallelization rules only.
* `exhaustive`: every graph the rules reach (no pruning), each mapped by the DP; for small
  graphs only.
* `spatial`: Mesh-TensorFlow's spatial partitioning: every convolution (and the image ops
  around it) split over height x width on all devices, halos exchanged with neighbours, batch
  norms synchronized (`spatial_layout.spatial_graph`).

Every baseline ends with the machine-mapping DP choosing views, and is priced by `estimate`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from unityc.cost.profile import ProfileCache
from unityc.graph import Graph
from unityc.graph.simplify import fuse_collectives, simplify
from unityc.machine.spec import Machine
from unityc.rewrites.match import CompiledRule
from unityc.search.galvatron import galvatron_plan
from unityc.search.megatron_lm import megatron_lm_plan
from unityc.search.options import UnityOptions, UnityResult, default_degrees
from unityc.search.pipeline import (
    PipelineOptions,
    PipelinePlan,
    even_split_plan,
    hetero_gpipe_plan,
    pipedream_plan,
)
from unityc.search.plans import (
    PricedPlan,
    Pricing,
    data_parallel_plan,
    finish,
    megatron_plans,
    spatial_plans,
    zero_plan,
)
from unityc.search.segments import is_algebraic
from unityc.search.substitution import neighbours
from unityc.search.unity import algebraic_phase, unity_search
from unityc.search.views import strip_views


def _pricing(options: UnityOptions, profile: ProfileCache | None) -> Pricing:
    return Pricing(options.cost, options.optimizer, options.sync_weight, options.side_by_side, profile)


# --- data parallel ----------------------------------------------------------------------------


def data_parallel(
    graph: Graph, machine: Machine, options: UnityOptions | None = None, profile: ProfileCache | None = None
) -> PricedPlan:
    return data_parallel_plan(strip_views(graph), machine, _pricing(options or UnityOptions(), profile))


def zero(
    graph: Graph,
    machine: Machine,
    options: UnityOptions | None = None,
    profile: ProfileCache | None = None,
    stage: int = 3,
    recompute: bool = False,
) -> PricedPlan:
    """Data parallel with ZeRO-`stage` sharding of the weights' copies (`plans.zero_plan`)."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"zero: stage must be 0, 1, 2 or 3, got {stage}")
    pricing = _pricing(options or UnityOptions(), profile)
    return zero_plan(strip_views(graph), machine, pricing, stage, recompute)


def galvatron(
    graph: Graph, machine: Machine, options: UnityOptions | None = None, profile: ProfileCache | None = None
) -> PricedPlan:
    """Galvatron-BMW's per-layer search (`galvatron.galvatron_plan`)."""
    return galvatron_plan(strip_views(graph), machine, _pricing(options or UnityOptions(), profile))


def spatial(
    graph: Graph, machine: Machine, options: UnityOptions | None = None, profile: ProfileCache | None = None
) -> PricedPlan:
    """Every image op split over height x width on all devices (`plans.spatial_plans`)."""
    plans = spatial_plans(
        strip_views(graph), machine, _pricing(options or UnityOptions(), profile), hybrid=False
    )
    if not plans:
        raise ValueError(
            "spatial: the graph has no convolution to split over height and width (or one device)"
        )
    return plans[0]


# --- megatron ---------------------------------------------------------------------------------


def megatron(
    graph: Graph,
    machine: Machine,
    options: UnityOptions | None = None,
    profile: ProfileCache | None = None,
    sequence: Sequence[bool] = (False,),
) -> PricedPlan:
    """The fastest of the Megatron plans that fit (one per tensor-parallel degree dividing a
    node, and per `sequence` variant: without/with Megatron's sequence parallelism); if none
    fits, the one needing the least memory (as the search ranks plans)."""
    pricing = _pricing(options or UnityOptions(), profile)
    plans = megatron_plans(strip_views(graph), machine, pricing, sequence)
    fitting = [p for p in plans if p.estimate.fits]
    if not fitting:
        return min(plans, key=lambda p: p.estimate.peak_memory)
    return min(fitting, key=lambda p: p.estimate.iteration_s)


def megatron_lm(
    graph: Graph,
    machine: Machine,
    options: UnityOptions | None = None,
    profile: ProfileCache | None = None,
    tensor: int = 0,
    stages: int = 0,
    virtual: int = 0,
    sequence: bool = True,
    context: int = 0,
    expert: int = 0,
) -> PricedPlan:
    """Megatron-LM's hand-picked 3-D plan (`megatron_lm.megatron_lm_plan`); `tensor`, `stages`,
    `virtual`, `context`, `expert` fix those degrees (0: as a user would pick them); `sequence`:
    with Megatron's sequence parallelism in the tensor-parallel groups (as Megatron-LM's users run it)."""
    pricing = _pricing(options or UnityOptions(), profile)
    return megatron_lm_plan(
        graph, machine, pricing, tensor, stages, virtual, sequence, context, expert=expert
    )


# --- sequential (TASO, then parallelization) -------------------------------------------------


def sequential(
    graph: Graph,
    machine: Machine,
    rules: Sequence[CompiledRule],
    options: UnityOptions | None = None,
    profile: ProfileCache | None = None,
) -> PricedPlan:
    options = options or UnityOptions()
    algebraic = [r for r in rules if is_algebraic(r)]
    parallel = [r for r in rules if not is_algebraic(r)]
    rewritten = algebraic_phase(strip_views(graph), machine, rules, options, profile)
    result = unity_search(rewritten, machine, parallel, options, profile)
    return PricedPlan(
        "sequential", result.plan, result.estimate, result.mapped, f"{len(algebraic)} algebraic rules first"
    )


# --- exhaustive ------------------------------------------------------------------------------

EXHAUSTIVE_LIMIT = 20_000
"""Graphs of 12 ops the exhaustive baseline may enumerate (proportionally fewer bigger ones)."""


def exhaustive(
    graph: Graph,
    machine: Machine,
    rules: Sequence[CompiledRule],
    options: UnityOptions | None = None,
    profile: ProfileCache | None = None,
    limit: int = EXHAUSTIVE_LIMIT,
) -> PricedPlan:
    """The best of every graph the rules reach (raises ValueError past `limit` graphs)."""
    options = options or UnityOptions()
    degrees = options.degrees or default_degrees(machine)
    mapper = _pricing(options, profile).mapper(machine)
    start = simplify(strip_views(graph))
    seen = {start.structural_hash()}
    frontier = [start]
    limit = max(1, limit * 12 // max(len(start.nodes), 12))
    best: tuple[float, Graph] | None = None
    while frontier:
        g = frontier.pop()
        mapped = mapper.map(fuse_collectives(g))
        if mapped.feasible and (best is None or mapped.objective < best[0]):
            best = (mapped.objective, g)
        for new in neighbours(g, rules, degrees, (), machine.num_devices):
            digest = new.structural_hash()
            if digest in seen:
                continue
            seen.add(digest)
            if len(seen) > limit:
                raise ValueError(f"exhaustive: more than {limit} graphs reachable; use the search")
            frontier.append(new)
    assert best is not None
    return finish("exhaustive", best[1], machine, _pricing(options, profile), f"{len(seen)} graphs")


def pipeline_baseline(
    name: str,
    graph: Graph,
    machine: Machine,
    options: UnityOptions | None = None,
    profile: ProfileCache | None = None,
) -> PricedPlan:
    """`gpipe` (even split, one device per stage, GPipe schedule), `pipedream` or `hetero-gpipe`
    (`search/pipeline.py`), as a plan."""
    options = options or UnityOptions()
    popts = PipelineOptions(options.cost, options.optimizer, profile)
    builders: dict[str, Callable[[Graph, Machine, PipelineOptions], PipelinePlan]] = {
        "gpipe": even_split_plan,
        "pipedream": pipedream_plan,
        "hetero-gpipe": hetero_gpipe_plan,
    }
    build = builders[name]
    p = build(graph, machine, popts)
    return PricedPlan(p.name, p.graph, p.estimate, None, p.note)


# --- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What every baseline's builder reads: the graph, the machine, the rewrite rules (for those
    that search with them), the search's options and the profile cache."""

    graph: Graph
    machine: Machine
    rules: Sequence[CompiledRule] = ()
    options: UnityOptions = field(default_factory=UnityOptions)
    profile: ProfileCache | None = None


AFTER = None
"""A baseline's `turn` when it is a search of its own: run after the joint search, not beside it."""


@dataclass(frozen=True)
class Baseline:
    """One baseline: its name (also its pass's, `unityc-opt -p NAME{...}`), its builder (a
    `Request` and its pass's own options as keywords, e.g. `zero`'s stage), whether it reads
    the rewrite rules, and its `turn` beside `--unity-search` (priced in increasing turns;
    `AFTER`: a search of its own, run after the joint search)."""

    name: str
    build: Callable[..., PricedPlan]
    turn: int | None
    rules: bool = False

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower():
            raise ValueError(f"baseline: a name is lower case, not {self.name!r}")


def _data_parallel(r: Request) -> PricedPlan:
    return data_parallel(r.graph, r.machine, r.options, r.profile)


def _megatron(r: Request, sequence: bool = False) -> PricedPlan:
    return megatron(r.graph, r.machine, r.options, r.profile, (sequence,))


def _megatron_lm(
    r: Request,
    tensor: int = 0,
    stages: int = 0,
    virtual: int = 0,
    sequence: bool = True,
    context: int = 0,
    expert: int = 0,
) -> PricedPlan:
    if min(tensor, stages, virtual, context, expert) < 0:
        raise ValueError("megatron-lm: tensor, stages, virtual, context and expert must be >= 0 (0: chosen)")
    return megatron_lm(
        r.graph, r.machine, r.options, r.profile, tensor, stages, virtual, sequence, context, expert
    )


def _sequential(r: Request) -> PricedPlan:
    return sequential(r.graph, r.machine, r.rules, r.options, r.profile)


def _exhaustive(r: Request) -> PricedPlan:
    return exhaustive(r.graph, r.machine, r.rules, r.options, r.profile)


def _pipeline(name: str) -> Callable[[Request], PricedPlan]:
    def build(r: Request) -> PricedPlan:
        return pipeline_baseline(name, r.graph, r.machine, r.options, r.profile)

    return build


def _zero(r: Request, stage: int = 3, recompute: bool = False) -> PricedPlan:
    return zero(r.graph, r.machine, r.options, r.profile, stage, recompute)


def _galvatron(r: Request) -> PricedPlan:
    return galvatron(r.graph, r.machine, r.options, r.profile)


def _spatial(r: Request) -> PricedPlan:
    return spatial(r.graph, r.machine, r.options, r.profile)


TABLE: tuple[Baseline, ...] = (
    Baseline("data-parallel", _data_parallel, 9),
    Baseline("megatron", _megatron, 2),
    Baseline("megatron-lm", _megatron_lm, 3),
    Baseline("sequential", _sequential, AFTER, rules=True),
    Baseline("exhaustive", _exhaustive, AFTER, rules=True),
    Baseline("gpipe", _pipeline("gpipe"), 1),
    Baseline("pipedream", _pipeline("pipedream"), 4),
    Baseline("hetero-gpipe", _pipeline("hetero-gpipe"), 5),
    Baseline("zero", _zero, 0),
    Baseline("galvatron", _galvatron, 6),
    Baseline("spatial", _spatial, 7),
)
"""Every baseline, once. The turns beside the search are the cheapest first, as measured on
Llama-2-70B at 128 and 4,096 GPUs (`benchmarks/llm_scale_results.md`: zero and gpipe 1-3 CPU s,
megatron-lm 5-7, pipedream 4-19, galvatron 8 and more), so that a loaded machine's short worker
time still prices most of them; megatron-lm, the plan most likely to fit a large model, before
the dearer ones (GPT-3-175B at 1,024 GPUs under load had no fitting plan at the limit when it
came last). data-parallel last: the search's own worker prices it before its other plans, so
beside the search it comes after the others, whose rows would be missing otherwise."""

BY_NAME = {b.name: b for b in TABLE}
BASELINES = tuple(BY_NAME)
"""The baselines' names, in the table's order."""


def baseline(name: str) -> Baseline:
    """The row of `name` (ValueError naming the known ones)."""
    if name not in BY_NAME:
        raise ValueError(f"unknown baseline '{name}' (known: {', '.join(BASELINES)})")
    return BY_NAME[name]


def run_baseline(
    name: str,
    graph: Graph,
    machine: Machine,
    rules: Sequence[CompiledRule],
    options: UnityOptions | None = None,
    profile: ProfileCache | None = None,
    **extra: Any,
) -> PricedPlan:
    """The plan of baseline `name` (`extra`: its pass's own options, e.g. `stage=2` for `zero`)."""
    request = Request(graph, machine, rules, options or UnityOptions(), profile)
    return baseline(name).build(request, **extra)


__all__ = [
    "BASELINES",
    "TABLE",
    "Baseline",
    "PricedPlan",
    "Request",
    "UnityResult",
    "baseline",
    "data_parallel",
    "exhaustive",
    "galvatron",
    "is_algebraic",
    "megatron",
    "megatron_lm",
    "run_baseline",
    "sequential",
    "spatial",
    "zero",
]
