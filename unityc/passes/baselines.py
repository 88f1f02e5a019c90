"""Baseline plans as passes, on the cost model the search uses (see `search/baselines.py`).

    unityc-opt model.mlir -p 'data-parallel{machine="summit:2"}' -o dp.mlir
    unityc-opt model.mlir -p 'megatron{machine="summit:2"}'
    unityc-opt model.mlir -p 'megatron{machine="cpu:2" sequence=true}' | unityc-opt -t torch
    unityc-opt model.mlir -p 'megatron-lm{machine="dgx-a100:16" optimizer="adam"}'
    unityc-opt model.mlir -p 'megatron-lm{machine="cpu:4" tensor=2 stages=2}' | unityc-opt -t torch
    unityc-opt model.mlir -p 'sequential{machine="cpu:4" budget=16}'
    unityc-opt small.mlir -p 'exhaustive{machine="cpu:2"}'
    unityc-opt model.mlir -p 'zero{machine="cpu:4" stage=3 recompute=true optimizer="adam"}'
    unityc-opt model.mlir -p 'galvatron{machine="dgx-a100:1" memory_budget=8.0 optimizer="adam"}'
    unityc-opt unet.mlir -p 'spatial{machine="summit:8"}'

Each replaces the module's graph with the baseline's mapped plan (every op with a machine
view, `unityc.machine` recorded) and prints a one-line estimate to stderr. `sequential` and
`exhaustive` apply rewrite rules (`rules`: a file or directory; default the shipped library).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from unityc.passes.options import SearchOptions


@dataclass(frozen=True)
class _BaselinePass(SearchOptions):
    """A baseline as a pass: its row of `search.baselines.TABLE` (by `name`) built with the
    search's options and the pass's own fields (those beyond `SearchOptions`) as its options."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # imported here: `unityc-opt` registers every baseline's pass on start, and the search
        # loads the cost model and the rewrite library (a second on a small input's run)
        from unityc.passes.baseline_run import run_baseline_pass

        run_baseline_pass(self, self.name, op, self.own())

    def own(self) -> dict[str, Any]:
        """The pass's own options (its fields beyond `SearchOptions`), by name."""
        shared = {f.name for f in fields(SearchOptions)}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in shared}


@dataclass(frozen=True)
class DataParallelPass(_BaselinePass):
    name = "data-parallel"


@dataclass(frozen=True)
class MegatronPass(_BaselinePass):
    """Megatron-LM's layout; `sequence=true` also shards the norms, dropout and residual adds
    on the sequence in the tensor-parallel group (Megatron's sequence parallelism:
    reduce-scatter and all-gather in place of each all-reduce)."""

    name = "megatron"

    sequence: bool = False


@dataclass(frozen=True)
class ZeroPass(_BaselinePass):
    """Data parallel, every weight's copies sharded ZeRO-`stage` (1: optimizer state, 2: +
    gradients, 3: + weights, FSDP); `recompute=true` also recomputes every op in backward."""

    name = "zero"

    stage: int = 3
    recompute: bool = False


@dataclass(frozen=True)
class MegatronLmPass(_BaselinePass):
    """Megatron-LM's hand-picked 3-D plan (`search/megatron_lm.py`): tensor parallel within a
    node, the fewest pipeline stages that fit with ZeRO-1 and selective recomputation,
    micro-batch 1, interleaving where layers allow, data parallel over the rest; `tensor`,
    `stages`, `virtual`, `context`, `expert` fix those degrees (0: chosen as a user would; context
    parallelism, `--context-parallel-size`, only where nothing fits without it; expert
    parallelism, `--expert-model-parallel-size`, the most experts per node for an MoE graph)."""

    name = "megatron-lm"

    tensor: int = 0
    stages: int = 0
    virtual: int = 0
    sequence: bool = True
    """Megatron's sequence parallelism in the tensor-parallel groups (`sequence=false`: off)."""
    context: int = 0
    expert: int = 0


@dataclass(frozen=True)
class SequentialPass(_BaselinePass):
    name = "sequential"


@dataclass(frozen=True)
class ExhaustivePass(_BaselinePass):
    name = "exhaustive"


@dataclass(frozen=True)
class GalvatronPass(_BaselinePass):
    """Galvatron-BMW's search: per layer, data / sharded data parallel with or without
    checkpointing by dynamic programming under the memory budget (`search/galvatron.py`)."""

    name = "galvatron"


@dataclass(frozen=True)
class SpatialPass(_BaselinePass):
    """Every image op split over height x width on all devices, halos exchanged (Mesh-TensorFlow)."""

    name = "spatial"


BASELINE_PASSES: tuple[type[ModulePass], ...] = (
    DataParallelPass,
    MegatronPass,
    MegatronLmPass,
    SequentialPass,
    ExhaustivePass,
    ZeroPass,
    GalvatronPass,
    SpatialPass,
)
"""The passes of the baselines that take the search's options (`gpipe`, `pipedream` and
`hetero-gpipe` have passes of their own, `passes/gpipe.py`, `passes/pipelines.py`)."""
