"""Pipelined plans: `stage` on every op, the schedule and micro-batch count on the graph function.

```mlir
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "1f1b", unityc.microbatches = 4 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<16x32xf32>
  ...
```

* `stage = k : i64` (0-based) on every op; a plan has S = 1 + the largest stage, and every
  stage below S holds an op. No op reads a value of a later stage (stages follow data flow).
* `unityc.schedule` is one of `SCHEDULES`; `unityc.microbatches = M : i64` splits every
  input's batch dimension (dim 0) into M equal micro-batches: micro-batch m of an input is chunk
  m of each of its pieces (as `parallel.pipeline` splits), so M x shard degree of dim 0 divides
  the batch. `interleaved-1f1b` needs `unityc.virtual_stages = v : i64` (v >= 2) dividing S:
  stage k runs on rank group k mod (S/v); the other schedules have one stage per rank group.
* The device group of a rank group is the devices its ops' views reach; groups are disjoint
  (`check_pipeline`, given where each op's tasks run).
* The loss is the mean of the micro-batches' losses: exactly the whole batch's mean when every
  op keeps the batch in dim 0 and mixes no two samples, which `microbatch_module` checks while
  it builds the graph of one micro-batch (what the interpreter and the program run M times).
* Gradient accumulation, `unityc.accumulation = k : i64` (any plan, `dialects/plan.py`), cuts
  the batch the same way into k micro-batches run one after another (each a whole pipeline of M
  in a pipelined plan: k x M parts, part a*M + m of step a): the same checks, the same graph of
  one micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import OptOperandDef, VarOperandDef, VarResultDef

from unityc.dialects import parallel, pcg
from unityc.dialects.diagnostics import LocatedError, located
from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import (
    SCHEDULE,
    GraphPlan,
    Pipeline,
    PlanError,
    op_plan,
)
from unityc.dialects.syntax import Kind, UnitycOp, to_attr


def pipeline_of(fn: func.FuncOp) -> Pipeline | None:
    """The graph function's schedule, or None when it is not pipelined; located errors."""
    return graph_plan_of(fn).pipeline


def graph_plan_of(fn: func.FuncOp) -> GraphPlan:
    """The graph function's graph-level plan (`dialects/plan.py`); located errors."""
    try:
        return GraphPlan.from_attributes(fn.attributes)
    except PlanError as e:
        raise located(fn, str(e)) from None


def stage_of(op: Operation) -> int | None:
    """The op's `stage` (its verifier checked it), or None."""
    try:
        return op_plan(op).stage
    except PlanError as e:
        raise located(op, str(e)) from None


def graph_ops(fn: func.FuncOp) -> list[UnitycOp]:
    return [op for op in fn.body.block.ops if isinstance(op, UnitycOp)]


Devices = Callable[[UnitycOp], Iterable[int] | None]
"""The devices an op's tasks run on, or None where that is not known here."""


def intra_devices(op: UnitycOp) -> Iterable[int] | None:
    """An op's devices from its view alone (known without a machine unless it strides nodes)."""
    view = op_plan(op).view
    if view is None or any(view.inter) or not op.results:
        return None
    t = op.results[0].type
    assert isinstance(t, TensorType)
    dims = [d for d in t.task_degrees() if d > 1]
    devices = {view.start}
    for degree, stride in zip(dims, view.strides, strict=False):
        devices = {d + i * stride for d in devices for i in range(degree)}
    return devices


