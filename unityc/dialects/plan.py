"""A plan as values: `OpPlan` (how one op runs) and `GraphPlan` (how the whole graph runs).

Per op, one frozen value with one IR form, the op's attribute dictionary:

```mlir
%w = pcg.weight key "w" {view = #pcg.view<start 0, [intra 1]>, zero = 2 : i64, recompute, stage = 0 : i64}
```

* `view`: the machine view placing the op's tasks (`#pcg.view<...>`, see `dialects/view.py`);
* `zero = 1|2|3 : i64`: ZeRO stage of a `pcg.weight` held in n >= 2 copies (1: optimizer state
  sharded across the copies; 2: + gradients; 3: + the weight);
* `recompute` (unit): activation checkpointing, the op's saved activations recomputed in backward;
* `stage = k : i64`: the pipeline stage of the op (0-based; see `dialects/pipeline.py`).

`op_plan` reads it from an xDSL op, `set_op_plan` writes it, `carry_plan` gives an op a rewrite
builds in place of another the plan of the op it replaces (`OpPlan.carried_to` says what
survives; the Graph's `with_plan_of` uses the same rule). The Graph's `Node` holds an `OpPlan`.

Per graph, `GraphPlan` on the graph function's attributes: a pipeline's schedule
(`unityc.schedule`, `unityc.microbatches`, `unityc.virtual_stages`) and gradient accumulation
(`unityc.accumulation = k : i64`: the batch is cut into k micro-batches run one after another,
their gradients summed, one gradient sync and one optimizer update per step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.ir import Attribute, Operation

from unityc.dialects.view import MachineViewAttr

if TYPE_CHECKING:  # pcg_types verifies plans with this module: a cycle at import time
    from unityc.dialects.pcg_types import TensorType

VIEW = "view"
ZERO = "zero"
RECOMPUTE = "recompute"
STAGE = "stage"
OP_PLAN_ATTRS = (VIEW, ZERO, RECOMPUTE, STAGE)
"""The attribute names of a per-op plan, in printing order."""
ZERO_STAGES = (1, 2, 3)
"""1: optimizer state sharded across a weight's copies; 2: + gradients; 3: + the weight."""

SCHEDULE = "unityc.schedule"
MICROBATCHES = "unityc.microbatches"
VIRTUAL_STAGES = "unityc.virtual_stages"
ACCUMULATION = "unityc.accumulation"
PIPELINE_ATTRS = (SCHEDULE, MICROBATCHES, VIRTUAL_STAGES)
"""The graph-function attributes of a pipelined plan."""
GRAPH_PLAN_ATTRS = (*PIPELINE_ATTRS, ACCUMULATION)
"""The graph-function attributes of a graph-level plan."""
SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")
INTERLEAVED = "interleaved-1f1b"


class PlanError(ValueError):
    """A plan attribute that is malformed or does not apply (the caller locates it)."""


