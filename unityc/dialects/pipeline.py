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
  op keeps the batch in dim 0 and mixes no two samples, which `microbatch_types` (exact) checks
  while it builds the graph of one micro-batch (what the interpreter and the program run M
  times). A batch norm reading the batch is refused: each micro-batch would normalize by its own
  statistics, not the whole batch's. The cost model prices the same graph without the check
  (batch norm with micro-batch statistics, GPipe's semantics), for any plan it is given.
* The rules are written once, over `Node`s (`dialects/node.py`): a Graph's own
  (`graph/microbatch.py`) and those `op_rows` reads from a module's xDSL ops (`check_pipeline`,
  `microbatch_module`).
* Gradient accumulation, `unityc.accumulation = k : i64` (any plan, `dialects/plan.py`), cuts
  the batch the same way into k micro-batches run one after another (each a whole pipeline of M
  in a pipelined plan: k x M parts, part a*M + m of step a): the same checks, the same graph of
  one micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.builtin import TensorType as BuiltinTensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import VarResultDef

from unityc.dialects import parallel, pcg
from unityc.dialects.container import graph_function
from unityc.dialects.diagnostics import LocatedError, located
from unityc.dialects.forms import FormError
from unityc.dialects.literals import splat_of_bytes
from unityc.dialects.node import Node, Ref, batch_size, is_batch_splat
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import (
    SCHEDULE,
    GraphPlan,
    Pipeline,
    PlanError,
    op_plan,
)
from unityc.dialects.registry import canonical_attrs, full_attrs, infer_types, op_class
from unityc.dialects.syntax import UnitycOp, to_attr
from unityc.dialects.view import MachineViewAttr

FUNCTION = -1
"""`PlanProblem.at` for a problem of the graph function as a whole."""
OUTPUTS = -2
"""`PlanProblem.at` for a problem of the graph's outputs (its return)."""


