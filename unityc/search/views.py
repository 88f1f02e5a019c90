"""Machine views as the search sees them: a start device and one linear stride per task dimension.

A task space has degrees (shard dims, sum, copy); its *big* dims are those of degree > 1. A
search view `View(start, strides)` puts task `c` on device `start + sum(c[i] * strides[i])`
over the big dims, devices numbered node by node. The search places ops on contiguous device
blocks (`Block`): within a block of n devices an op with D tasks gets a row-major layout of its
big dims in every order (which dim is innermost decides which collectives stay within a node),
at the block's start and, when D < n, at a few more D-aligned starts.

`to_attr` writes a view as a `#pcg.view`: strides that are whole nodes on a machine whose nodes
are alike become `inter` strides, the others `intra` (device offsets past a node's end continue
on the next node, see `Machine.global_device`).
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from unityc.cost.communication import Coord
from unityc.cost.pricing import type_info
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import GRAPH_PLAN_ATTRS
from unityc.dialects.view import MachineViewAttr
from unityc.graph import Graph, Node
from unityc.machine.spec import Machine


class Block(NamedTuple):
    """Devices start .. start + size - 1 (a tuple: cache keys hash it in C)."""

    start: int
    size: int


class View(NamedTuple):
    """A start device and one stride (in devices) per big task dimension, in task-space order."""

    start: int
    strides: tuple[int, ...]


def task_degrees(t: TensorType) -> tuple[int, ...]:
    """`t.task_degrees()`, cached (the search asks for it very often)."""
    return type_info(t).degrees


def big_degrees(degrees: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in degrees if d > 1)


@lru_cache(maxsize=50_000)
def views_in(degrees: tuple[int, ...], block: Block, max_starts: int = 2) -> tuple[View, ...]:
    """The views of a task space with these degrees inside `block` (none if it does not fit)."""
    big = big_degrees(degrees)
    tasks = math.prod(big)
    if tasks > block.size:
        return ()
    starts = [block.start + j * tasks for j in range(min(block.size // tasks, max_starts))]
    found: dict[View, None] = {}
    for order in itertools.permutations(range(len(big))):
        strides = [0] * len(big)
        step = 1
        for i in order:  # `order` lists the big dims from the innermost out
            strides[i] = step
            step *= big[i]
        for start in starts:
            found[View(start, tuple(strides))] = None
    return tuple(found)


def canonical_view(degrees: tuple[int, ...], start: int = 0) -> View:
    """Row-major from `start`, the last big dim innermost (how boundary tensors are placed)."""
    big = big_degrees(degrees)
    strides = [0] * len(big)
    step = 1
    for i in reversed(range(len(big))):
        strides[i] = step
        step *= big[i]
    return View(start, tuple(strides))


def last_device(degrees: tuple[int, ...], view: View) -> int:
    """The largest device `view_placement(degrees, view)` places a task on (strides are
    positive: the farthest task, every coordinate at its degree - 1), without placing the tasks
    (12,288 of them per op for GPT-3 on `dgx-a100:1536`)."""
    big = big_degrees(degrees)
    return view.start + sum((d - 1) * s for d, s in zip(big, view.strides, strict=True))


@lru_cache(maxsize=200_000)
def view_placement(degrees: tuple[int, ...], view: View) -> dict[Coord, int]:
    """The device of each task (piece) coordinate of a task space under `view`, in coordinate
    order (`view_array`'s devices, row-major: one sum per task in Python was most of pricing an
    edge at 12,288 tasks)."""
    coords = itertools.product(*(range(d) for d in degrees))
    return dict(zip(coords, view_array(degrees, view).ravel().tolist(), strict=True))


@lru_cache(maxsize=20_000)
def view_array(degrees: tuple[int, ...], view: View) -> np.ndarray:
    """`view_placement` as an array shaped by `degrees` (read-only): the device of every piece,
    built over arrays, not piece by piece."""
    big = [i for i, d in enumerate(degrees) if d > 1]
    out = np.full(degrees, view.start, dtype=np.int64)
    for i, stride in zip(big, view.strides, strict=True):
        shape = [1] * len(degrees)
        shape[i] = degrees[i]
        out = out + np.arange(degrees[i], dtype=np.int64).reshape(shape) * stride
    out.setflags(write=False)
    return out


def as_view(degrees: tuple[int, ...], where: dict[Coord, int] | np.ndarray) -> View | None:
    """The view placing the pieces of a task space exactly as `where` does (a placement, or its
    array shaped by `degrees`), if one exists."""
    if not isinstance(where, np.ndarray):
        coords = itertools.product(*(range(d) for d in degrees))
        where = np.array([where[c] for c in coords], dtype=np.int64).reshape(degrees)
    big = [i for i, d in enumerate(degrees) if d > 1]
    zero = tuple(0 for _ in degrees)
    start = int(where[zero])
    strides: list[int] = []
    for i in big:
        unit = tuple(1 if j == i else 0 for j in range(len(degrees)))
        strides.append(int(where[unit]) - start)
    if any(s < 1 for s in strides):
        return None
    view = View(start, tuple(strides))
    if not np.array_equal(view_array(degrees, view), where):
        return None
    if len(np.unique(where)) < where.size:
        return None
    return view


def uniform_node_size(machine: Machine) -> int | None:
    return machine.node_size


def to_attr(view: View, machine: Machine) -> MachineViewAttr:
    per_node = uniform_node_size(machine)
    strides: list[int] = []
    inter: list[bool] = []
    for s in view.strides:
        if per_node is not None and machine.num_nodes > 1 and s % per_node == 0:
            strides.append(s // per_node)
            inter.append(True)
        else:
            strides.append(s)
            inter.append(False)
    return MachineViewAttr(view.start, strides, inter)


def strip_views(graph: Graph) -> Graph:
    """A copy without per-op plans (machine views, stages, zero stages, recompute marks), the
    pipeline schedule of a pipelined plan, and dead nodes (what the search starts from)."""
    out = graph.copy()
    for nid, node in out.nodes.items():
        if node.plan:
            out.nodes[nid] = Node(node.op, node.operands, node.attrs, node.types, hint=node.hint)
    out.function_attrs = {k: v for k, v in out.function_attrs.items() if k not in GRAPH_PLAN_ATTRS}
    return out.prune()
