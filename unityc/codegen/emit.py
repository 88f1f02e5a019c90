"""Writes the SPMD training program of an analyzed plan (see `unityc/codegen/__init__.py`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.ir import Operation, SSAValue

from unityc.codegen.analysis import Analysis, CodegenError, Value
from unityc.codegen.collectives import parallel_stages
from unityc.codegen.kernels import KERNELS, Call, Tasks, literal, rank_test, torch_dtype_name
from unityc.codegen.memory import SOURCES, Region, core_recomputed, last_readers, regions
from unityc.cost.transfers import read_from
from unityc.dialects.literals import stored_once
from unityc.dialects.pcg_types import PcgOp, TensorType
from unityc.dialects.syntax import PACK_BYTES, packed_text
from unityc.runtime.packing import pack
from unityc.runtime.plan import Collective

INDENT = "    "


def short_type(t: TensorType) -> str:
    return str(t).removeprefix("!pcg.tensor<").removesuffix(">")


def layout_text(v: Value) -> str:
    t = v.type
    parts = [repr(t.shape), f'"{torch_dtype_name(t.element_type)}"', f"shard={t.shard!r}"]
    if t.sum_degree != 1:
        parts.append(f"sum={t.sum_degree}")
    if t.copy_degree != 1:
        parts.append(f"copy={t.copy_degree}")
    pieces = ", ".join(f"{r}: {c!r}" for r, c in sorted(v.held.items()))
    parts.append(f"pieces={{{pieces}}}")
    return f"Layout({', '.join(parts)})"


def collective_text(c: Collective) -> str:
    parts = [f'"{c.kind}"', f"ins={c.ins!r}", f"outs={c.outs!r}", f"shape={c.shape!r}"]
    if c.dtype != "float32":
        parts.append(f'dtype="{c.dtype}"')
    if c.kind in ("scatter", "gather", "reduce_scatter", "all_gather", "all_to_all") and c.dim:
        parts.append(f"dim={c.dim}")
    if c.kind == "all_to_all":
        parts.append(f"dst={c.dst}")
    return f"Collective({', '.join(parts)})"


class Writer:
    """Collects the forward's lines and the plan's tables while walking the ops once."""

    def __init__(self, a: Analysis):
        self.a = a
        self.world = a.world
        self.lines: list[str] = []
        self.groups: dict[tuple[int, ...], None] = {}
        self.weights: dict[str, str] = {}
        self.inputs: dict[str, str] = {}
        self.constants: dict[str, str] = {}
        self.packed: dict[str, str] = {}
        """Packed constant text -> the program's name for it (one per distinct value)."""
        self.tables: dict[str, tuple[int, ...]] = {}
        self.transfers = 0
        self.collectives = 0
        self.peers: set[int] = set()
        """The ranks the transfers and collectives written so far involve."""
        self.regions = 0
        self.dropping: dict[PcgOp, list[SSAValue]] = {}
        self.regathered: set[SSAValue] = set()
        """Sequence-parallel all-gathers whose readers keep the shard (`runtime.regather`)."""
        self.in_region = False
        self.core: set[PcgOp] = set()
        """Attentions that recompute only their core (`memory.core_recomputed`)."""

    # --- helpers ----------------------------------------------------------------------------

    def emit(self, text: str) -> None:
        self.lines.append(INDENT + text)

    def guarded(self, expr: str, ranks: Sequence[int], results: int = 1) -> str:
        """`expr` on `ranks` only; None (or a tuple of Nones) on the other ranks."""
        if len(ranks) == self.world:
            return expr
        none = "None" if results == 1 else "(" + ", ".join(["None"] * results) + ")"
        return f"{expr} if {rank_test(ranks)} else {none}"

    def where(self, v: Value) -> str:
        ranks = sorted(v.held)
        if len(ranks) == self.world:
            return "all ranks"
        return f"rank{'s' if len(ranks) > 1 else ''} " + ", ".join(map(str, ranks))

    def comment(self, op: PcgOp) -> None:
        operands = ", ".join(self.a.value(o).var for o in op.operands)
        if len(operands) > 60:
            operands = operands[:57].rsplit(", ", 1)[0] + ", ..."
        types = ", ".join(short_type(self.a.value(r).type) for r in op.results)
        self.emit(f"# {op.name}({operands}) -> {types} on {self.where(self.a.value(op.results[0]))}")

    # --- ops --------------------------------------------------------------------------------

    def op(self, op: PcgOp) -> None:
        if op.name in ("pcg.weight", "pcg.input", "pcg.constant"):
            self.source(op)
            return
        self.comment(op)
        if op.name == "parallel.sum_concat":
            self.sum_concat(op)
        elif op.name.startswith("parallel."):
            self.parallel(op)
        else:
            self.compute(op)

    def plan_sources(self, micro: Analysis) -> None:
        """PLAN's sources for a plan that runs its batch in micro-batches: this writer's weights
        and inputs (the whole batch's pieces: what the data and the reference read) and the
        constants of `micro`, the plan of one micro-batch (what every micro-batch's forward reads
        whole; a batch-sized splat holds one micro-batch's rows there, `microbatch_types`)."""
        for op in self.a.ops:
            if op.name in ("pcg.weight", "pcg.input"):
                self.source(op)
        constants = Writer(micro)
        for op in micro.ops:
            if op.name == "pcg.constant":
                constants.source(op)
        self.constants, self.packed = constants.constants, constants.packed

    def source(self, op: PcgOp) -> None:
        v = self.a.value(op.results[0])
        if op.name == "pcg.constant":
            value = op.properties["value"]
            text = None if stored_once(value) else packed_text(value) or packed_splat(value)
            if text is None:  # a splat stored once is its one value (`runtime.plan.Constant`)
                values = tuple(value.get_values())  # type: ignore[attr-defined]
                self.constants[v.var] = f"Constant({literal(values)}, {layout_text(v)})"
            else:
                name = self.packed.setdefault(text, f"PACKED_{len(self.packed)}")
                self.constants[v.var] = f"Constant((), {layout_text(v)}, packed={name})"
            key, table = v.var, "x"
        else:
            key = str(op.attrs()["key"])  # type: ignore[attr-defined]
            table = "w" if op.name == "pcg.weight" else "x"
            entries = self.weights if op.name == "pcg.weight" else self.inputs
            if key in entries:
                raise CodegenError(f"{op.name} '{key}' appears twice: a plan holds each source once", op)
            entries[key] = layout_text(v)
        read = f'{table}["{key}"]' if len(v.held) == self.world else f'{table}.get("{key}")'
        self.emit(f"{v.var} = {read}  # {short_type(v.type)} on {self.where(v)}")

    def operand(self, op: PcgOp, index: int, value: SSAValue, tasks: Tasks, layout: Any) -> str:
        """The operand as this rank's task reads it, moving pieces held elsewhere (p2p); a
        source's piece from this rank's own copy of it where it holds one (`read_from`)."""
        v = self.a.value(value)
        any_copy = isinstance(value.owner, Operation) and value.owner.name in SOURCES
        moves = []
        for rank, task in sorted(tasks.by_rank.items()):
            holder = read_from(v.where, v.held, tasks.form.coord(layout, task), rank, any_copy)
            if holder != rank:
                moves.append((holder, rank))
        return self.moved(v, moves, self.a.value(op.results[0]))

    def moved(self, v: Value, moves: list[tuple[int, int]], reader: Value) -> str:
        """`v` as `reader`'s tasks see it: pieces moved by (source, destination) pairs."""
        if not moves:
            return v.var
        name = f"{v.var}_to_{reader.var}"
        dtype = torch_dtype_name(v.dtype)
        self.emit(f'{name} = ctx.p2p({v.var}, {moves!r}, {v.type.piece_shape!r}, "{dtype}", grad={v.grad})')
        self.transfers += len(moves)
        self.peers.update(r for move in moves for r in move)
        return name

    def compute(self, op: PcgOp) -> None:
        form = op.parallel_form()  # type: ignore[attr-defined]
        result = self.a.value(op.results[0])
        by_rank = {result.where[form.coord(form.results[0], t)]: t for t in form.tasks()}
        tasks = Tasks(form, by_rank, self.world)
        typed = op.typed_operands()  # type: ignore[attr-defined]
        values = iter(op.operands)
        args: list[str | None] = []
        grads: list[bool] = []
        dtypes: list[str] = []
        for i, (t, layout) in enumerate(zip(typed, form.operands, strict=True)):
            if t is None:
                args.append(None)
                grads.append(False)
                dtypes.append("")
                continue
            value = next(values)
            args.append(self.operand(op, i, value, tasks, layout))
            grads.append(self.a.value(value).grad)
            dtypes.append(torch_dtype_name(self.a.value(value).dtype))
        if op in self.a.step_casts:  # a view of the weight's bf16 copy, made once per step
            args[0] = f"ctx.step_cast({args[0]})"
        results = [self.a.value(r) for r in op.results]
        call = Call(
            op.attrs(),
            args,
            list(typed),
            [r.type for r in results],
            tasks,
            result.var,
            self.groups,
            grads,
            dtypes,
            op in self.core,
        )  # type: ignore[attr-defined]
        if op.name == "pcg.gather":
            self.tables[result.var] = tuple(int(i) for i in call.attrs["indices"])
            expr = f'torch.index_select({args[0]}, {call.attrs["dim"]}, ctx.tables["{result.var}"])'
        elif type(op) in KERNELS:
            expr = KERNELS[type(op)](call)
        else:
            raise CodegenError(f"-t torch has no kernel for {op.name}", op)
        targets = ", ".join(r.var for r in results)
        line = f"{targets} = {self.guarded(expr, tasks.ranks, len(results))}"
        if not self.in_region and any(o in self.regathered for o in op.operands):
            self.emit("with ctx.regathering():  # keeps the sequence shard, gathered again in backward")
            line = INDENT + line
        self.emit(line)

    def parallel(self, op: PcgOp) -> None:
        (source,) = op.operands
        src, dst = self.a.value(source), self.a.value(op.results[0])
        try:
            stages = parallel_stages(
                op.name,
                op.attrs(),  # type: ignore[attr-defined]
                src.type,
                dst.type,
                src.where,
                dst.where,
                torch_dtype_name(src.dtype),
            )
        except ValueError as e:
            raise CodegenError(str(e), op) from None
        texts = []
        for stage in stages:
            for c in stage:
                self.groups.setdefault(c.ranks)
                self.peers.update(c.ranks)
            self.collectives += len(stage)
            inner = ", ".join(collective_text(c) for c in stage)
            texts.append(f"({inner},)")
        if not texts:
            self.emit(f"{dst.var} = {src.var}")
            return
        flags = f"grad={src.grad}"
        if not self.in_region and regathers(op.name, stages, src.grad):
            self.regathered.add(op.results[0])
            flags += f", regather=True, readers={sum(1 for _ in op.results[0].uses)}"
        call = f"ctx.parallel({src.var}, {', '.join(texts)}, {flags})"
        if len(call) + len(dst.var) + 7 > 110:
            stage_lines = ",\n".join(INDENT * 2 + t for t in texts)
            inner = INDENT * 2
            call = f"ctx.parallel(\n{inner}{src.var},\n{stage_lines},\n{inner}{flags},\n{INDENT})"
        self.emit(f"{dst.var} = {call}")

    def sum_concat(self, op: PcgOp) -> None:
        """Partial sums of a, then of b: each result piece is an operand piece, moved if it
        lives on another rank than the result piece."""
        a, b = (self.a.value(o) for o in op.operands)
        out = self.a.value(op.results[0])
        half = a.type.sum_degree
        moves: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])
        takes: tuple[list[int], list[int]] = ([], [])
        for coord, rank in sorted(out.where.items()):
            j = coord[-2]
            side = 0 if j < half else 1
            src = (a, b)[side].where[(*coord[:-2], j - side * half, coord[-1])]
            takes[side].append(rank)
            if src != rank:
                moves[side].append((src, rank))
        names = [self.moved(operand, moves[side], out) for side, operand in enumerate((a, b))]
        if not takes[1]:
            self.emit(f"{out.var} = {self.guarded(names[0], takes[0])}")
            return
        expr = f"{names[0]} if {rank_test(takes[0])} else {names[1]}" if takes[0] else names[1]
        self.emit(f"{out.var} = {self.guarded(expr, sorted(takes[0] + takes[1]))}")

    # --- memory levers ----------------------------------------------------------------------

    def drop(self, op: PcgOp, scope: set[SSAValue] | None = None) -> None:
        """Drops the gathered ZeRO-3 weights `op` reads last (in `scope`, if given)."""
        gone = [v for v in self.dropping.get(op, ()) if scope is None or v in scope]
        if gone:
            names = ", ".join(self.a.value(v).var for v in gone)
            self.emit(f"del {names}  # ZeRO-3: gathered again in backward")

    def region(self, region: Region, done: set[PcgOp]) -> None:
        """A run of recompute ops as one function under `torch.utils.checkpoint` (non-reentrant):
        its activations are made again in backward; what it reads from outside is its argument
        (an all-gather read only inside it runs inside it: `Region.gathers`)."""
        for v in region.inputs:  # sources read inside and outside come first
            owner = v.owner
            if isinstance(owner, PcgOp) and owner.name in SOURCES and owner not in done:
                self.op(owner)
                done.add(owner)
        self.regions += 1
        name = f"_recompute_{self.regions}"
        outer, self.lines = self.lines, []
        transfers = self.transfers
        local: set[SSAValue] = {
            r for op in (*region.sources, *region.gathers, *region.ops) for r in op.results
        }
        self.in_region = True
        for op in sorted((*region.sources, *region.gathers, *region.ops), key=self.a.ops.index):
            self.op(op)
            self.drop(op, local)
            done.add(op)
        self.in_region = False
        if self.transfers != transfers:
            raise CodegenError(
                "a recompute region reads pieces held on other ranks (implicit transfers): -t torch "
                "cannot run them again in backward; make the moves explicit parallel ops outside it",
                region.ops[0],
            )
        body, self.lines = self.lines, outer
        args = ", ".join(self.a.value(v).var for v in region.inputs)
        results = [self.a.value(v).var for v in region.outputs]
        packed = ", ".join(results) + ("," if len(results) == 1 else "")
        self.emit(f"def {name}({args}):")
        self.lines += [INDENT + line for line in body]
        self.emit(f"{INDENT}return ({packed})")
        self.emit(f"{packed} = checkpoint({name}{', ' if args else ''}{args}, use_reentrant=False)")
        for op in region.ops:
            self.drop(op, set(region.inputs))

    # --- the file ---------------------------------------------------------------------------

    def write(self, ops: Sequence[PcgOp], after: Callable[[PcgOp], None] | None = None) -> None:
        """Writes `ops` (the plan's, or one pipeline stage's) with their recompute regions and
        ZeRO-3 drops; `after(op)` runs after each op or region (its first op)."""
        owners = regions(self.a)
        self.core = core_recomputed(self.a)
        self.dropping = last_readers(self.a)
        chosen = set(ops)
        done: set[PcgOp] = {g for region in owners.values() for g in region.gathers}
        for op in ops:
            if op in done:
                continue
            region = owners.get(op)
            if region is None:
                self.op(op)
                self.drop(op)
                done.add(op)
            elif op.name not in SOURCES:  # a region's sources are read inside it
                if not {*region.ops, *region.gathers} <= chosen:
                    raise CodegenError(
                        "a run of recompute ops spans pipeline stages: -t torch recomputes each "
                        "stage's runs on their own (end the run at the stage's last op)",
                        region.ops[0],
                    )
                self.region(region, done)
            else:
                continue
            if after is not None:
                after(op)

    def forward(self) -> list[str]:
        self.write(self.a.ops)
        outputs = ", ".join(self.a.value(v).var for v in self.a.outputs)
        outputs += "," if len(self.a.outputs) == 1 else ""
        return [
            "def forward(ctx: rt.Context, w: dict[str, torch.Tensor], x: dict[str, torch.Tensor]) -> tuple:",
            f'{INDENT}"""This rank\'s pieces of the outputs (the loss first); None where it holds none."""',
            f"{INDENT}rank = ctx.rank",
            *self.lines,
            f"{INDENT}return ({outputs})",
        ]


def regathers(name: str, stages: Sequence[Sequence[Collective]], grad: bool) -> bool:
    """Whether the readers of parallel op `name`'s output keep this rank's input piece for
    backward and gather it again there (`runtime.regather`, issue 38 item 4): an all-gather
    run as one all-gather stage, whose input wants a gradient (`cost.backward.regathered` is
    the memory model's side)."""
    if name != "parallel.all_gather" or not grad or len(stages) != 1:
        return False
    return all(c.kind == "all_gather" for c in stages[0])


def packed_splat(value: Any) -> str | None:
    """A large splat constant's bytes packed (the IR prints it as one value, `packed_text` leaves
    it so): a padded image's zero rows (`search/padding.py`, 8 x 3 x 32 x 1024 for the paper
    U-Net) were 3.9 MB of program text as a tuple of values, and are a few hundred bytes packed."""
    shape = value.type.get_shape()
    step = value.get_element_type().compile_time_size
    count = math.prod(shape)
    raw = value.data.data
    if count * step <= PACK_BYTES or len(raw) != count * step:
        return None
    return pack(raw)
