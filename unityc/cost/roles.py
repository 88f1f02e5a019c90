"""Device roles: a plan's devices grouped by what they do, so the cost model prices each kind once.

A plan on thousands of devices has few kinds of devices: data parallelism over 2,048 GPUs runs
the same tasks with the same collectives on all of them but the one holding the loss. A *role*
is a class of devices that (1) are of one kind, (2) run as many tasks of every op and hold as
many pieces of every value, and (3) take part in collectives, transfers and copy groups whose
members fall into the same roles, over the same link classes. `estimate` then simulates one
representative device per role (the smallest of it) and counts it as many times as the role has
devices; a collective is priced over its real members (its size and the links it spans), and
the simulation runs it on the representatives of their roles.

Roles are the classes of a *stable colouring* (colour refinement, as in the Weisfeiler-Leman
test) of the devices under the plan's groups, computed with arrays over all devices at once
(`numpy`: no Python loop per device): a device starts coloured by its kind and its node's spec;
each round, every group the cost model prices (each op's tasks and the operand pieces they read,
its tasks along each factor of its parallel form, a parallel op's groups, a weight's copy
groups, those of a weight held on several pipeline stages taken together, `sum_concat`'s
moves) adds to each member's colour a hash of the multiset of its members' colours and of the
link classes it spans; rounds run until no class splits. Devices of
one class then have equal timelines in the list-scheduling simulation step by step (each waits
for partners of the same classes), so the estimate is the per-device one: the tests compare
both on every zoo plan on machines of several nodes. Multisets are hashed as sums of 36-bit
hashes (exact in float64): a collision, which would merge two roles, has probability ~2^-36.

`device_array` is `pricing.placement` as an array (the device of every piece); the role estimate
reads it through `pricing.Placed` (the pieces on representative devices, any piece on lookup).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from unityc.cost.communication import parallel_axes
from unityc.cost.pricing import Placed, form_coords, form_grid, link_arrays, node_form, placement
from unityc.cost.schedule import Comm
from unityc.cost.transfers import read_from_arrays
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.view import MachineViewAttr
from unityc.graph import Graph, Node
from unityc.machine.spec import Machine

ROLE_THRESHOLD = 64
"""`estimate` prices by roles on machines of more devices than this (below, per device)."""

_MASK = np.uint64((1 << 36) - 1)
_MAX_ROUNDS = 12


@dataclass(frozen=True)
class Roles:
    """The role of every device of a machine, by a plan."""

    reps: tuple[int, ...]
    """The representative (smallest) device of each role, ascending."""
    counts: tuple[int, ...]
    """How many devices each role has."""
    key: bytes = field(repr=False)
    """The role index of every device (int64), what makes two `Roles` equal."""
    _of: np.ndarray = field(default=None, repr=False, compare=False, hash=False)  # type: ignore[assignment,arg-type]
    _collapsed: dict[Any, tuple[int, ...]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if len(self.reps) != len(self.counts):
            raise ValueError("roles: one count per representative")
        if any(c < 1 for c in self.counts):
            raise ValueError("roles: every role has a device")
        of = np.frombuffer(self.key, dtype=np.int64)
        if sum(self.counts) != len(of):
            raise ValueError("roles: the counts do not add up to the devices")
        object.__setattr__(self, "_of", of)

    @property
    def num_devices(self) -> int:
        return len(self._of)

    def rep_of(self, device: int) -> int:
        return self.reps[int(self._of[device])]

    def count_of(self, rep: int) -> int:
        return self.counts[int(self._of[rep])]

    def counts_of(self, reps: Iterable[int]) -> list[int]:
        """`count_of` of each device, over an array."""
        devices = np.fromiter(reps, dtype=np.int64)
        return np.asarray(self.counts, dtype=np.int64)[self._of[devices]].tolist()

    def is_rep(self, device: int) -> bool:
        return self.rep_of(device) == device

    def collapse(self, devices: Sequence[int]) -> tuple[int, ...]:
        """The representatives of the roles of `devices`, each once, in order of first member."""
        if isinstance(devices, range):
            hit = self._collapsed.get(devices)
            if hit is None:
                roles = self._of[np.arange(devices.start, devices.stop, devices.step)]
                _, first = np.unique(roles, return_index=True)
                hit = tuple(self.reps[int(roles[i])] for i in sorted(first))
                self._collapsed[devices] = hit
            return hit
        return tuple(dict.fromkeys(self.reps[int(self._of[d])] for d in devices))

    def mirrors(self, devices: Sequence[int]) -> int:
        """How many collectives like this one the plan runs on devices of the same roles (its
        last member's role's devices over its members of that role: a transfer counts at its
        receiver)."""
        last = devices[-1]
        role = self._of[last]
        if isinstance(devices, range):
            inside = int((self._of[np.arange(devices.start, devices.stop, devices.step)] == role).sum())
        elif len(devices) > 64:  # a copy group over thousands of devices: over an array
            inside = int((self._of[np.unique(np.asarray(devices, dtype=np.int64))] == role).sum())
        else:
            inside = sum(1 for d in set(devices) if self._of[d] == role)
        return self.counts[int(role)] // max(inside, 1)

    def count_collectives(self, comms: Iterable[Comm]) -> int:
        """How many collectives these collapsed ones (`collapse_comms`) stand for."""
        return sum(self.mirrors(c.span or c.devices) for c in comms)

    def collapse_comms(self, comms: Sequence[Comm]) -> tuple[tuple[Comm, ...], int]:
        """Collectives over representatives: each over the representatives of its members'
        roles (`span` keeps the members). A collective whose members are disjoint from those of
        one already kept with the same representatives, time and size is its mirror image on
        other devices of the same roles (a tensor-parallel group on another node) and is
        dropped; transfers into one device from devices of one role all stay (it receives each).
        A transfer (`Comm.transfer`) between two devices of one role occupies their
        representative twice (it sends one such piece and receives one); a collective of two
        such devices, once. Also returns how many collectives the plan runs
        (`mirrors` of each kept one)."""
        out: list[Comm] = []
        total = 0
        kept: dict[tuple[tuple[int, ...], float, float], list[Collection[int]]] = {}
        for c in comms:
            devices = self.collapse(c.devices)
            # a collective's mirror image under a symmetry that reverses the order of its
            # members' roles (a sequence-parallel plan's devices 0..7 in roles 0,1,2,3,3,2,1,0)
            # is the same collective: keyed by its roles as a set; a transfer keeps its direction
            key = (devices if c.transfer else tuple(sorted(devices)), c.seconds, c.nbytes)
            seen = kept.get(key)
            if seen is None:
                kept[key] = [c.devices]
            else:
                members = set(c.devices)
                seen[:] = [s if isinstance(s, set) else set(s) for s in seen]
                disjoint = all(members.isdisjoint(s) for s in seen)
                seen.append(members)
                if disjoint:
                    continue
            comm = Comm(devices, c.seconds, c.nbytes, c.devices, c.transfer)
            out.append(comm)
            total += self.mirrors(c.devices)
            if c.transfer and len(devices) == 1 and len(set(c.devices)) == 2:
                out.append(comm)
        return tuple(out), total

    @property
    def rep_mask(self) -> np.ndarray:
        mask = np.zeros(len(self._of), dtype=bool)
        mask[list(self.reps)] = True
        return mask


def device_arrays(graph: Graph, machine: Machine) -> dict[int, np.ndarray]:
    """`device_array` of every node's first result; nodes placed alike share one array."""
    shared: dict[tuple[tuple[int, ...], MachineViewAttr | None], np.ndarray] = {}
    out = {}
    for nid, node in graph.nodes.items():
        t = node.types[0]
        key = (t.task_degrees(), node.view)
        if key not in shared:
            shared[key] = device_array(t, node.view, machine)
        out[nid] = shared[key]
    return out


