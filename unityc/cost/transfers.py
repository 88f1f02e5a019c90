"""Where the pieces of a tensor live and what moving them costs: placements (`Placed`), the
per-task grids of a form, the p2p transfers of operand pieces an op reads from elsewhere
(`tasks_and_transfers`, over arrays with the task loop as its definition) and their phase, the
mapping DP's edge price (`transfers_phase`) and the per-machine link arrays."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from unityc.cost.communication import Coord, collective_time
from unityc.cost.pieces import _piece
from unityc.cost.schedule import Comm
from unityc.dialects.forms import Form, FormLayout
from unityc.dialects.pcg_types import TensorType
from unityc.machine.spec import Machine

Placement = Mapping[Coord, int]
"""The device of each piece of a tensor, by coordinate."""


class Placed(dict[Coord, int]):
    """A placement known by its array of devices (`roles.device_array`), for the estimate by
    roles (`cost/roles.py`): it holds, and iterates over, only the pieces on representative
    devices; looking up any other piece gives its device from the array. The functions below
    then price the tasks, groups and copies of the representatives alone."""

    def __init__(self, array: np.ndarray, rep_mask: np.ndarray):
        super().__init__()
        self.array = array
        self.rep_mask = rep_mask
        on_reps = rep_mask[array]
        coords = map(tuple, np.argwhere(on_reps).tolist())  # row-major, as `array[on_reps]`
        self.update(zip(coords, array[on_reps].tolist(), strict=True))

    def __missing__(self, coord: Coord) -> int:
        return int(self.array[coord])

    def line(self, key: Coord) -> Sequence[int]:
        """The devices of the pieces `key + (j,)` (a piece's copies), as a `range` when evenly
        spaced (a collective over it is then priced once, `Machine.slowest_link`)."""
        row = self.array[key]
        if len(row) > 2:
            steps = np.diff(row)
            if steps[0] > 0 and bool((steps == steps[0]).all()):
                return range(int(row[0]), int(row[-1]) + 1, int(steps[0]))
        return tuple(int(d) for d in row)


def form_grid(form: Form) -> dict[str, np.ndarray]:
    """Each factor's index over the task grid (factors in task order)."""
    degrees = [d for _, d in form.factors]
    out = {}
    for k, (name, d) in enumerate(form.factors):
        shape = [1] * len(degrees)
        shape[k] = d
        out[name] = np.broadcast_to(np.arange(d).reshape(shape), degrees)
    return out


def form_coords(form: Form, layout: FormLayout, grid: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """`Form.coord` over the whole task grid: one index array per axis of `layout`."""
    degrees = dict(form.factors)
    shape = tuple(d for _, d in form.factors)
    out = []
    for axis in layout.axes():
        index = np.zeros(shape, dtype=np.int64)
        for f in axis:
            index = index * degrees[f] + grid[f]
        out.append(index)
    return tuple(out)


def as_array(where: Placement | np.ndarray, degrees: Sequence[int]) -> np.ndarray:
    """A whole placement (every piece, in coordinate order, as `placement` builds it) as an
    array shaped by the task degrees (an array of devices in coordinate order, reshaped)."""
    if isinstance(where, np.ndarray):
        return where.reshape(tuple(degrees))
    if isinstance(where, Placed):
        return where.array
    return np.fromiter(where.values(), dtype=np.int64, count=len(where)).reshape(degrees)


def _grid_array(where: Placement | np.ndarray, degrees: Sequence[int]) -> np.ndarray | None:
    """The devices of a placement's pieces as an array shaped by `degrees`, where the placement
    is laid out so: a `Placed` or an array of that many pieces, or a whole placement (a dict
    from `placement`, in coordinate order, from the first coordinate to `degrees` - 1); None for
    any other (priced piece by piece)."""
    shape = tuple(degrees)
    if isinstance(where, Placed):
        return where.array if where.array.shape == shape else None
    if isinstance(where, np.ndarray):
        return where.reshape(shape) if where.size == math.prod(shape) else None
    if not isinstance(where, dict) or not where or len(where) != math.prod(shape):
        return None
    if next(iter(where)) != (0,) * len(shape) or next(reversed(where)) != tuple(d - 1 for d in shape):
        return None
    return as_array(where, shape)


def per_device(devices: np.ndarray) -> dict[int, int]:
    """How many times each device occurs, in order of first occurrence (as counting them one by
    one into a dict would give)."""
    found, first, counts = np.unique(devices, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    return dict(zip(found[order].tolist(), counts[order].tolist(), strict=True))


def _first_of_each(values: np.ndarray) -> list[int]:
    """The position of the first occurrence of each distinct value, in order."""
    _, first = np.unique(values, return_index=True)
    return sorted(first.tolist())


def read_from(where: Placement, held: Mapping[int, Coord], coord: Coord, device: int, any_copy: bool) -> int:
    """The device a task on `device` reads piece `coord` of a value placed at `where` from:
    with `any_copy` (the value is a source: its copies hold the same data at all times, see
    `SOURCE_OPS`), its own device where that holds a copy of the piece (the same coordinate but
    for the copy index, the last; `held`: each device's piece), else the piece's holder. Its
    gradient then stays in the local copy, and the copy group's all-reduce sums it the same."""
    source = where[coord]
    if any_copy and source != device:
        mine = held.get(device)
        if mine is not None and mine[:-1] == coord[:-1]:
            return device
    return source


def read_from_arrays(source_at: np.ndarray, coords: tuple[np.ndarray, ...], mine: np.ndarray) -> np.ndarray:
    """`read_from` with `any_copy` for every task at once: `source_at` the devices of a
    source's pieces (shaped by its degrees, a device holding at most one piece), `coords` the
    piece each task reads, `mine` each task's device (shaped like `coords`' arrays)."""
    theirs = source_at[coords]
    if source_at.shape[-1] < 2:  # one copy: nothing else to read
        return theirs
    rows = source_at.reshape(-1, source_at.shape[-1])
    top = int(max(rows.max(), mine.max())) + 1
    held = np.full(top, -1, dtype=np.int64)  # each device's piece, its copy index dropped
    held[rows] = np.arange(rows.shape[0], dtype=np.int64)[:, None]
    piece = np.ravel_multi_index(coords[:-1], source_at.shape[:-1]) if len(coords) > 1 else 0
    return np.where(held[mine] == piece, mine, theirs)


def _aligned(form: Form, where: Placement, operand_where: Sequence[Placement | None]) -> bool:
    """Whether every task finds every operand piece it reads on its own device (nothing to
    move), checked over all tasks at once."""
    if isinstance(where, Placed) or len(where) < 64:
        return False
    grid = form_grid(form)
    mine = as_array(where, form.degrees_of_result())[form_coords(form, form.results[0], grid)]
    for layout, source in zip(form.operands, operand_where, strict=True):
        if layout is None or source is None:
            continue
        shard, total, copies = form.degrees_of(layout)
        if len(source) != math.prod(shard) * total * copies:
            return False
        theirs = as_array(source, (*shard, total, copies))[form_coords(form, layout, grid)]
        if not np.array_equal(mine, theirs):
            return False
    return True


def _tasks(form: Form, where: Placement) -> Iterator[dict[str, int]]:
    """The tasks to price: all, or those of the pieces a `Placed` holds."""
    if not isinstance(where, Placed):
        return form.tasks()
    return (form.task_of(form.results[0], c) for c in where)


def phase(comms: Sequence[Comm]) -> float:
    """How long a set of collectives takes alone (those sharing a device serialize)."""
    if sum(len(c.devices) for c in comms) > 256:  # over an array: each device's sum in the same order
        members = [np.asarray(c.devices, dtype=np.int64) for c in comms]
        weights = [np.full(len(m), c.seconds) for m, c in zip(members, comms, strict=True)]
        return float(np.bincount(np.concatenate(members), weights=np.concatenate(weights)).max())
    per: dict[int, float] = defaultdict(float)
    for c in comms:
        for d in c.devices:
            per[d] += c.seconds
    return max(per.values(), default=0.0)


def tasks_and_transfers(
    form: Form,
    where: Placement,
    operand_types: Sequence[TensorType | None],
    operand_keys: Sequence[Any],
    operand_where: Sequence[Placement | None],
    grads: Sequence[bool],
    machine: Machine,
    any_copy: Sequence[bool] | None = None,
) -> tuple[dict[int, int], list[Comm], list[Comm]]:
    """Tasks per device, and the p2p transfers of operand pieces that live elsewhere (each piece
    sent once per device; gradients return the same way in backward). `operand_keys` name the
    values (an operand read twice is sent once); an operand whose placement is None is not
    considered (the search prices operands one at a time). `any_copy`: per operand, whether a
    task may read any copy of its piece (a source: `read_from`); none by default."""
    if all(w is None for w in operand_where) or _aligned(form, where, operand_where):
        # nothing to move: each task makes one piece
        return per_device(np.fromiter(where.values(), dtype=np.int64, count=len(where))), [], []
    copies = [False] * len(form.operands) if any_copy is None else list(any_copy)
    over_arrays = _array_transfers(
        form, where, operand_types, operand_keys, operand_where, grads, machine, copies
    )
    if over_arrays is not None:
        return over_arrays
    return _loop_transfers(form, where, operand_types, operand_keys, operand_where, grads, machine, copies)


def _loop_transfers(
    form: Form,
    where: Placement,
    operand_types: Sequence[TensorType | None],
    operand_keys: Sequence[Any],
    operand_where: Sequence[Placement | None],
    grads: Sequence[bool],
    machine: Machine,
    any_copy: Sequence[bool],
) -> tuple[dict[int, int], list[Comm], list[Comm]]:
    """`tasks_and_transfers` task by task: the definition `_array_transfers` computes over
    arrays, and what prices placements not laid out as arrays."""
    tasks: dict[int, int] = defaultdict(int)
    fwd: list[Comm] = []
    bwd: list[Comm] = []
    sent: set[tuple[Any, Coord, int]] = set()
    held = [
        {d: c for c, d in w.items()} if w is not None and copy else {}
        for w, copy in zip(operand_where, any_copy, strict=True)
    ]
    for task in _tasks(form, where):
        device = where[form.coord(form.results[0], task)]
        tasks[device] += 1
        for layout, t, key, source_where, wants, copy, on in zip(
            form.operands, operand_types, operand_keys, operand_where, grads, any_copy, held, strict=True
        ):
            if layout is None or t is None or source_where is None:
                continue
            coord = form.coord(layout, task)
            source = read_from(source_where, on, coord, device, copy)
            if source == device or (key, coord, device) in sent:
                continue
            sent.add((key, coord, device))
            nbytes = _piece(t, False).nbytes
            seconds = collective_time("p2p", nbytes, (source, device), machine)
            fwd.append(Comm((source, device), seconds, nbytes, transfer=True))
            if wants:
                bwd.append(Comm((device, source), seconds, nbytes, transfer=True))
    return tasks, fwd, bwd


def _array_transfers(
    form: Form,
    where: Placement,
    operand_types: Sequence[TensorType | None],
    operand_keys: Sequence[Any],
    operand_where: Sequence[Placement | None],
    grads: Sequence[bool],
    machine: Machine,
    any_copy: Sequence[bool],
) -> tuple[dict[int, int], list[Comm], list[Comm]] | None:
    """`_loop_transfers` over arrays of all tasks at once, the same to the last bit: tasks in
    the loop's order (every task in task order; for a `Placed`, those of the pieces on
    representatives, in coordinate order), a transfer for each operand piece on another device
    than its task's, the first of each (value key, piece, device) kept, in (task, operand)
    order, each priced as `collective_time`'s p2p; a `Comm` only for the pieces that move. None
    where a placement is not laid out as the form reads it (the loop prices it)."""
    result = form.degrees_of_result()
    mine_at = _grid_array(where, result)
    if mine_at is None:
        return None
    grid = form_grid(form)
    res = form_coords(form, form.results[0], grid)
    mine = mine_at[res].ravel()
    seq: np.ndarray | None = None  # the tasks priced, in order (None: all, in task order)
    if isinstance(where, Placed):
        pieces = np.ravel_multi_index(res, result).ravel()  # type: ignore[arg-type]
        if pieces.size != mine_at.size or np.bincount(pieces, minlength=pieces.size).max() != 1:
            return None  # not one result piece per task
        task_at = np.empty_like(pieces)
        task_at[pieces] = np.arange(pieces.size)
        seq = task_at[where.rep_mask[mine_at.ravel()]]
    dev = mine if seq is None else mine[seq]
    tasks = per_device(dev)
    groups: dict[Any, list[int]] = {}
    degrees_of: dict[int, tuple[int, ...]] = {}
    moves: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # operand -> (task pos, piece, source)
    for i, (layout, t, key, source_where, copy) in enumerate(
        zip(form.operands, operand_types, operand_keys, operand_where, any_copy, strict=True)
    ):
        if layout is None or t is None or source_where is None:
            continue
        shard, total, copies = form.degrees_of(layout)
        degrees = (*shard, total, copies)
        theirs_at = _grid_array(source_where, degrees)
        if theirs_at is None:
            return None
        coords = form_coords(form, layout, grid)
        theirs = (read_from_arrays(theirs_at, coords, mine_at[res]) if copy else theirs_at[coords]).ravel()
        piece_of = np.ravel_multi_index(coords, degrees).ravel()  # type: ignore[arg-type]
        if seq is not None:
            theirs, piece_of = theirs[seq], piece_of[seq]
        moved = np.flatnonzero(theirs != dev)
        group = groups.setdefault(key, [])
        if group and degrees_of[group[0]] != degrees:
            return None  # one value read under two layouts: pieces compared by coordinate
        group.append(i)
        degrees_of[i] = degrees
        moves[i] = (moved, piece_of[moved], theirs[moved])
    kept_pos: list[np.ndarray] = []
    kept_op: list[np.ndarray] = []
    kept_src: list[np.ndarray] = []
    for group in groups.values():
        pos = np.concatenate([moves[i][0] for i in group])
        op = np.concatenate([np.full(moves[i][0].size, i, dtype=np.int64) for i in group])
        pieces_moved = np.concatenate([moves[i][1] for i in group])
        src = np.concatenate([moves[i][2] for i in group])
        order = np.lexsort((op, pos))
        pairs = pieces_moved[order] * machine.num_devices + dev[pos[order]]
        _, first = np.unique(pairs, return_index=True)  # each piece once per device, first kept
        keep = order[np.sort(first)]
        kept_pos.append(pos[keep])
        kept_op.append(op[keep])
        kept_src.append(src[keep])
    if not kept_pos:
        return tasks, [], []
    pos, op, src = np.concatenate(kept_pos), np.concatenate(kept_op), np.concatenate(kept_src)
    order = np.lexsort((op, pos))
    pos, op, src = pos[order], op[order], src[order]
    dst = dev[pos]
    sizes = np.array([_piece(t, False).nbytes if t is not None else 0 for t in operand_types], dtype=np.int64)
    nbytes = sizes[op]
    seconds = p2p_seconds(src, dst, nbytes, machine)
    wants = np.array([bool(g) for g in grads], dtype=bool)[op]
    rows = list(
        zip(src.tolist(), dst.tolist(), seconds.tolist(), nbytes.tolist(), wants.tolist(), strict=True)
    )
    fwd = [Comm((s, d), sec, nb, transfer=True) for s, d, sec, nb, _ in rows]
    bwd = [Comm((d, s), sec, nb, transfer=True) for s, d, sec, nb, w in rows if w]
    return tasks, fwd, bwd


def _link_terms(src: np.ndarray, dst: np.ndarray, machine: Machine) -> tuple[np.ndarray, np.ndarray]:
    """(bandwidth, latency) of the link class between each `src` and `dst` device (distinct),
    as `Machine.slowest_link` finds it for the two."""
    node_of, socket_of, intra, cross, inter = link_arrays(machine)
    ns, nd = node_of[src], node_of[dst]
    same_node = ns == nd
    same_socket = socket_of[src] == socket_of[dst]
    bandwidth = np.where(
        same_socket, intra[0][ns], np.where(same_node, cross[0][ns], np.minimum(inter[0][ns], inter[0][nd]))
    )
    latency = np.where(
        same_socket, intra[1][ns], np.where(same_node, cross[1][ns], np.maximum(inter[1][ns], inter[1][nd]))
    )
    return bandwidth, latency


def p2p_seconds(src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, machine: Machine) -> np.ndarray:
    """`collective_time("p2p", nbytes, (src, dst), machine)` of each transfer (src != dst), to
    the last bit: the link's latency, plus the bytes over its bandwidth slowed by the sender's
    kind (`DeviceKind.collective_factor`), plus that kind's hand-off; 0 where no bytes move."""
    bandwidth, latency = _link_terms(src, dst, machine)
    factor, handoff = p2p_kind_arrays(machine)
    seconds = (latency + nbytes / (bandwidth / factor[src])) + handoff[src]
    return np.where(nbytes > 0, seconds, 0.0)


@lru_cache(maxsize=16)
def p2p_kind_arrays(machine: Machine) -> tuple[np.ndarray, np.ndarray]:
    """Per device, its kind's p2p slowdown (`collective_factor`) and `collective_handoff`."""
    factor = np.array([d.kind.collective_factor("p2p") for d in machine.devices], dtype=np.float64)
    handoff = np.array([d.kind.collective_handoff for d in machine.devices], dtype=np.float64)
    factor.setflags(write=False)
    handoff.setflags(write=False)
    return factor, handoff


@lru_cache(maxsize=16)
def kind_index(machine: Machine) -> np.ndarray:
    """Per device, the index of its kind's name among the machine's (in device order), read-only."""
    names: dict[str, int] = {}
    index = np.array([names.setdefault(d.kind.name, len(names)) for d in machine.devices], dtype=np.int64)
    index.setflags(write=False)
    return index


def transfers_phase(
    form: Form,
    where: Placement | np.ndarray,
    i: int,
    t: TensorType,
    source_where: Placement | np.ndarray,
    wants: bool,
    machine: Machine,
    any_copy: bool = False,
) -> float:
    """`phase` of the forward plus that of the backward transfers `tasks_and_transfers` makes
    for operand `i` alone (placed at `source_where`, the others not considered; `any_copy`: it
    is a source, read from any copy, `read_from`), over arrays of
    all tasks at once: what the machine-mapping DP charges an edge, without a loop (or a `Comm`)
    per task on thousands of devices. The same figure to the last bit: transfers are kept in
    task order (each piece once per receiving device), each priced as `collective_time`'s p2p
    over the link class of its two devices, and summed per device in the order `phase` adds
    them (a transfer's sender, then its receiver); gradients return the same way. `where` and
    `source_where` may be placements or their arrays (`as_array`; the mapping DP passes the
    arrays of views: no piece-by-piece dict on thousands of devices)."""
    layout = form.operands[i]
    if layout is None:
        return 0.0
    shard, total, copies = form.degrees_of(layout)
    degrees = (*shard, total, copies)
    held = source_where.size if isinstance(source_where, np.ndarray) else len(source_where)
    if held != math.prod(degrees):  # not laid out as the form reads it: task by task
        where, source_where = _as_placement(where), _as_placement(source_where)
        only = [source_where if j == i else None for j in range(len(form.operands))]
        types = [t if j == i else None for j in range(len(form.operands))]
        grads = [wants if j == i else False for j in range(len(form.operands))]
        keys = list(range(len(form.operands)))
        any_copies = [any_copy if j == i else False for j in range(len(form.operands))]
        _, fwd, bwd = tasks_and_transfers(form, where, types, keys, only, grads, machine, any_copies)
        return phase(fwd) + phase(bwd)
    grid = form_grid(form)
    coords = form_coords(form, layout, grid)
    mine_at = as_array(where, form.degrees_of_result())[form_coords(form, form.results[0], grid)]
    mine = mine_at.ravel()
    source_at = as_array(source_where, degrees)
    theirs = (read_from_arrays(source_at, coords, mine_at) if any_copy else source_at[coords]).ravel()
    pieces = np.ravel_multi_index(coords, degrees).ravel()  # type: ignore[arg-type]
    moved = np.flatnonzero(mine != theirs)
    nbytes = _piece(t, False).nbytes
    if moved.size == 0 or nbytes <= 0:
        return 0.0
    pairs = pieces[moved] * machine.num_devices + mine[moved]
    _, first = np.unique(pairs, return_index=True)  # each piece once per device, in task order
    kept = moved[np.sort(first)]
    src, dst = theirs[kept], mine[kept]
    bandwidth, latency = _link_terms(src, dst, machine)
    seconds = latency + nbytes / bandwidth
    devices = np.stack([src, dst], axis=1).ravel()
    per = np.bincount(devices, weights=np.repeat(seconds, 2), minlength=machine.num_devices)
    one = float(per.max())
    return one + one if wants else one


def _as_placement(where: Placement | np.ndarray) -> Placement:
    """A placement (coordinate -> device, in coordinate order) of an array of devices."""
    if not isinstance(where, np.ndarray):
        return where
    coords = itertools.product(*(range(d) for d in where.shape))
    return dict(zip(coords, where.ravel().tolist(), strict=True))


_Links = tuple[np.ndarray, np.ndarray]
"""(bandwidth, latency) per node of one link class."""


@lru_cache(maxsize=16)
def link_arrays(machine: Machine) -> tuple[np.ndarray, np.ndarray, _Links, _Links, _Links]:
    """Per device its node and socket (numbered over the machine), read-only; per node the
    (bandwidth, latency) of its three link classes (`Machine.link`). Once per machine."""
    node_of = np.array([d.node for d in machine.devices], dtype=np.int64)
    socket_of = np.array([d.node * 1024 + d.socket for d in machine.devices], dtype=np.int64)

    def per_node(name: str) -> _Links:
        links = [getattr(node, name) for node in machine.nodes]
        return (
            np.array([lk.bandwidth for lk in links], dtype=np.float64),
            np.array([lk.latency for lk in links], dtype=np.float64),
        )

    node_of.setflags(write=False)
    socket_of.setflags(write=False)
    return node_of, socket_of, per_node("intra_socket"), per_node("cross_socket"), per_node("inter_node")
