"""Which torch.distributed collectives run a parallel op, given where its pieces live.

A parallel op is a set of independent groups (`unityc.cost.communication.parallel_groups`, the
cost model's own decomposition): each group turns some input pieces into some output pieces.
A group becomes one collective among the ranks involved:

| op             | collective                                                              |
|----------------|-------------------------------------------------------------------------|
| partition      | scatter from the input's rank                                           |
| combine        | gather to the output's rank                                             |
| replicate      | broadcast from the input's rank                                         |
| reduce         | reduce to the output's rank                                             |
| all_reduce     | all_reduce when inputs and outputs share ranks, else reduce + broadcast |
| reduce_scatter | reduce_scatter when they share ranks, else reduce + scatter             |
| all_gather     | all_gather when they share ranks, else gather + broadcast               |
| all_to_all     | all_to_all when they share ranks, else gather + scatter                 |

Pieces that stay on their rank cost nothing; backward runs each collective's dual (runtime).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unityc.codegen.analysis import Coord
from unityc.cost.communication import parallel_groups
from unityc.dialects.pcg_types import TensorType
from unityc.runtime.plan import Collective

Stage = tuple[Collective, ...]

SIMPLE = {
    "parallel.partition": "scatter",
    "parallel.combine": "gather",
    "parallel.replicate": "broadcast",
    "parallel.reduce": "reduce",
}
FUSED = {
    "parallel.all_reduce": ("all_reduce", "reduce", "broadcast"),
    "parallel.reduce_scatter": ("reduce_scatter", "reduce", "scatter"),
    "parallel.all_gather": ("all_gather", "gather", "broadcast"),
    "parallel.all_to_all": ("all_to_all", "gather", "scatter"),
}


def parallel_stages(
    name: str,
    attrs: Mapping[str, Any],
    source: TensorType,
    result: TensorType,
    src_where: Mapping[Coord, int],
    dst_where: Mapping[Coord, int],
    dtype: str,
) -> list[Stage]:
    """The stages (run one after the other) of collectives (one per group) of a parallel op."""
    first: list[Collective] = []
    second: list[Collective] = []
    shape = source.piece_shape
    for group in parallel_groups(name, attrs, source.task_degrees()):
        ins = tuple(src_where[c] for c in group.inputs)
        outs = tuple(dst_where[c] for c in group.outputs)
        if len(set(ins) | set(outs)) < 2:
            raise ValueError(
                f"{name}: pieces {list(group.inputs)} and {list(group.outputs)} share one device"
            )
        if name in SIMPLE:
            first.append(_collective(SIMPLE[name], ins, outs, shape, dtype, attrs))
            continue
        fused, gather_kind, spread_kind = FUSED[name]
        if set(ins) == set(outs):
            first.append(_collective(fused, ins, outs, shape, dtype, attrs))
            continue
        root = outs[0]
        gathered = _collective(gather_kind, ins, (root,), shape, dtype, attrs)
        first.append(gathered)
        second.append(_collective(spread_kind, (root,), outs, gathered.out_shape, dtype, attrs, spread=True))
    return [tuple(s) for s in (first, second) if s]


def _collective(
    kind: str,
    ins: tuple[int, ...],
    outs: tuple[int, ...],
    shape: tuple[int, ...],
    dtype: str,
    attrs: Mapping[str, Any],
    spread: bool = False,
) -> Collective:
    """`spread` marks the second half of an all_to_all (scatter along `dst`)."""
    if "src" in attrs:  # all_to_all: combine along src, partition along dst
        if kind == "all_to_all":
            return Collective(kind, ins, outs, shape, dtype, dim=attrs["src"], dst=attrs["dst"])
        return Collective(kind, ins, outs, shape, dtype, dim=attrs["dst"] if spread else attrs["src"])
    return Collective(kind, ins, outs, shape, dtype, dim=attrs.get("dim") or 0)