@dataclass(frozen=True, slots=True)
class OpPlan:
    """How one op runs: its placement, ZeRO stage, recomputation and pipeline stage."""

    view: MachineViewAttr | None = None
    zero: int = 0
    """ZeRO stage of a weight held in copies (1, 2, 3; 0: plain copies)."""
    recompute: bool = False
    stage: int | None = None

    def __post_init__(self) -> None:
        if self.zero != 0 and self.zero not in ZERO_STAGES:
            raise PlanError(f"'{ZERO}' must be 1, 2 or 3 (: i64), got {self.zero}")
        if self.stage is not None and self.stage < 0:
            raise PlanError(f"stage {self.stage} is negative: stages count from 0")

    def __repr__(self) -> str:
        fields = {VIEW: self.view, ZERO: self.zero or None, RECOMPUTE: self.recompute or None}
        fields[STAGE] = self.stage
        return "OpPlan(" + ", ".join(f"{k}={v!r}" for k, v in fields.items() if v is not None) + ")"

    def __bool__(self) -> bool:
        return self != NO_PLAN

    def with_(self, **changes: object) -> OpPlan:
        """This plan with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @staticmethod
    def from_attributes(attributes: Mapping[str, Attribute]) -> OpPlan:
        """The plan in an op's attribute dictionary. Raises PlanError on a malformed one."""
        view = attributes.get(VIEW)
        if view is not None and not isinstance(view, MachineViewAttr):
            raise PlanError(f"'{VIEW}' must be a #pcg.view, got {view}")
        recompute = attributes.get(RECOMPUTE)
        if recompute is not None and not isinstance(recompute, UnitAttr):
            raise PlanError(f"'{RECOMPUTE}' is a unit attribute (write it bare), got {recompute}")
        zero = attributes.get(ZERO)
        if zero is not None and (
            not isinstance(zero, IntegerAttr) or zero.type != i64 or zero.value.data not in ZERO_STAGES
        ):
            raise PlanError(f"'{ZERO}' must be 1, 2 or 3 (: i64), got {zero}")
        stage = attributes.get(STAGE)
        if stage is not None and not _is_i64(stage):
            raise PlanError(f"'{STAGE}' must be an integer ({STAGE} = N : i64), got {stage}")
        return OpPlan(
            view,
            zero.value.data if isinstance(zero, IntegerAttr) else 0,
            recompute is not None,
            stage.value.data if isinstance(stage, IntegerAttr) else None,
        )

    def attributes(self) -> dict[str, Attribute]:
        """The attribute dictionary entries that say this plan."""
        out: dict[str, Attribute] = {}
        if self.view is not None:
            out[VIEW] = self.view
        if self.zero:
            out[ZERO] = IntegerAttr(self.zero, i64)
        if self.recompute:
            out[RECOMPUTE] = UnitAttr()
        if self.stage is not None:
            out[STAGE] = IntegerAttr(self.stage, i64)
        return out

    def problem_for(self, op_name: str, result: TensorType | None) -> str | None:
        """Why this plan cannot apply to an op of this name and first result type, or None (the
        view's fit to the task space is `MachineViewAttr.problem_for`'s)."""
        if not self.zero:
            return None
        if op_name != "pcg.weight":
            return f"'{ZERO}' applies to pcg.weight only, not to {op_name}"
        copies = result.copy_degree if result is not None else 1
        if copies < 2:
            return (
                f"'{ZERO} = {self.zero}' shards a weight across its copies; this one has copy degree "
                f"{copies} (needs >= 2)"
            )
        return None

    def carried_to(
        self, op_name: str, result: TensorType | None, replaced: TensorType | None = None
    ) -> OpPlan:
        """The plan of an op (`op_name`, first result `result`) a rewrite builds in place of the op
        holding this plan, whose first result was `replaced`: the stage always; recomputation onto
        pcg ops (a parallel op ends a recomputed region); the view where the new op has the same
        task space (not known without `replaced`); ZeRO where the new op is a weight still held
        in copies."""
        view = self.view
        if view is not None and (
            replaced is None or result is None or result.task_degrees() != replaced.task_degrees()
        ):
            view = None
        zero = self.zero
        if zero and (op_name != "pcg.weight" or result is None or result.copy_degree < 2):
            zero = 0
        recompute = self.recompute and not op_name.startswith("parallel.")
        if (view, zero, recompute) == (self.view, self.zero, self.recompute):
            return self
        return OpPlan(view, zero, recompute, self.stage)


NO_PLAN = OpPlan()
"""The plan of an op with no plan attributes."""


def _is_i64(attr: Attribute) -> bool:
    return isinstance(attr, IntegerAttr) and attr.type == i64


def _first_type(op: Operation) -> TensorType | None:
    """The op's first result type where it is a pcg tensor (it has `task_degrees`)."""
    if not op.results:
        return None
    t = op.results[0].type
    return t if hasattr(t, "task_degrees") else None  # type: ignore[return-value]


def op_plan(op: Operation) -> OpPlan:
    """The op's plan (its verifier checked it). Raises PlanError on a malformed one."""
    return OpPlan.from_attributes(op.attributes)


def set_op_plan(op: Operation, plan: OpPlan) -> None:
    """Writes `plan` as the op's plan attributes, replacing any it had."""
    for name in OP_PLAN_ATTRS:
        op.attributes.pop(name, None)
    op.attributes.update(plan.attributes())


def carry_plan(old: Operation, *new: Operation) -> None:
    """Gives the ops a rewrite builds in place of `old` `old`'s plan, by `OpPlan.carried_to`:
    what every xDSL rewrite pattern calls on the ops it creates."""
    plan = op_plan(old)
    if not plan:
        return
    replaced = _first_type(old)
    for op in new:
        set_op_plan(op, plan.carried_to(op.name, _first_type(op), replaced))