def check_pipeline(fn: func.FuncOp, devices: Devices = intra_devices) -> tuple[Pipeline, int] | None:
    """Verifies a pipelined graph function (see the module docstring) and its gradient
    accumulation (`unityc.accumulation = k`: k divides the batch of every input's pieces, after
    the pipeline's micro-batches); returns its schedule and stage count, or None for a plan that
    is not pipelined. Errors are located at the op at fault."""
    plan = graph_plan_of(fn)
    pipeline = plan.pipeline
    ops = graph_ops(fn)
    staged = {op: s for op in ops if (s := stage_of(op)) is not None}
    if pipeline is None:
        if staged:
            first = next(iter(staged))
            raise located(first, f"{first.name} has a stage but the graph function names no '{SCHEDULE}'")
        if plan.accumulation > 1:
            _check_batch(ops, plan.accumulation)
        return None
    if not ops:
        return pipeline, 0
    for op in ops:
        if op not in staged:
            raise located(op, f"{op.name} has no stage: every op of a pipelined plan needs 'stage = k : i64'")
        if isinstance(op, parallel.PipelineOp | parallel.BatchOp):
            raise located(op, f"{op.name} in a plan pipelined by stages: micro-batches are the schedule's")
    present = sorted(set(staged.values()))
    count = present[-1] + 1
    if len(present) != count:  # a gap (never a range over the largest stage: it may be huge)
        gap = next(k for k, s in enumerate(present) if k != s)
        raise located(fn, f"stage {gap} holds no op: the stages of {count} are 0 to {count - 1}")
    if (problem := pipeline.problem_with(count)) is not None:
        raise located(fn, problem)
    _check_order(ops, staged)
    _check_batch(ops, plan.batch_parts)
    _check_groups(ops, staged, pipeline.rank_groups(count), devices)
    return pipeline, count


def _check_order(ops: list[UnitycOp], staged: dict[UnitycOp, int]) -> None:
    for op in ops:
        for value in op.operands:
            producer = value.owner
            if isinstance(producer, UnitycOp) and staged[producer] > staged[op]:
                raise located(
                    op,
                    f"{op.name} of stage {staged[op]} reads {_name(value)} of stage {staged[producer]}: "
                    "a stage reads only values of its own or earlier stages",
                )


def _check_batch(ops: list[UnitycOp], microbatches: int) -> None:
    """Every input splits into `microbatches` equal micro-batches along dim 0 of its pieces."""
    for op in ops:
        if not isinstance(op, pcg.InputOp):
            continue
        t = op.result.type
        assert isinstance(t, TensorType)
        if t.rank == 0:
            raise located(
                op, f"input '{op.attrs()['key']}' is a scalar: micro-batches split dim 0 of every input"
            )
        rows = t.shape[0] // t.shard[0]
        if rows % microbatches:
            raise located(
                op,
                f"{microbatches} micro-batches do not divide the batch of input '{op.attrs()['key']}': its "
                f"pieces hold {rows} rows of dim 0 ({t.shape[0]} in {t.shard[0]} shards)",
            )


def _check_groups(ops: list[UnitycOp], staged: dict[UnitycOp, int], groups: int, devices: Devices) -> None:
    owner: dict[int, tuple[int, UnitycOp]] = {}
    for op in ops:
        group = staged[op] % groups
        for device in devices(op) or ():
            first = owner.setdefault(device, (group, op))
            if first[0] != group:
                raise located(
                    op,
                    f"{op.name} of stage {staged[op]} runs on device {device}, which the {first[1].name} "
                    f"of stage {staged[first[1]]} uses: each rank group's stages run on devices of "
                    "their own (stage k on group k mod the rank groups)",
                )


def _name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else "a value"


# --- the graph of one micro-batch -------------------------------------------------------------

LINEAR_ON_MEANS = (pcg.IdentityOp, pcg.ScalarMulOp, pcg.AddOp, pcg.SubOp)
"""Ops that commute with the mean over micro-batches (besides parallel ops)."""


class MicrobatchError(LocatedError):
    """A plan whose micro-batches would not compute the whole batch's loss."""


def microbatch_module(module: ModuleOp, microbatches: int) -> ModuleOp:
    """The plan for one micro-batch: inputs with dim 0 divided by `microbatches` and every type
    inferred again. Raises MicrobatchError, located, at an op whose micro-batch result would not
    be its share of the whole batch's (an op mixing samples, a reshape moving the batch out of
    dim 0, a summed loss), or where the loss is not a mean over the batch."""
    from unityc.dialects.container import graph_function

    fn = graph_function(module)
    block = Block()
    values: dict[SSAValue, SSAValue] = {}
    kind: dict[SSAValue, str] = {}  # "batch": dim 0 is the batch; "mean": a mean over the batch
    shards = _batch_shards(fn)
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            _check_outputs(op, kind, shards)
            block.add_op(func.ReturnOp(*(values[v] for v in op.operands)))
            continue
        assert isinstance(op, UnitycOp)
        new = _micro_op(op, values, kind, microbatches)
        block.add_op(new)
        for old, result in zip(op.results, new.results, strict=True):
            values[old] = result
            result.name_hint = old.name_hint
    ret = block.last_op
    assert ret is not None
    out_types = [v.type for v in ret.operands]
    micro = func.FuncOp(fn.sym_name.data, ((), out_types), Region(block))
    micro.attributes.update(fn.attributes)
    return ModuleOp([micro], attributes=dict(module.attributes))