def device_array(t: TensorType, view: MachineViewAttr | None, machine: Machine) -> np.ndarray:
    """The device of every piece of a result of type `t` under `view` (`pricing.placement`, as
    an array shaped by its task degrees); an invalid view raises placement's error."""
    degrees = t.task_degrees()
    if view is None:
        return np.zeros(degrees, dtype=np.int64)
    big = [i for i, d in enumerate(degrees) if d > 1]
    node = np.zeros(degrees, dtype=np.int64)
    local = np.zeros(degrees, dtype=np.int64)
    for k, i in enumerate(big):
        shape = [1] * len(degrees)
        shape[i] = degrees[i]
        step = np.arange(degrees[i], dtype=np.int64).reshape(shape) * view.strides[k]
        if view.inter[k]:
            node = node + step
        else:
            local = local + step
    origin = machine.device(view.start)
    node = node + origin.node
    if int(node.max()) >= machine.num_nodes:
        placement(t, view, machine)  # raises the reason
    where = _first_devices(machine)[node] + origin.local + local
    if int(where.max()) >= machine.num_devices or int(np.bincount(where.ravel()).max()) > 1:
        placement(t, view, machine)
    return where


@lru_cache(maxsize=16)
def _first_devices(machine: Machine) -> np.ndarray:
    """The first device of each node."""
    sizes = np.array([node.num_devices for node in machine.nodes], dtype=np.int64)
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


