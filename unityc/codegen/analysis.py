"""What codegen knows about a plan before writing a line: which rank holds each piece, which
values get gradients, and whether the plan can run at all (located errors otherwise).

Placement follows the cost model exactly: a task (= a result piece) runs on the device its op's
machine view gives its coordinate; ranks are the machine's global device indices.
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from unityc.cost.pricing import placement
from unityc.dialects.container import check_loss, graph_function
from unityc.dialects.pcg_types import FLOAT_TYPES, PcgOp, TensorType
from unityc.dialects.plan import op_plan
from unityc.dialects.precision import BF16_MIXED, FP32, autocast_dtype, precision_of
from unityc.machine import Machine, MachineSpecError, load_machine

Coord = tuple[int, ...]

MACHINE_ATTRIBUTE = "unityc.machine"
MODEL_ATTRIBUTE = "unityc.model"
PIPELINE_OPS = (
    "parallel.pipeline/batch (micro-batches inside the graph) are not supported by -t torch: pipeline a plan "
    "by stages instead (stage = k on every op, unityc.schedule and unityc.microbatches on the graph function)"
)
UNSUPPORTED = {"parallel.pipeline": PIPELINE_OPS, "parallel.batch": PIPELINE_OPS}
RESERVED = {"ctx", "rank", "w", "x", "rt", "torch", "F", "forward", "PLAN", "main"}


class CodegenError(Exception):
    """A plan codegen cannot turn into a program; `op` (if any) is where the problem is."""

    def __init__(self, message: str, op: Operation | None = None):
        super().__init__(message)
        self.op = op


@dataclass
class Value:
    """One SSA value: its Python name, type, and the piece each rank holds."""

    var: str
    type: TensorType
    where: dict[Coord, int]
    held: dict[int, Coord]
    grad: bool = False
    """Whether it carries a gradient (depends on a weight and the loss depends on it)."""
    dtype: str = ""
    """The element type (`f32`, `bf16`, ...) the program holds it in: its type's, or under
    bf16-mixed the one autocast gives it (`dialects/precision.py`); collectives move it so."""


@dataclass
class Analysis:
    machine_name: str
    machine: Machine
    world: int
    model: DictionaryAttr
    ops: list[PcgOp]
    outputs: list[SSAValue]
    values: dict[SSAValue, Value] = field(default_factory=dict)
    precision: str = FP32
    """The graph function's `unityc.precision`: the program runs bf16-mixed under autocast."""
    step_casts: set[PcgOp] = field(default_factory=set)
    """bf16-mixed: the views of a weight taken of its bf16 copy made once per step
    (`runtime.precision.step_cast`, `step_cast_views`)."""

    def value(self, v: SSAValue) -> Value:
        return self.values[v]


def _machine(module: ModuleOp, override: str | None) -> tuple[str, Machine]:
    name = override
    if name is None:
        attr = module.attributes.get(MACHINE_ATTRIBUTE)
        if attr is None:
            raise CodegenError(
                "the plan does not say which machine it was made for: add the module attribute "
                f'{MACHINE_ATTRIBUTE} = "cpu:2" '
                "(the search writes it) or pass -t 'torch{machine=\"cpu:2\"}'",
                module,
            )
        if not isinstance(attr, StringAttr):
            raise CodegenError(f'{MACHINE_ATTRIBUTE} must be a string such as "cpu:2", got {attr}', module)
        name = attr.data
    try:
        return name, load_machine(name)
    except (MachineSpecError, ValueError) as e:
        raise CodegenError(str(e), module) from None


def analyze(module: ModuleOp, machine_override: str | None = None) -> Analysis:
    """Checks the plan and places every piece; raises CodegenError at the first problem."""
    model = module.attributes.get(MODEL_ATTRIBUTE)
    if not isinstance(model, DictionaryAttr):
        what = f"no {MODEL_ATTRIBUTE} attribute" if model is None else f"a {MODEL_ATTRIBUTE} of {model}"
        raise CodegenError(
            f"the plan has {what}: codegen needs the model spec (a dictionary the importer records) "
            "to load weights and data and to rebuild the reference for --check",
            module,
        )
    machine_name, machine = _machine(module, machine_override)
    fn = graph_function(module)
    body = fn.body.block
    ops: list[PcgOp] = []
    outputs: list[SSAValue] = []
    for op in body.ops:
        if isinstance(op, func.ReturnOp):
            outputs = list(op.operands)
            continue
        if not isinstance(op, PcgOp):
            raise CodegenError(f"'{op.name}' is not a pcg or parallel op", op)
        ops.append(op)
    a = Analysis(machine_name, machine, machine.num_devices, model, ops, outputs, precision=precision_of(fn))
    names: set[str] = set()
    for op in ops:
        _check_op(op)
        view = op_plan(op).view
        assert view is not None
        t0 = op.results[0].type
        assert isinstance(t0, TensorType)
        try:
            where = placement(t0, view, machine)
        except ValueError as e:
            raise CodegenError(f"{op.name}: its machine view does not fit {machine_name}: {e}", op) from None
        held = {device: coord for coord, device in where.items()}
        for r in op.results:
            assert isinstance(r.type, TensorType)
            a.values[r] = Value(_unique(_python_name(r, op, a), names), r.type, where, held)
    check_loss(fn)
    _mark_gradients(a)
    _run_dtypes(a)
    _step_cast_views(a)
    return a


WEIGHT_VIEWS = ("pcg.transpose", "pcg.reshape")
"""Ops the program runs as views of their operand (`cost.memory.WEIGHT_VIEWS`)."""


