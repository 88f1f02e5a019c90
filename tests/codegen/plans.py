"""Builds parallel plans from imported zoo graphs for the codegen tests.

`PlanBuilder` rebuilds a graph node by node with a `Strategy`: the strategy gives sources their
degrees, may reshard an op's operands or results (inserting parallel ops), and may pin views; an
op that does not accept its operands as they come is *repaired* (partial sums reduced, unsharded
operands replicated, sharded ones gathered) until the dialect's inference accepts it. Machine
views are then fitted so that each piece lives where the first task reading it runs (no implicit
transfers when that is expressible), falling back to the natural row-major view.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache

import torch
from xdsl.dialects.builtin import ModuleOp, StringAttr

from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.view import MachineViewAttr
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, Node, Ref, from_module, full_attrs, op_class, to_module
from unityc.interpreter import assemble, run_graph

Degrees = tuple[tuple[int, ...], int, int]  # shard, sum, copy


def retyped(t: TensorType, shard: Sequence[int] | None = None, copy: int = 1) -> TensorType:
    return TensorType(list(t.shape), t.element_type, list(shard or [1] * t.rank), 1, copy)


@dataclass
class Strategy:
    """How to parallelize; every hook is optional."""

    devices: int
    sources: Callable[[Node], tuple[Sequence[int] | None, int]] = lambda node: (None, 1)
    """(shard degrees, copy degree) of an input, weight or constant."""
    operands: Callable[[PlanBuilder, Node, list[Ref | None]], list[Ref | None]] = lambda b, n, ops: ops
    results: Callable[[PlanBuilder, Node, tuple[Ref, ...]], tuple[Ref, ...]] = lambda b, n, rs: rs
    view: Callable[[PlanBuilder, Node, TensorType], MachineViewAttr | None] = lambda b, node, t: None
    """A view to pin (else fitted)."""


@dataclass
class PlanBuilder:
    base: Graph
    strategy: Strategy
    machine: str
    g: Graph = field(init=False)
    mapped: dict[Ref, Ref] = field(default_factory=dict)
    pinned: dict[int, MachineViewAttr] = field(default_factory=dict)

    def __post_init__(self) -> None:
        attrs = dict(self.base.module_attrs)
        attrs["unityc.machine"] = StringAttr(self.machine)
        self.g = Graph(module_attrs=attrs)

    def type_of(self, ref: Ref) -> TensorType:
        return self.g.type_of(ref)

    # --- parallel ops -----------------------------------------------------------------------

    def par(self, op: str, ref: Ref, **attrs: int) -> Ref:
        return self.g.add(f"parallel.{op}", [ref], **attrs)[0]

    def reshard(self, ref: Ref, shard: Sequence[int] | None = None, sum: int = 1, copy: int = 1) -> Ref:
        """Parallel ops taking `ref` to the given degrees: reduce partial sums (all_reduce
        when copies are wanted), combine shards (all_gather likewise), partition, replicate."""
        t = self.type_of(ref)
        shard = list(shard or [1] * t.rank)
        if t.sum_degree > sum:
            n = t.sum_degree // sum
            wants_copies = copy % (t.copy_degree * n) == 0
            ref = self.par("all_reduce" if wants_copies else "reduce", ref, degree=n)
        for d in range(t.rank):
            t = self.type_of(ref)
            if t.shard[d] > shard[d]:
                n = t.shard[d] // shard[d]
                wants_copies = copy % (t.copy_degree * n) == 0
                ref = self.par("all_gather" if wants_copies else "combine", ref, dim=d, degree=n)
        for d in range(t.rank):
            t = self.type_of(ref)
            if t.shard[d] < shard[d]:
                ref = self.par("partition", ref, dim=d, degree=shard[d] // t.shard[d])
        t = self.type_of(ref)
        if t.copy_degree < copy:
            ref = self.par("replicate", ref, degree=copy // t.copy_degree)
        t = self.type_of(ref)
        if (list(t.shard), t.sum_degree, t.copy_degree) != (shard, sum, copy):
            raise ValueError(f"cannot reshard {t} to shard {shard}, sum {sum}, copy {copy}")
        return ref

    # --- rebuilding ---------------------------------------------------------------------------

    def build(self) -> Graph:
        for nid in self.base.topological():
            node = self.base.nodes[nid]
            if node.is_source:
                shard, copy = self.strategy.sources(node)
                new = Node(node.op, (), node.attrs, (retyped(node.types[0], shard, copy),), hint=node.hint)
                results = self.g.add_node(new)
            else:
                operands = [None if r is None else self.mapped[r] for r in node.operands]
                operands = self.strategy.operands(self, node, operands)
                results = self.add_repaired(node, operands)
            view = self.strategy.view(self, node, self.type_of(results[0]))
            if view is not None:
                self.pinned[results[0][0]] = view
            if not node.is_source:
                results = self.strategy.results(self, node, results)
            for i, ref in enumerate(results):
                self.mapped[(nid, i)] = ref
        self.g.outputs = tuple(self.mapped[r] for r in self.base.outputs)
        fit_views(self.g, self.pinned)
        return self.g

    def add_repaired(self, node: Node, operands: list[Ref | None]) -> tuple[Ref, ...]:
        attrs = dict(node.attrs)
        for repair in (_as_is, _reduce_sums, _replicate_unsharded, _gather_all):
            candidate = repair(self, operands)
            try:
                refs = self.g.add(node.op, candidate, **attrs)
            except FormError as e:
                error = e
                continue
            for ref, hint in zip(refs, [node.hint] * len(refs), strict=True):
                old = self.g.nodes[ref[0]]
                self.g.nodes[ref[0]] = Node(old.op, old.operands, old.attrs, old.types, old.plan, hint)
            return refs
        raise error


def _as_is(b: PlanBuilder, operands: list[Ref | None]) -> list[Ref | None]:
    return operands


def _reduce_sums(b: PlanBuilder, operands: list[Ref | None]) -> list[Ref | None]:
    """Partial sums reduced into copies (the op is not linear in them)."""
    out = []
    for r in operands:
        t = None if r is None else b.type_of(r)
        if r is not None and t is not None and t.sum_degree > 1:
            r = b.reshard(r, t.shard, 1, t.copy_degree * t.sum_degree)
        out.append(r)
    return out


def _parallelism(t: TensorType) -> int:
    return math.prod(t.shard) * t.sum_degree * t.copy_degree


def _replicate_unsharded(b: PlanBuilder, operands: list[Ref | None]) -> list[Ref | None]:
    """Unsharded operands copied once per task of the widest other operand."""
    operands = _reduce_sums(b, operands)
    widest = max((_parallelism(b.type_of(r)) for r in operands if r is not None), default=1)
    out = []
    for r in operands:
        t = None if r is None else b.type_of(r)
        if r is not None and t is not None and math.prod(t.shard) == 1 and t.copy_degree < widest:
            r = b.reshard(r, None, 1, widest)
        out.append(r)
    return out


def _gather_all(b: PlanBuilder, operands: list[Ref | None]) -> list[Ref | None]:
    """Every operand whole, each copied as many times as the widest operand has tasks."""
    widest = max((_parallelism(b.type_of(r)) for r in operands if r is not None), default=1)
    return [None if r is None else b.reshard(r, None, 1, widest) for r in operands]


# --- machine views ---------------------------------------------------------------------------


def natural_view(t: TensorType, start: int = 0) -> MachineViewAttr:
    """Tasks in row-major order over the task dims of degree > 1, from device `start`."""
    dims = [d for d in t.task_degrees() if d > 1]
    return MachineViewAttr(start, [math.prod(dims[i + 1 :]) for i in range(len(dims))])


def _devices(node: Node) -> dict[tuple[int, ...], int]:
    """Device of each result piece (single node machine: offsets are devices)."""
    t = node.types[0]
    view = node.view
    assert view is not None
    big = [i for i, d in enumerate(t.task_degrees()) if d > 1]
    out = {}
    for c in itertools.product(*(range(d) for d in t.task_degrees())):
        out[c] = view.start + view.placement([c[i] for i in big])[1]
    return out


def _wanted(g: Graph, user: Node, index: int) -> dict[tuple[int, ...], int] | None:
    """Where the user's tasks want the pieces of its operand `index` (None for parallel ops)."""
    if user.op.startswith("parallel."):
        return None
    operand_types = [None if r is None else g.type_of(r) for r in user.operands]
    form, _ = op_class(user.op).infer(operand_types, full_attrs(user.op, user.attrs))
    result_devices = _devices(user)
    layout = form.operands[index]
    assert layout is not None
    return {
        form.coord(layout, task): result_devices[form.coord(form.results[0], task)] for task in form.tasks()
    }


