"""What the joint search (`unity.py`) takes and returns: its options, its report, its result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from unityc.cost.estimate import Estimate
from unityc.graph import Graph
from unityc.machine.spec import Machine
from unityc.search.mapping import Mapped
from unityc.search.opcost import SYNC_WEIGHT
from unityc.search.plans import (
    PlanSummary,
)


@dataclass(frozen=True)
class UnityOptions:
    alpha: float = 1.05
    budget: int | None = 12
    """Expansions per segment search, and the scale of its work budget (`work_budget`); None:
    until the queue empties."""
    split_size: int = 12
    time_limit: float | None = None
    """Seconds for the whole search (see `unity_search`): segment searches stop at half of it,
    whatever runs at the limit is interrupted and the best plan completed by then returned.
    None here; `unity-search` (the pass and `--unity-search`) defaults to 600 s."""
    degrees: tuple[int, ...] | None = None
    """Parallel degrees the rules may use (default: `default_degrees`)."""
    cost: str = "roofline"
    optimizer: str = "sgd"
    memory_check: bool = True
    sync_weight: float = SYNC_WEIGHT
    side_by_side: bool = True
    per_output: int = 2
    """Candidates kept per output partitioning of a segment (besides the best few overall)."""
    seeds: bool = True
    """Whether segment searches also start from data-parallel and Megatron-style versions."""
    beam: float = 1.2
    """Partitionings of a cut are searched onwards only if the best way to reach them costs at
    most `beam` x the best way to reach the cut (inf: all of them)."""
    whole_graph: bool = True
    """Whether the result is compared with whole-graph data-parallel and Megatron plans."""
    pipelines: bool = True
    """Whether pipelined plans compete (`search/pipeline.py`: the partition DP over the graph's
    split points with stage replication and device groups, each flush schedule, the micro-batch
    count; and the pipedream, hetero-gpipe and gpipe plans), the fastest plan winning."""
    levers: bool = True
    """Whether a plan that does not fit gets ZeRO stages and recomputation (`levers.py`)."""
    parallel_pass: bool = True
    """Whether the graph is also searched with the parallelization rules alone (the second phase
    of Unity's sequential ablation, `baselines.sequential`; its cuts are its own, as they
    depend on the rules' matches), the better plan kept: the algebraic rules' neighbours share
    the work budget with the parallel ones, so at the same budget the joint search alone can
    stop short of what the ablation reaches (the zoo MLP on summit:8: 255.5 ms against 243.0 ms)."""


def default_degrees(machine: Machine) -> tuple[int, ...]:
    """Degrees worth trying on `machine`: all its devices, a node, the node count, 2; all
    divisors on machines of up to 8 devices."""
    n = machine.num_devices
    divisors = [d for d in range(2, n + 1) if n % d == 0]
    if n <= 8:
        return tuple(divisors)
    per_node = machine.nodes[0].num_devices
    wanted = {n, per_node, n // per_node if n % per_node == 0 else 1, 2}
    return tuple(d for d in divisors if d in wanted)


def check_degrees(degrees: Sequence[int], machine: Machine) -> None:
    """Refuses parallel degrees the machine cannot use: more than its devices, or not dividing
    their number (views place a degree's tasks on a block that tiles the machine)."""
    n = machine.num_devices
    for d in degrees:
        if d > n:
            raise ValueError(f"degrees: {d} is more than the {n} device(s) of {machine.name}")
        if n % d:
            raise ValueError(f"degrees: {d} does not divide the {n} devices of {machine.name}")


@dataclass
class SearchReport:
    seconds: float = 0.0
    segments: int = 0
    searches: int = 0
    reused: int = 0
    priced: int = 0
    bounded: int = 0
    """Candidates not priced: their lower bound was beyond alpha x the best."""
    expanded: int = 0
    stopped: dict[str, int] = field(default_factory=dict)
    rounds: list[tuple[float, float, bool]] = field(default_factory=list)
    """Per memory round: (memory weight, peak bytes of its plan, whether it fits)."""
    stopped_early: str | None = None
    """Why the search returned before it was done ("time limit", "interrupted"), if it did."""


@dataclass
class UnityResult:
    plan: Graph
    """The mapped plan: every node carries a machine view."""
    estimate: Estimate
    mapped: Mapped | None
    """The DP's mapping (None for a pipelined plan: its stages place it)."""
    fits: bool
    report: SearchReport
    source: str = "search"
    """Where the plan comes from: the search, or a whole-graph plan it was compared with."""
    alternatives: list[PlanSummary] = field(default_factory=list)
    """The whole-graph data-parallel and Megatron plans the result was compared with."""


Progress = Callable[[str, int, int], None]
"""(what, done, total): called as segment searches finish."""
