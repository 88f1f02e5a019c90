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
  norms synchronized (`strategies.spatial_graph`).

Every baseline ends with the machine-mapping DP choosing views, and is priced by `estimate`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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

BASELINES = (
    "data-parallel",
    "megatron",
    "megatron-lm",
    "sequential",
    "exhaustive",
    "gpipe",
    "pipedream",
    "hetero-gpipe",
    "zero",
    "galvatron",
    "spatial",
)


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
) -> PricedPlan:
    """Megatron-LM's hand-picked 3-D plan (`megatron_lm.megatron_lm_plan`); `tensor`, `stages`,
    `virtual` fix those degrees (0: as a user would pick them); `sequence`: with Megatron's
    sequence parallelism in the tensor-parallel groups (as Megatron-LM's users run it)."""
    pricing = _pricing(options or UnityOptions(), profile)
    return megatron_lm_plan(graph, machine, pricing, tensor, stages, virtual, sequence)


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


def run_baseline(
    name: str,
    graph: Graph,
    machine: Machine,
    rules: Sequence[CompiledRule],
    options: UnityOptions | None = None,
    profile: ProfileCache | None = None,
) -> PricedPlan:
    if name == "data-parallel":
        return data_parallel(graph, machine, options, profile)
    if name == "megatron":
        return megatron(graph, machine, options, profile)
    if name == "megatron-lm":
        return megatron_lm(graph, machine, options, profile)
    if name == "sequential":
        return sequential(graph, machine, rules, options, profile)
    if name == "exhaustive":
        return exhaustive(graph, machine, rules, options, profile)
    if name in ("gpipe", "pipedream", "hetero-gpipe"):
        return pipeline_baseline(name, graph, machine, options, profile)
    if name == "zero":
        return zero(graph, machine, options, profile)
    if name == "galvatron":
        return galvatron(graph, machine, options, profile)
    if name == "spatial":
        return spatial(graph, machine, options, profile)
    raise ValueError(f"unknown baseline '{name}' (known: {', '.join(BASELINES)})")


__all__ = [
    "BASELINES",
    "PricedPlan",
    "UnityResult",
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