def _as_view(t: TensorType, wanted: dict[tuple[int, ...], int]) -> MachineViewAttr | None:
    big = [i for i, d in enumerate(t.task_degrees()) if d > 1]
    origin = (0,) * len(t.task_degrees())
    start = wanted[origin]
    strides = []
    for i in big:
        step = tuple(1 if j == i else 0 for j in range(len(origin)))
        strides.append(wanted[step] - start)
    if any(s < 1 for s in strides):
        return None
    for c, device in wanted.items():
        if start + sum(c[i] * s for i, s in zip(big, strides, strict=True)) != device:
            return None
    view = MachineViewAttr(start, strides)
    return None if view.problem_for(t.task_degrees()) else view


def fit_views(g: Graph, pinned: dict[int, MachineViewAttr]) -> None:
    """Views in reverse topological order: pinned ones, else where the first user reads."""
    users = g.users()
    for nid in reversed(g.topological()):
        node = g.nodes[nid]
        view = pinned.get(nid)
        if view is None:
            for user in sorted(users[nid]):
                index = next(i for i, r in enumerate(g.nodes[user].operands) if r is not None and r[0] == nid)
                wanted = _wanted(g, g.nodes[user], index)
                if wanted is not None and (view := _as_view(node.types[0], wanted)) is not None:
                    break
        g.with_view(nid, view or natural_view(node.types[0]))


# --- checking -------------------------------------------------------------------------------


@cache
def base_graph(model: str, **settings: str) -> Graph:
    """The imported small zoo model, changed by `settings` (config keys; `batch`); shared:
    plans never modify it."""
    batch = int(settings.pop("batch")) if "batch" in settings else None
    spec = ModelSpec(model, "small", batch, tuple(settings.items()))
    return from_module(import_model(spec))


def interpret_equal(base: Graph, plan: Graph, seed: int = 0) -> None:
    """The plan's outputs, reassembled, equal the base graph's on the same seeded values."""
    expected, _ = run_graph(to_module(base), seed, float_dtype=torch.float64)
    got, _ = run_graph(to_module(plan), seed, float_dtype=torch.float64)
    for i, (e, p) in enumerate(zip(expected, got, strict=True)):
        a, b = assemble(p, f"output {i}"), assemble(e)
        if not torch.allclose(a, b, rtol=1e-9, atol=1e-12):
            raise AssertionError(f"output {i} differs: max error {(a - b).abs().max().item():.3e}")


def plan_module(base: Graph, strategy: Strategy, machine: str) -> ModuleOp:
    plan = PlanBuilder(base, strategy, machine).build()
    interpret_equal(base, plan)
    return to_module(plan)