def _micro_op(op: UnitycOp, values: dict[SSAValue, SSAValue], kind: dict[SSAValue, str], m: int) -> UnitycOp:
    operand_kinds = {kind.get(v) for v in op.operands} - {None}
    groups = [[values[v] for v in g] for g in op._operand_groups()]
    props = dict(op.properties)
    if isinstance(op, pcg.InputOp):
        t = op.result.type
        assert isinstance(t, TensorType)
        micro_t = TensorType(
            (t.shape[0] // m, *t.shape[1:]), t.element_type, t.shard, t.sum_degree, t.copy_degree
        )
        new = op.build(result_types=[micro_t], properties=props, attributes=dict(op.attributes))
        kind[op.result] = "batch"
        return new
    if not operand_kinds:  # weights, constants and what only they feed: as they are
        return _rebuilt(op, groups, [r.type for r in op.results], props)
    if "mean" in operand_kinds and not isinstance(op, LINEAR_ON_MEANS + tuple(parallel.ALL_OPS)):
        raise _refuse(
            op, "it reads a mean over the batch, and only linear ops commute with the mean over micro-batches"
        )
    if "mean" in operand_kinds and "batch" in operand_kinds:
        raise _refuse(op, "it combines a mean over the batch with a batched value")
    _check_mixing(op, operand_kinds)
    attrs = op.attrs()
    if isinstance(op, pcg.ReshapeOp) and "batch" in operand_kinds:
        shape = list(attrs["shape"])
        if not shape or shape[0] % m:
            raise _refuse(
                op, f"its result dim 0 of size {shape[0] if shape else 1} is not split by {m} micro-batches"
            )
        shape[0] //= m
        attrs["shape"] = shape
        props["shape"] = to_attr(Kind.INTS, shape)
    typed = _typed(op, groups)
    try:
        _, types = op.infer(typed, attrs)
    except FormError as e:
        raise _refuse(op, str(e)) from None
    new = _rebuilt(op, groups, list(types), props)
    for old, result in zip(op.results, new.results, strict=True):
        kind[old] = _result_kind(op, old.type, result.type, operand_kinds, m)  # type: ignore[arg-type]
    return new


def _rebuilt(op: UnitycOp, groups: list[list[SSAValue]], types: list[Attribute], props: dict) -> UnitycOp:
    """`op` again on these operands, with these result types and properties (its attributes kept)."""
    result_defs = op.get_irdl_definition().results
    grouped: list = (
        [types] if len(result_defs) == 1 and isinstance(result_defs[0][1], VarResultDef) else types
    )
    return op.build(operands=groups, result_types=grouped, properties=props, attributes=dict(op.attributes))


def _typed(op: UnitycOp, groups: list[list[SSAValue]]) -> list:
    """The operands' types as `infer` takes them (None for an absent optional operand)."""
    out: list = []
    for (_, d), g in zip(op.get_irdl_definition().operands, groups, strict=True):
        if isinstance(d, OptOperandDef):
            out.append(g[0].type if g else None)
        elif isinstance(d, VarOperandDef):
            out.extend(v.type for v in g)
        else:
            out.append(g[0].type)
    return out


def _check_mixing(op: UnitycOp, operand_kinds: set[str]) -> None:
    if "batch" not in operand_kinds:
        return
    if isinstance(op, pcg.BatchNormOp):
        raise _refuse(op, "batch norm's statistics span the whole batch")
    attrs = op.attrs()
    first = op.operands[0].type
    assert isinstance(first, TensorType)
    if (
        isinstance(op, pcg.SoftmaxOp | pcg.ConcatOp | pcg.SplitOp | pcg.GatherOp)
        and attrs["dim"] % max(first.rank, 1) == 0
    ):
        raise _refuse(op, "it works along dim 0, the batch")
    if isinstance(op, pcg.LayerNormOp) and attrs["dims"] >= first.rank:
        raise _refuse(op, "it normalizes over dim 0, the batch")
    if (
        isinstance(op, pcg.ReduceOp)
        and 0 in [d % max(first.rank, 1) for d in attrs["dims"]]
        and attrs["kind"] != "mean"
    ):
        raise _refuse(op, "it sums over dim 0, the batch (only a mean averages over micro-batches)")
    if isinstance(op, pcg.CrossEntropyOp | pcg.MseLossOp) and attrs["reduction"] != "mean":
        raise _refuse(
            op, "its reduction is 'sum': the loss of a pipelined plan is the mean over micro-batches"
        )
    if isinstance(op, pcg.CrossEntropyOp) and attrs.get("ignore_index") is not None:
        raise _refuse(
            op,
            f"it ignores targets {attrs['ignore_index']} (ignore_index): its mean divides by the kept "
            "targets of the whole batch, which a micro-batch cannot count",
        )


def _reduces_batch(op: pcg.ReduceOp) -> bool:
    """Whether a reduce's dims include dim 0, the batch."""
    first = op.operands[0].type
    assert isinstance(first, TensorType)
    return 0 in [d % max(first.rank, 1) for d in op.attrs()["dims"]]


def _result_kind(op: UnitycOp, old: TensorType, new: TensorType, operand_kinds: set[str], m: int) -> str:
    if "mean" in operand_kinds:
        return "mean"
    if isinstance(op, pcg.CrossEntropyOp | pcg.MseLossOp) and new.shape == old.shape:
        return "mean"  # a mean over dims including the batch (checked by _check_mixing)
    if isinstance(op, pcg.ReduceOp) and _reduces_batch(op):
        return "mean"  # checked by _check_mixing; with one micro-batch every shape is kept, so
        # the dims decide (an RMS norm's mean over the hidden dim keeps the batch)
    batch_kept = new.rank >= 1 and new.shape[0] * m == old.shape[0] and new.shape[1:] == old.shape[1:]
    if not batch_kept:
        raise _refuse(
            op,
            f"its result {list(old.shape)} becomes {list(new.shape)} for one micro-batch: a pipelined "
            "plan keeps the batch in dim 0 of every value computed from the inputs",
        )
    return "batch"


def _batch_shards(fn: func.FuncOp) -> int:
    """The shard degree of dim 0 that every input has: micro-batch m is chunk m of each piece, so
    inputs cut differently would pair different samples."""
    first: pcg.InputOp | None = None
    for op in fn.body.block.ops:
        if not isinstance(op, pcg.InputOp):
            continue
        if first is None:
            first = op
            continue
        t, f = op.result.type, first.result.type
        assert isinstance(t, TensorType) and isinstance(f, TensorType)
        if t.shard[0] != f.shard[0]:
            raise _error(
                op,
                f"input '{op.attrs()['key']}' has dim 0 in {t.shard[0]} shards but input "
                f"'{first.attrs()['key']}' in {f.shard[0]}: micro-batches (chunk m of every piece) "
                "would pair different samples",
            )
    if first is None:
        return 1
    t = first.result.type
    assert isinstance(t, TensorType)
    return t.shard[0]


def _check_outputs(ret: func.ReturnOp, kind: dict[SSAValue, str], shards: int) -> None:
    for i, v in enumerate(ret.operands):
        t = v.type
        assert isinstance(t, TensorType)
        got = kind.get(v)
        if i == 0 and got != "mean":
            raise _error(
                ret, "the loss is not a mean over the batch: a pipelined plan averages micro-batch losses"
            )
        if i > 0 and got != "batch":
            raise _error(
                ret, f"output {i} is not batched in dim 0: a pipelined plan concatenates its micro-batches"
            )
        if i > 0 and t.shard[0] != shards:
            raise _error(
                ret,
                f"output {i} has dim 0 in {t.shard[0]} shards, the inputs in {shards}: its micro-batches "
                "would not come back in place",
            )


def _error(at: Operation, message: str) -> MicrobatchError:
    return MicrobatchError(str(located(at, message)))


def _refuse(op: UnitycOp, why: str) -> MicrobatchError:
    return _error(op, f"{op.name} cannot run in micro-batches: {why}")