# --- colour refinement -------------------------------------------------------------------------


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, elementwise on uint64."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


class _Groups:
    """The groups of a plan, as families (member devices, dense group ids), each family once
    (ops placed alike have the same groups: a data-parallel plan has a handful of families for
    hundreds of ops)."""

    def __init__(self, node_of: np.ndarray, socket_of: np.ndarray) -> None:
        self.node_of = node_of
        self.socket_of = socket_of
        self.seen: set[int] = set()
        self.keys: set[Any] = set()
        self.members: list[np.ndarray] = []
        self.gids: list[np.ndarray] = []
        self.tags: list[np.ndarray] = []
        self.size = 0

    def first(self, key: Any) -> bool:
        """Whether `key` (what makes a node's groups: its arrays, its form) is new."""
        if key in self.keys:
            return False
        self.keys.add(key)
        return True

    def add(self, members: np.ndarray, gids: np.ndarray) -> None:
        members, gids = members.ravel(), gids.ravel()
        size = int(gids.max()) + 1 if gids.size else 0
        if size == 0:
            return
        digest = hash((members.tobytes(), gids.tobytes()))
        if digest in self.seen:
            return
        self.seen.add(digest)
        link = _link_classes(members, gids, self.node_of, self.socket_of)
        salt = np.uint64(len(self.members) & 0xFFFFF) << np.uint64(44)
        self.members.append(members)
        self.gids.append(gids + self.size)
        self.tags.append((link << np.uint64(40)) ^ salt)
        self.size += size

    def pairs(self, a: np.ndarray, b: np.ndarray) -> None:
        """Groups of two: a[i] with b[i], where they differ (a task reading a piece on another
        device: a transfer). A piece read on its own device moves nothing and makes no group: as
        a group of one device twice it would hash like a transfer between two devices of one
        colour, and a task reading locally would share a role with one that receives (a
        sequence-parallel add reading a position embedding held by some of its devices)."""
        a, b = a.ravel(), b.ravel()
        moved = a != b
        if not moved.any():
            return
        a, b = a[moved], b[moved]
        gids = np.arange(len(a), dtype=np.int64)
        self.add(np.concatenate([a, b]), np.concatenate([gids, gids]))

    def lines(self, array: np.ndarray) -> None:
        """Groups along each axis of degree > 1: pieces differing only there."""
        for axis, d in enumerate(array.shape):
            if d < 2:
                continue
            moved = np.moveaxis(array, axis, -1)
            gids = np.broadcast_to(np.arange(moved.size // d).reshape(*moved.shape[:-1], 1), moved.shape)
            self.add(moved, gids)

    def packed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every family's members and group ids in one array each, and a tag per group."""
        if not self.members:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=np.uint64)
        return np.concatenate(self.members), np.concatenate(self.gids), np.concatenate(self.tags)


def _node_groups(groups: _Groups, nid: int, node: Node, graph: Graph, arrays: dict[int, np.ndarray]) -> None:
    """The groups of one node. Ops placed alike (the same arrays: `device_arrays` shares them)
    have the same groups, made once (`_Groups.first`)."""
    own = arrays[nid]
    if groups.first(("on", id(own))):
        groups.add(own, np.zeros(own.shape, dtype=np.int64))  # the devices it runs on, in one group
    if node.is_source:
        if node.op == "pcg.weight" and own.shape[-1] > 1 and groups.first(("copies", id(own))):
            groups.lines(own)
        return
    operands = [None if r is None else arrays[r[0]] for r in node.operands]
    sources = tuple(None if a is None else id(a) for a in operands)
    if node.op == "parallel.sum_concat":
        a, b = operands
        rank = node.types[0].rank
        first = graph.type_of(node.operands[0]).sum_degree  # type: ignore[arg-type]
        if groups.first((node.op, id(own), sources, first)):
            cut = [slice(None)] * rank
            groups.pairs(own[(*cut, slice(0, first))], a)  # type: ignore[arg-type]
            groups.pairs(own[(*cut, slice(first, None))], b)  # type: ignore[arg-type]
        return
    if node.op.startswith("parallel."):
        if groups.first((node.op, node.attrs, id(own), sources)):
            _parallel_groups(groups, node, operands[0], own)  # type: ignore[arg-type]
        return
    types = tuple(None if r is None else graph.type_of(r) for r in node.operands)
    form = node_form(node.op, node.attrs, types)
    sourced = tuple(r is not None and graph.nodes[r[0]].is_source for r in node.operands)
    if not groups.first(("tasks", form, id(own), sources, sourced)):
        return
    grid = form_grid(form)
    task_devices = own[form_coords(form, form.results[0], grid)]
    for layout, source, copy in zip(form.operands, operands, sourced, strict=True):
        if layout is None or source is None:
            continue
        coords = form_coords(form, layout, grid)
        read = read_from_arrays(source, coords, task_devices) if copy else source[coords]
        groups.pairs(task_devices, read)
    groups.lines(task_devices)


def _parallel_groups(
    groups: _Groups, node: Node, source: np.ndarray, own: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A parallel op's groups (`communication.parallel_groups`): input pieces merged along the
    axis it shrinks and output pieces split along the axis it grows meet at one base piece.
    Returns them (members, group ids)."""
    attrs = dict(node.attrs)
    rank = source.ndim - 2
    shrink, grow = parallel_axes(node.op, attrs, rank)
    n = attrs.get("degree") or 1
    base_shape = list(source.shape)
    if shrink is not None:
        base_shape[shrink] //= n
    in_base: list[Any] = list(np.indices(source.shape, sparse=True))
    if shrink is not None:
        in_base[shrink] = in_base[shrink] // n
    out_base: list[Any] = list(np.indices(own.shape, sparse=True))
    if grow is not None:
        out_base[grow] = out_base[grow] // n
    in_ids = np.ravel_multi_index(tuple(np.broadcast_arrays(*in_base)), base_shape)  # type: ignore[arg-type]
    out_ids = np.ravel_multi_index(tuple(np.broadcast_arrays(*out_base)), base_shape)  # type: ignore[arg-type]
    members = np.concatenate([source.ravel(), own.ravel()])
    gids = np.concatenate([in_ids.ravel(), out_ids.ravel()])
    groups.add(members, gids)
    return members, gids


def tied_keys(graph: Graph) -> dict[str, list[int]]:
    """Weight key -> its `pcg.weight` nodes, for keys held by several (a weight read on several
    pipeline stages, held by each: `search.pipeline.untie`; `staged.py` sums their copies'
    gradients by one all-reduce per piece)."""
    nodes: dict[str, list[int]] = defaultdict(list)
    for nid, node in graph.nodes.items():
        if node.op == "pcg.weight":
            nodes[str(node.attr("key"))].append(nid)
    return {k: v for k, v in nodes.items() if len(v) > 1}


def find_roles(graph: Graph, machine: Machine, arrays: dict[int, np.ndarray]) -> Roles:
    """The roles of `machine`'s devices under the plan `graph` whose nodes are placed at
    `arrays` (`device_array` of each node's first result)."""
    n = machine.num_devices
    node_of, socket_of, colour = _device_classes(machine)
    groups = _Groups(node_of, socket_of)
    for nid in graph.topological():
        _node_groups(groups, nid, graph.nodes[nid], graph, arrays)
    for nodes in tied_keys(graph).values():  # one weight held on several stages: its copies together
        groups.lines(np.concatenate([arrays[n] for n in nodes], axis=-1))
    colour = _stable(colour, groups, n)
    _, reps, counts = np.unique(colour, return_index=True, return_counts=True)
    order = np.argsort(reps)
    index = np.empty(len(reps), dtype=np.int64)
    index[order] = np.arange(len(reps))
    return Roles(
        tuple(int(r) for r in reps[order]),
        tuple(int(c) for c in counts[order]),
        index[colour].astype(np.int64).tobytes(),
    )


def placement_reps(
    machine: Machine,
    placed: Sequence[np.ndarray],
    parallel: tuple[Node, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """A mask of representative devices for pricing one op alone (the mapping DP's cost of an
    op at a view with the weights it places, or of a parallel op's move between two views):
    the roles under the groups of the device arrays `placed` (each array's devices, a device
    counted once per piece it holds, and its lines along every axis: an op's tasks along each
    factor, a weight's copy groups) and, for a parallel op `(node, source, own)`, its groups
    (`_parallel_groups`). Devices of one role run as many tasks, hold as many pieces and take
    part in the same collectives over the same link classes, so the largest time or memory over
    the representatives, and over the collectives touching them (`pricing.Placed`), is the
    largest over every device."""
    n = machine.num_devices
    node_of, socket_of, colour = _device_classes(machine)
    groups = _Groups(node_of, socket_of)
    for array in placed:
        groups.add(array, np.zeros(array.shape, dtype=np.int64))
        groups.lines(array)
    if parallel is not None:
        members, gids = _parallel_groups(groups, *parallel)
        # each device's pieces in each group, as a group: a device holding an input and an output
        # piece of one group (nothing leaves it) differs from one holding them in two groups
        incidence = np.unique(gids * n + members, return_inverse=True)[1].ravel()
        groups.add(members, incidence)
    colour = _stable(colour, groups, n)
    mask = np.zeros(n, dtype=bool)
    mask[np.unique(colour, return_index=True)[1]] = True
    return mask


def _stable(colour: np.ndarray, groups: _Groups, n: int) -> np.ndarray:
    """The stable colouring (colour refinement from `colour`) under `groups`."""
    members, gids, tags = groups.packed()
    colour = _relabel(colour)
    for _ in range(_MAX_ROUNDS):
        refined = _refine(colour, members, gids, tags, n)
        if refined.max() == colour.max():
            break
        colour = refined
    return colour


@lru_cache(maxsize=16)
def _device_classes(machine: Machine) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per device: its node, its socket (numbered over the machine), its starting colour (its
    kind and its node's spec); once per machine (a loop over every device)."""
    kinds = {k.name: i for i, k in enumerate(machine.kinds)}
    specs: dict[Any, int] = {}
    node_of, socket_of = link_arrays(machine)[:2]
    colour = np.array(
        [
            kinds[d.kind.name] * 4096 + specs.setdefault(machine.nodes[d.node], len(specs))
            for d in machine.devices
        ],
        dtype=np.int64,
    )
    for array in (node_of, socket_of, colour):
        array.setflags(write=False)
    return node_of, socket_of, colour


def _relabel(values: np.ndarray) -> np.ndarray:
    return np.unique(values, return_inverse=True)[1].astype(np.int64).ravel()


def _link_classes(
    members: np.ndarray, gids: np.ndarray, node_of: np.ndarray, socket_of: np.ndarray
) -> np.ndarray:
    """Per group: 2 if it spans nodes, 1 if sockets of one node, else 0."""
    size = int(gids.max()) + 1 if gids.size else 0
    out = np.zeros(size, dtype=np.uint64)
    for spread, weight in ((socket_of, 1), (node_of, 2)):
        where = spread[members]
        first = np.zeros(size, dtype=np.int64)
        first[gids[::-1]] = where[::-1]  # each group's first member's (the last write wins)
        out[gids[where != first[gids]]] = weight
    return out


def _refine(
    colour: np.ndarray, members: np.ndarray, gids: np.ndarray, tags: np.ndarray, n: int
) -> np.ndarray:
    """One round: each device's colour with the multisets of its groups' colours."""
    hashed = (_mix(colour.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)) & _MASK).astype(np.float64)
    inside = np.bincount(gids, weights=hashed[members], minlength=len(tags))
    tag = (_mix(inside.astype(np.uint64) ^ tags) & _MASK).astype(np.float64)
    acc = np.bincount(members, weights=tag[gids], minlength=n)
    return _rank_pairs(colour, acc.astype(np.int64))


def _rank_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The rank of each (a[i], b[i]) among the distinct pairs in order (what `np.unique` of the
    stacked pairs along axis 0 returns as its inverse), by a `lexsort` of the two int64 keys: a
    sort of rows as one opaque record is several times slower on 65,536 devices."""
    order = np.lexsort((b, a))
    sa, sb = a[order], b[order]
    new = np.ones(len(a), dtype=np.int64)
    new[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
    out = np.empty(len(a), dtype=np.int64)
    out[order] = np.cumsum(new) - 1
    return out


__all__ = [
    "ROLE_THRESHOLD",
    "Placed",
    "Roles",
    "device_array",
    "device_arrays",
    "find_roles",
    "placement_reps",
    "tied_keys",
]