# --- the graph-level plan ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pipeline:
    """The schedule of a pipelined plan: its name, micro-batches and virtual stages per rank group."""

    schedule: str
    microbatches: int
    virtual_stages: int = 1

    def __post_init__(self) -> None:
        if (problem := self.problem()) is not None:
            raise PlanError(problem)

    def problem(self) -> str | None:
        if self.schedule not in SCHEDULES:
            return f"unknown schedule '{self.schedule}' (known: {', '.join(SCHEDULES)})"
        if self.microbatches < 1:
            return f"{MICROBATCHES} must be at least 1, got {self.microbatches}"
        if self.schedule == INTERLEAVED and self.virtual_stages < 2:
            return (
                f"the {INTERLEAVED} schedule needs {VIRTUAL_STAGES} = v : i64 with v >= 2 stages per "
                "rank group"
            )
        if self.schedule != INTERLEAVED and self.virtual_stages != 1:
            return f"{VIRTUAL_STAGES} is only for the {INTERLEAVED} schedule, not '{self.schedule}'"
        return None

    def problem_with(self, stages: int) -> str | None:
        """Why this schedule cannot run `stages` stages (torch.distributed.pipelining's limits)."""
        if stages % self.virtual_stages:
            return (
                f"{VIRTUAL_STAGES} = {self.virtual_stages} does not divide the {stages} stages: each rank "
                "group holds the same number of stages"
            )
        if self.schedule == "1f1b" and self.microbatches < stages:
            return f"1f1b needs at least as many micro-batches as stages: {self.microbatches} < {stages}"
        groups = self.rank_groups(stages)
        rounds = max(1, self.microbatches // groups)
        if self.schedule == INTERLEAVED and self.microbatches % rounds:
            return (
                f"{INTERLEAVED} runs micro-batches in rounds of the {groups} rank groups: "
                f"{self.microbatches} micro-batches do not split into {rounds} equal rounds"
            )
        return None

    def rank_groups(self, stages: int) -> int:
        """Rank groups of a plan of `stages` stages (stage k runs on group k mod this)."""
        return stages // self.virtual_stages

    def attributes(self) -> dict[str, Attribute]:
        """The graph function's attributes that say this."""
        attrs: dict[str, Attribute] = {
            SCHEDULE: StringAttr(self.schedule),
            MICROBATCHES: IntegerAttr(self.microbatches, i64),
        }
        if self.virtual_stages != 1:
            attrs[VIRTUAL_STAGES] = IntegerAttr(self.virtual_stages, i64)
        return attrs


@dataclass(frozen=True, slots=True)
class GraphPlan:
    """How the whole graph runs: its pipeline schedule (None: not pipelined) and its gradient
    accumulation steps (1: none)."""

    pipeline: Pipeline | None = None
    accumulation: int = 1
    """k: the batch is cut into k micro-batches run one after another (each, in a pipelined plan,
    a whole pipeline of `pipeline.microbatches`), their gradients summed; one gradient sync and
    one optimizer update per step."""

    def __post_init__(self) -> None:
        if self.accumulation < 1:
            raise PlanError(f"{ACCUMULATION} must be at least 1, got {self.accumulation}")

    @property
    def batch_parts(self) -> int:
        """Into how many equal parts the batch is cut (accumulation steps x pipeline micro-batches)."""
        return self.accumulation * (self.pipeline.microbatches if self.pipeline else 1)

    @staticmethod
    def from_attributes(attributes: Mapping[str, Attribute]) -> GraphPlan:
        """The plan in a graph function's attributes. Raises PlanError on a malformed one."""
        accumulation = _int(attributes, ACCUMULATION, 1)
        if SCHEDULE not in attributes:
            for name in (MICROBATCHES, VIRTUAL_STAGES):
                if name in attributes:
                    raise PlanError(f"'{name}' without '{SCHEDULE}': a pipelined plan names its schedule")
            return GraphPlan(None, accumulation)
        schedule = attributes[SCHEDULE]
        if not isinstance(schedule, StringAttr):
            raise PlanError(f"'{SCHEDULE}' must be a string (one of {', '.join(SCHEDULES)}), got {schedule}")
        if MICROBATCHES not in attributes:
            raise PlanError(f"a pipelined plan needs '{MICROBATCHES} = M : i64' on the graph function")
        micro, virtual = _int(attributes, MICROBATCHES, 1), _int(attributes, VIRTUAL_STAGES, 1)
        return GraphPlan(Pipeline(schedule.data, micro, virtual), accumulation)

    def attributes(self) -> dict[str, Attribute]:
        """The graph function's attributes that say this plan."""
        out = self.pipeline.attributes() if self.pipeline else {}
        if self.accumulation != 1:
            out[ACCUMULATION] = IntegerAttr(self.accumulation, i64)
        return out

    def written_to(self, function_attrs: Mapping[str, Attribute]) -> dict[str, Attribute]:
        """`function_attrs` with their graph-level plan replaced by this one."""
        kept = {k: v for k, v in function_attrs.items() if k not in GRAPH_PLAN_ATTRS}
        return {**kept, **self.attributes()}


def _int(attributes: Mapping[str, Attribute], name: str, default: int) -> int:
    attr = attributes.get(name)
    if attr is None:
        return default
    if not isinstance(attr, IntegerAttr) or attr.type != i64:
        raise PlanError(f"'{name}' must be an integer ({name} = N : i64), got {attr}")
    return attr.value.data


__all__ = [
    "ACCUMULATION",
    "GRAPH_PLAN_ATTRS",
    "INTERLEAVED",
    "MICROBATCHES",
    "NO_PLAN",
    "OP_PLAN_ATTRS",
    "PIPELINE_ATTRS",
    "SCHEDULE",
    "SCHEDULES",
    "STAGE",
    "VIRTUAL_STAGES",
    "ZERO_STAGES",
    "GraphPlan",
    "OpPlan",
    "Pipeline",
    "PlanError",
    "carry_plan",
    "op_plan",
    "set_op_plan",
]