class PlanProblem(ValueError):
    """A plan that breaks a rule of this module, at op `at` (an id of the ops checked),
    `FUNCTION` or `OUTPUTS`; each IR form's adapter locates it. `named`: the message goes after
    the op's name (`text`)."""

    def __init__(self, message: str, at: int, named: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.at = at
        self.named = named

    def text(self, name: str) -> str:
        """The message, after `name` (the op as the caller names it) where it needs one."""
        return f"{name} {self.message}" if self.named else self.message


# --- adapters: the xDSL form --------------------------------------------------------------------


def graph_ops(fn: func.FuncOp) -> list[UnitycOp]:
    return [op for op in fn.body.block.ops if isinstance(op, UnitycOp)]


def op_rows(fn: func.FuncOp, strict: bool = True) -> tuple[dict[int, Node], tuple[Ref, ...], list[UnitycOp]]:
    """The graph function's ops as `Node`s keyed by position (what `graph.from_module` holds),
    its outputs as refs, and the ops by the same position (where a `PlanProblem` is located).
    A value no op of the function makes (a block argument) is a ValueError, or with `strict`
    off is read as no operand (the verifier checks any function so). PlanError for a malformed
    per-op plan (the verifier locates those first)."""
    ops = graph_ops(fn)
    refs: dict[SSAValue, Ref] = {}

    def ref(v: SSAValue) -> Ref | None:
        if v in refs or not strict:
            return refs.get(v)
        raise ValueError(
            f"{fn.sym_name.data} reads a value no op of it makes: a graph function takes no arguments"
        )

    rows: dict[int, Node] = {}
    for i, op in enumerate(ops):
        operands = tuple(None if v is None else ref(v) for v in op.flat_operands())
        types = tuple(r.type for r in op.results)
        hint = op.results[0].name_hint if op.results else None
        rows[i] = Node(op.name, operands, canonical_attrs(op.name, op.attrs()), types, op_plan(op), hint)  # type: ignore[arg-type]
        refs.update({r: (i, j) for j, r in enumerate(op.results)})
    ret = fn.body.block.last_op
    made = [ref(v) for v in ret.operands] if isinstance(ret, func.ReturnOp) else []
    return rows, tuple(r for r in made if r is not None), ops


def _located(problem: PlanProblem, fn: func.FuncOp, ops: list[UnitycOp]) -> LocatedError:
    if problem.at == FUNCTION:
        return located(fn, problem.message)
    if problem.at == OUTPUTS:
        return located(fn.body.block.last_op, problem.message)
    op = ops[problem.at]
    return located(op, problem.text(op.name))


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


Devices = Callable[[UnitycOp], Iterable[int] | None]
"""The devices an op's tasks run on, or None where that is not known here."""


def intra_devices(op: UnitycOp) -> Iterable[int] | None:
    """An op's devices from its view alone (known without a machine unless it strides nodes)."""
    return view_devices(op_plan(op).view, op.results[0].type if op.results else None)  # type: ignore[arg-type]


def check_pipeline(fn: func.FuncOp, devices: Devices = intra_devices) -> tuple[Pipeline, int] | None:
    """`check_stages` on a graph function, errors located at the op at fault."""
    plan = graph_plan_of(fn)
    rows, _, ops = op_rows(fn, strict=False)
    try:
        return check_stages(
            plan, rows, lambda i: devices(ops[i]), lambda ref: _name(ops[ref[0]].results[ref[1]])
        )
    except PlanProblem as e:
        raise _located(e, fn, ops) from None


class MicrobatchError(LocatedError):
    """A plan whose micro-batches would not compute the whole batch's loss."""


def microbatch_module(module: ModuleOp, microbatches: int) -> ModuleOp:
    """The plan for one micro-batch (`microbatch_types`, exact): what the interpreter and the
    program run once per micro-batch, op for op the plan's own (same order, attributes and
    names). Raises MicrobatchError, located at the op at fault."""
    fn = graph_function(module)
    rows, outputs, ops = op_rows(fn)
    try:
        micro = microbatch_types(rows, outputs, microbatches, exact=True)
    except PlanProblem as e:
        raise MicrobatchError(str(_located(e, fn, ops))) from None
    block = Block()
    values: dict[SSAValue, SSAValue] = {}
    for i, op in enumerate(ops):
        attrs, types = micro.get(i, (rows[i].attrs, rows[i].types))
        props = dict(op.properties)
        kinds = {name: kind for name, kind, _ in op.PROPS}
        props.update({k: to_attr(kinds[k], v) for k, v in attrs if v != dict(rows[i].attrs).get(k)})
        groups = [[values[v] for v in g] for g in op._operand_groups()]
        new = _rebuilt(op, groups, list(types), props)
        block.add_op(new)
        for old, result in zip(op.results, new.results, strict=True):
            values[old] = result
            result.name_hint = old.name_hint
    ret = fn.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    block.add_op(func.ReturnOp(*(values[v] for v in ret.operands)))
    out_types = [values[v].type for v in ret.operands]
    new_fn = func.FuncOp(fn.sym_name.data, ((), out_types), Region(block))
    new_fn.attributes.update(fn.attributes)
    return ModuleOp([new_fn], attributes=dict(module.attributes))


def _rebuilt(op: UnitycOp, groups: list[list[SSAValue]], types: list[Attribute], props: dict) -> UnitycOp:
    """`op` again on these operands, with these result types and properties (its attributes kept)."""
    result_defs = op.get_irdl_definition().results
    grouped: list = (
        [types] if len(result_defs) == 1 and isinstance(result_defs[0][1], VarResultDef) else types
    )
    return op.build(operands=groups, result_types=grouped, properties=props, attributes=dict(op.attributes))


def _name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else "a value"


# --- stages -------------------------------------------------------------------------------------

OpDevices = Callable[[int], Iterable[int] | None]
"""The devices the tasks of op `i` (an id of the ops checked) run on, or None where not known."""


def view_devices(view: MachineViewAttr | None, t: TensorType | None) -> Iterable[int] | None:
    """The devices a view places a result of type `t` on, or None where that needs the machine
    (a view striding nodes) or there is no view."""
    if view is None or any(view.inter) or t is None:
        return None
    dims = [d for d in t.task_degrees() if d > 1]
    devices = {view.start}
    for degree, stride in zip(dims, view.strides, strict=False):
        devices = {d + i * stride for d in devices for i in range(degree)}
    return devices


def own_devices(ops: Mapping[int, Node]) -> OpDevices:
    """Each op's devices from its view alone (`view_devices`)."""
    return lambda i: view_devices(ops[i].plan.view, ops[i].types[0] if ops[i].types else None)


def check_stages(
    plan: GraphPlan,
    ops: Mapping[int, Node],
    devices: OpDevices | None = None,
    name: Callable[[Ref], str] = lambda ref: "a value",
) -> tuple[Pipeline, int] | None:
    """Verifies a pipelined plan (see the module docstring) and its gradient accumulation
    (`unityc.accumulation = k`: k divides the batch of every input's pieces, after the
    pipeline's micro-batches): `ops` in the graph's order, `devices` where each runs (default:
    from its view, `own_devices`), `name` what messages call a value. Returns its schedule and
    stage count, or None for a plan that is not pipelined. Raises PlanProblem at the op at fault."""
    pipeline = plan.pipeline
    staged = {i: row.plan.stage for i, row in ops.items() if row.plan.stage is not None}
    if pipeline is None:
        if staged:
            first = next(iter(staged))
            raise PlanProblem(
                f"{ops[first].op} has a stage but the graph function names no '{SCHEDULE}'", first
            )
        if plan.accumulation > 1:
            _check_batch(ops, plan.accumulation)
        return None
    if not ops:
        return pipeline, 0
    for i, row in ops.items():
        if i not in staged:
            raise PlanProblem(
                f"{row.op} has no stage: every op of a pipelined plan needs 'stage = k : i64'", i
            )
        if row.op in (parallel.PipelineOp.name, parallel.BatchOp.name):
            raise PlanProblem(f"{row.op} in a plan pipelined by stages: micro-batches are the schedule's", i)
    present = sorted(set(staged.values()))
    count = present[-1] + 1
    if len(present) != count:  # a gap (never a range over the largest stage: it may be huge)
        gap = next(k for k, s in enumerate(present) if k != s)
        raise PlanProblem(f"stage {gap} holds no op: the stages of {count} are 0 to {count - 1}", FUNCTION)
    if (problem := pipeline.problem_with(count)) is not None:
        raise PlanProblem(problem, FUNCTION)
    _check_order(ops, staged, name)
    _check_batch(ops, plan.batch_parts)
    _check_groups(ops, staged, pipeline.rank_groups(count), devices or own_devices(ops))
    return pipeline, count


def _check_order(ops: Mapping[int, Node], staged: dict[int, int], name: Callable[[Ref], str]) -> None:
    for i, row in ops.items():
        for ref in row.operands:
            if ref is not None and staged[ref[0]] > staged[i]:
                raise PlanProblem(
                    f"{row.op} of stage {staged[i]} reads {name(ref)} of stage {staged[ref[0]]}: "
                    "a stage reads only values of its own or earlier stages",
                    i,
                )


def _check_batch(ops: Mapping[int, Node], microbatches: int) -> None:
    """Every input splits into `microbatches` equal micro-batches along dim 0 of its pieces."""
    for i, row in ops.items():
        if row.op == pcg.InputOp.name:
            _input_rows(i, row, microbatches)


def _input_rows(i: int, row: Node, microbatches: int) -> int:
    """The rows of one micro-batch of an input's pieces; PlanProblem where they do not split."""
    t = row.types[0]
    key = dict(row.attrs)["key"]
    if t.rank == 0:
        raise PlanProblem(f"input '{key}' is a scalar: micro-batches split dim 0 of every input", i)
    rows = t.shape[0] // t.shard[0]
    if rows % microbatches:
        raise PlanProblem(
            f"{microbatches} micro-batches do not divide the batch of input '{key}': its "
            f"pieces hold {rows} rows of dim 0 ({t.shape[0]} in {t.shard[0]} shards)",
            i,
        )
    return rows // microbatches


def _check_groups(ops: Mapping[int, Node], staged: dict[int, int], groups: int, devices: OpDevices) -> None:
    owner: dict[int, tuple[int, int]] = {}
    for i, row in ops.items():
        group = staged[i] % groups
        for device in devices(i) or ():
            first = owner.setdefault(device, (group, i))
            if first[0] != group:
                raise PlanProblem(
                    f"{row.op} of stage {staged[i]} runs on device {device}, which the {ops[first[1]].op} "
                    f"of stage {staged[first[1]]} uses: each rank group's stages run on devices of "
                    "their own (stage k on group k mod the rank groups)",
                    i,
                )


# --- the graph of one micro-batch ---------------------------------------------------------------

LINEAR_ON_MEANS = (pcg.IdentityOp, pcg.ScalarMulOp, pcg.AddOp, pcg.SubOp)
"""Ops that commute with the mean over micro-batches (besides parallel ops)."""

BATCH, MEAN = "batch", "mean"
"""What a value computed from the inputs is: batched in dim 0, or a mean over the batch."""

Micro = tuple[tuple[tuple[str, Any], ...], tuple[TensorType, ...]]
"""An op of one micro-batch: its properties and result types."""


def microbatch_types(
    ops: Mapping[int, Node], outputs: Sequence[Ref], microbatches: int, exact: bool
) -> dict[int, Micro]:
    """The ops of one micro-batch whose properties or types change (`ops` in the graph's
    order): every input's dim 0 divided by `microbatches`, every type computed from the inputs
    inferred again (a reshape of a batched value has its leading size divided; without
    `exact`, of any value computed from the inputs, as the cost model always priced); a splat
    constant of the batch's dim 0 (`is_batch_splat`) is batched too (its first B/M rows);
    weights, other constants and what only they feed stay as they are. Raises PlanProblem where an op has no
    micro-batch form; with `exact`, also where the micro-batches would not compute the whole
    batch's loss: an op mixing samples (batch norm, whose statistics would be each micro-batch's
    own; a softmax or concat along the batch), a sum over the batch, a summed loss, a reshape
    moving the batch out of dim 0, or a loss that is not a mean over the batch. Without it, the
    graph one micro-batch computes as it stands (batch norm with micro-batch statistics, GPipe's
    semantics): what the cost model prices for any plan it is given."""
    micro: dict[int, Micro] = {}
    kind: dict[Ref, str] = {}
    shards = _batch_shards(ops) if exact else 1
    batch = batch_size(ops.values())
    for i, row in ops.items():
        if row.op == pcg.InputOp.name:
            _input_rows(i, row, microbatches)
            micro[i] = (row.attrs, (_micro_rows(row.types[0], microbatches),))
            kind[(i, 0)] = BATCH
            continue
        if batch is not None and is_batch_splat(row, batch) and _splits(row.types[0], microbatches):
            micro[i] = _micro_splat(row, microbatches)
            kind[(i, 0)] = BATCH
            continue
        operand_kinds = {kind[r] for r in row.operands if r is not None and r in kind}
        if not operand_kinds:  # weights, constants and what only they feed: as they are
            continue
        operand_types = tuple(None if r is None else _type(ops, micro, r) for r in row.operands)
        attrs = full_attrs(row.op, row.attrs)
        if exact:
            _check_mixing(i, row, attrs, operand_types, operand_kinds)
        new_attrs = row.attrs
        if row.op == pcg.ReshapeOp.name and (BATCH in operand_kinds or not exact):
            new_attrs = _micro_reshape(i, row, microbatches)  # as priced: whatever reads the inputs
        try:
            types = infer_types(row.op, new_attrs, operand_types)
        except (FormError, ValueError, TypeError, KeyError, IndexError) as e:
            shapes = ", ".join(
                f"{'batched ' if r in kind else ''}{list(t.shape)}"
                for r, t in zip(row.operands, operand_types, strict=True)
                if t is not None
            )
            raise PlanProblem(
                f"has no micro-batch form (operands {shapes}: a value not computed from the inputs "
                f"keeps its whole-batch shape): {e}",
                i,
                named=True,
            ) from None
        micro[i] = (new_attrs, types)
        for j, (old, new) in enumerate(zip(row.types, types, strict=True)):
            kind[(i, j)] = _result_kind(
                i, row, attrs, operand_types[0], old, new, operand_kinds, microbatches, exact
            )
    if exact:
        _check_outputs(ops, micro, outputs, kind, shards)
    return micro


def _micro_rows(t: TensorType, m: int) -> TensorType:
    """`t` with dim 0 divided by `m` micro-batches (its sharding kept)."""
    return TensorType((t.shape[0] // m, *t.shape[1:]), t.element_type, t.shard, t.sum_degree, t.copy_degree)


def _splits(t: TensorType, m: int) -> bool:
    return (t.shape[0] // t.shard[0]) % m == 0


def _micro_splat(row: Node, m: int) -> Micro:
    """A batch-sized splat constant's micro-batch form (`is_batch_splat`): its first B/M rows, a
    splat literal of that shape (every micro-batch's rows are alike), so a micro-batch reads it
    beside the inputs' rows (the base a `slice_scatter` writes into: DeepSeek-V3's rotary halves)."""
    t = _micro_rows(row.types[0], m)
    value = row.attr("value")
    one = value.data.data[: value.get_element_type().compile_time_size]  # one element's bytes (all alike)
    literal = splat_of_bytes(BuiltinTensorType(value.get_element_type(), list(t.shape)), one)
    return tuple((k, literal if k == "value" else v) for k, v in row.attrs), (t,)


def _type(ops: Mapping[int, Node], micro: dict[int, Micro], ref: Ref) -> TensorType:
    changed = micro.get(ref[0])
    return changed[1][ref[1]] if changed is not None else ops[ref[0]].types[ref[1]]


def _micro_reshape(i: int, row: Node, m: int) -> tuple[tuple[str, Any], ...]:
    shape = list(dict(row.attrs).get("shape") or ())
    if not shape or shape[0] % m:
        raise _refuse(
            i, f"its result dim 0 of size {shape[0] if shape else 1} is not split by {m} micro-batches"
        )
    shape[0] //= m
    return tuple((k, tuple(shape) if k == "shape" else v) for k, v in row.attrs)


def _check_mixing(
    i: int, row: Node, attrs: dict[str, Any], operand_types: tuple[TensorType | None, ...], kinds: set[str]
) -> None:
    """Refuses an op whose micro-batch results are not its share of the whole batch's."""
    cls = op_class(row.op)
    if MEAN in kinds and not issubclass(cls, LINEAR_ON_MEANS + tuple(parallel.ALL_OPS)):
        raise _refuse(
            i, "it reads a mean over the batch, and only linear ops commute with the mean over micro-batches"
        )
    if MEAN in kinds and BATCH in kinds:
        raise _refuse(i, "it combines a mean over the batch with a batched value")
    if BATCH not in kinds:
        return
    if cls is pcg.BatchNormOp:
        raise _refuse(i, "batch norm's statistics span the whole batch (each micro-batch would use its own)")
    first = operand_types[0]
    assert first is not None
    if (
        cls in (pcg.SoftmaxOp, pcg.ConcatOp, pcg.SplitOp, pcg.GatherOp)
        and attrs["dim"] % max(first.rank, 1) == 0
    ):
        raise _refuse(i, "it works along dim 0, the batch")
    if cls in (pcg.LayerNormOp, pcg.RmsNormOp) and attrs["dims"] >= first.rank:
        raise _refuse(i, "it normalizes over dim 0, the batch")
    if cls is pcg.ReduceOp and _reduces_batch(attrs, first) and attrs["kind"] != "mean":
        raise _refuse(i, "it sums over dim 0, the batch (only a mean averages over micro-batches)")
    if cls in (pcg.CrossEntropyOp, pcg.MseLossOp) and attrs["reduction"] != "mean":
        raise _refuse(
            i, "its reduction is 'sum': the loss of a pipelined plan is the mean over micro-batches"
        )
    if cls is pcg.CrossEntropyOp and attrs.get("ignore_index") is not None:
        raise _refuse(
            i,
            f"it ignores targets {attrs['ignore_index']} (ignore_index): its mean divides by the kept "
            "targets of the whole batch, which a micro-batch cannot count",
        )


def _reduces_batch(attrs: dict[str, Any], first: TensorType) -> bool:
    """Whether a reduce's dims include dim 0, the batch."""
    return 0 in [d % max(first.rank, 1) for d in attrs["dims"]]


def _result_kind(
    i: int,
    row: Node,
    attrs: dict[str, Any],
    first: TensorType | None,
    old: TensorType,
    new: TensorType,
    operand_kinds: set[str],
    m: int,
    exact: bool,
) -> str:
    if MEAN in operand_kinds:
        return MEAN
    if row.op in (pcg.CrossEntropyOp.name, pcg.MseLossOp.name) and new.shape == old.shape:
        return MEAN  # a mean over dims including the batch (checked by _check_mixing)
    if row.op == pcg.ReduceOp.name and first is not None and _reduces_batch(attrs, first):
        return MEAN  # checked by _check_mixing; with one micro-batch every shape is kept, so
        # the dims decide (an RMS norm's mean over the hidden dim keeps the batch)
    batch_kept = new.rank >= 1 and new.shape[0] * m == old.shape[0] and new.shape[1:] == old.shape[1:]
    if exact and not batch_kept:
        raise _refuse(
            i,
            f"its result {list(old.shape)} becomes {list(new.shape)} for one micro-batch: a pipelined "
            "plan keeps the batch in dim 0 of every value computed from the inputs",
        )
    return BATCH


def _batch_shards(ops: Mapping[int, Node]) -> int:
    """The shard degree of dim 0 that every input has: micro-batch m is chunk m of each piece, so
    inputs cut differently would pair different samples."""
    first: tuple[int, Node] | None = None
    for i, row in ops.items():
        if row.op != pcg.InputOp.name:
            continue
        if first is None:
            first = (i, row)
            continue
        t, f = row.types[0], first[1].types[0]
        if t.shard[0] != f.shard[0]:
            raise PlanProblem(
                f"input '{dict(row.attrs)['key']}' has dim 0 in {t.shard[0]} shards but input "
                f"'{dict(first[1].attrs)['key']}' in {f.shard[0]}: micro-batches (chunk m of every piece) "
                "would pair different samples",
                i,
            )
    return 1 if first is None else first[1].types[0].shard[0]


def _check_outputs(
    ops: Mapping[int, Node],
    micro: dict[int, Micro],
    outputs: Sequence[Ref],
    kind: dict[Ref, str],
    shards: int,
) -> None:
    for i, ref in enumerate(outputs):
        got = kind.get(ref)
        if i == 0 and got != MEAN:
            raise PlanProblem(
                "the loss is not a mean over the batch: a pipelined plan averages micro-batch losses", OUTPUTS
            )
        if i > 0 and got != BATCH:
            raise PlanProblem(
                f"output {i} is not batched in dim 0: a pipelined plan concatenates its micro-batches",
                OUTPUTS,
            )
        t = _type(ops, micro, ref)
        if i > 0 and t.shard[0] != shards:
            raise PlanProblem(
                f"output {i} has dim 0 in {t.shard[0]} shards, the inputs in {shards}: its micro-batches "
                "would not come back in place",
                OUTPUTS,
            )


def _refuse(i: int, why: str) -> PlanProblem:
    return PlanProblem(f"cannot run in micro-batches: {why}", i, named=True)


__all__ = [
    "FUNCTION",
    "LINEAR_ON_MEANS",
    "OUTPUTS",
    "MicrobatchError",
    "PlanProblem",
    "check_pipeline",
    "check_stages",
    "graph_ops",
    "graph_plan_of",
    "intra_devices",
    "microbatch_module",
    "microbatch_types",
    "op_rows",
    "pipeline_of",
    "stage_of",
    "view_devices",
]