def _step_cast_views(a: Analysis) -> None:
    """Under bf16-mixed, a view of a weight (GPT-2's transposed Conv1D weights) read, through
    further views, only by ops autocast runs in bf16 (matmuls, attention) is taken of the
    weight's bf16 copy, made once per step and shared by the micro-batches as autocast shares a
    weight's own cast (`runtime.precision.step_cast`); autocast would cast the view on every
    forward. The view and the views of it then hold bf16. The memory model counts that copy once
    per step (`cost.memory.step_weight_copy`)."""
    if a.precision != BF16_MIXED:
        return
    for op in a.ops:
        source = op.operands[0].owner if op.name in WEIGHT_VIEWS else None
        if isinstance(source, PcgOp) and source.name == "pcg.weight" and read_in_bf16(a, op.results[0]):
            a.step_casts.add(op)
            _hold_bf16(a, op.results[0])


def read_in_bf16(a: Analysis, value: SSAValue) -> bool:
    """Whether every reader of `value`, through views, is an op that autocast runs in bf16."""
    if value in a.outputs or not value.uses:
        return False
    for use in value.uses:
        reader = use.operation
        if not isinstance(reader, PcgOp):
            return False
        if reader.name in WEIGHT_VIEWS:
            if not read_in_bf16(a, reader.results[0]):
                return False
        elif type(reader).AUTOCAST != "bf16" or a.values[reader.results[0]].dtype != "bf16":
            return False
    return True


def _hold_bf16(a: Analysis, value: SSAValue) -> None:
    a.values[value].dtype = "bf16"
    for use in value.uses:
        if use.operation.name in WEIGHT_VIEWS:
            _hold_bf16(a, use.operation.results[0])


def _run_dtypes(a: Analysis) -> None:
    """Each value's element type in the program (see `Value.dtype`)."""
    mixed = a.precision == BF16_MIXED
    for op in a.ops:
        rule = type(op).AUTOCAST if mixed else "declared"
        operands = [a.values[o].dtype for o in op.operands]
        for r in op.results:
            v = a.values[r]
            v.dtype = autocast_dtype(rule, operands, str(v.type.element_type))


def _check_op(op: PcgOp) -> None:
    if op.name in UNSUPPORTED:
        raise CodegenError(UNSUPPORTED[op.name], op)
    try:
        op.verify()
    except VerifyException as e:
        raise CodegenError(f"{op.name}: {e}", op) from None
    if op_plan(op).view is None:
        raise CodegenError(
            f"{op.name} has no machine view: every op of a plan needs one (#pcg.view) to say which "
            "ranks run its tasks",
            op,
        )


def _mark_gradients(a: Analysis) -> None:
    """Values that depend on a trained (not `frozen`) weight and that the loss depends on, as
    the cost model marks them: exactly these move gradients in backward."""
    requires: set[SSAValue] = set()
    for op in a.ops:
        if (op.name == "pcg.weight" and not op.attrs()["frozen"]) or (  # type: ignore[attr-defined]
            op.name not in ("pcg.input", "pcg.constant") and set(op.operands) & requires
        ):
            requires.update(r for r in op.results if getattr(r.type, "element_type", None) in FLOAT_TYPES)
    gets: set[SSAValue] = {a.outputs[0]} & requires
    for op in reversed(a.ops):
        if any(r in gets for r in op.results):
            gets.update(o for o in op.operands if o in requires)
    for v in gets:
        a.values[v].grad = True


def _python_name(r: SSAValue, op: Operation, a: Analysis) -> str:
    """The SSA name; else a weight's or input's key; else the first operand's name and the op."""
    hint = r.name_hint or ""
    short = op.name.split(".", 1)[1]
    if not hint and op.name in ("pcg.weight", "pcg.input"):
        hint = str(op.attrs()["key"])  # type: ignore[attr-defined]
    elif not hint and op.operands and op.operands[0] in a.values and len(a.values[op.operands[0]].var) <= 16:
        hint = f"{a.values[op.operands[0]].var}_{short}"
    elif not hint:
        hint = short
    text = re.sub(r"\W", "_", hint).strip("_") or "v"
    return f"v{text}" if text[0].isdigit() else text


def _unique(name: str, taken: set[str]) -> str:
    candidate = name
    n = 1
    while (
        candidate in taken
        or keyword.iskeyword(candidate)
        or candidate in RESERVED
        or hasattr(builtins, candidate)
    ):
        candidate = f"{name}_{n}"
        n += 1
    taken.add(candidate)
    return candidate


LOOKUPS = ("pcg.embedding", "pcg.embedding_bag")
"""Ops whose operand 0 holds row indices of operand 1 (a vocabulary)."""


def index_bounds(a: Analysis) -> dict[str, int]:
    """Input key -> how many rows the embedding it indexes has (the exclusive bound of its
    values), for inputs read, through parallel ops only, as an embedding's indices: the program
    checks every `--data` batch against it."""
    bounds: dict[str, int] = {}
    for op in a.ops:
        if op.name not in LOOKUPS:
            continue
        rows = a.value(op.operands[1]).type.shape[0]
        source = op.operands[0].owner
        while isinstance(source, Operation) and source.name.startswith("parallel."):
            source = source.operands[0].owner
        if not isinstance(source, PcgOp) or source.name != "pcg.input":
            continue
        key = str(source.attrs()["key"])
        bounds[key] = min(bounds.get(key, rows), rows)
    return bounds
