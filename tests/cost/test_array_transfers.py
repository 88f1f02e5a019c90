"""`pricing.tasks_and_transfers` over arrays (`_array_transfers`) is its task-by-task loop
(`_loop_transfers`) to the last bit: the same tasks per device in the same order, the same
transfers (sender, receiver, seconds, bytes) in the same order, forward and backward. Every op
of zoo plans, each operand at its producer's placement, at its devices reversed and shuffled
(transfers within a socket, across sockets and nodes), all operands at once and one value read
as two operands (each piece sent once per device), sources read by coordinate and from any
copy (`transfers.read_from`); whole placements and `Placed` ones (the pieces on
representatives, as the estimate by roles prices them); on a homogeneous, a two-socket, a mixed
and a CPU machine (whose kind slows p2p by a hand-off)."""

from __future__ import annotations

import itertools
import os
from functools import cache

import numpy as np
import pytest

from unityc.cost.estimate import node_form_of
from unityc.cost.pricing import Placed, _array_transfers, _loop_transfers, as_array, phase, placement
from unityc.cost.schedule import Comm
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.search.baselines import data_parallel, megatron

HETERO = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", "examples", "machines", "hetero_v100_m4.toml")
)


@cache
def bert() -> Graph:
    return from_module(import_model(ModelSpec("bert", "small")))


def _as_dict(array: np.ndarray) -> dict:
    return dict(zip(np.ndindex(*array.shape), array.ravel().tolist(), strict=True))


@pytest.mark.parametrize("machine_name", ["dgx-a100:2", "summit:2", HETERO, "cpu:4"])
def test_transfers_over_arrays_are_the_loops(machine_name: str) -> None:
    m = load_machine(machine_name)
    rng = np.random.default_rng(0)
    checked = moved = placed = 0
    for plan in (data_parallel(bert(), m).graph, megatron(bert(), m).graph):
        for node in plan.nodes.values():
            if node.is_source or node.op.startswith("parallel.") or node.view is None:
                continue
            types = tuple(None if r is None else plan.type_of(r) for r in node.operands)
            form = node_form_of(node, types)
            where = placement(node.types[0], node.view, m)
            at = [
                None if r is None or plan.nodes[r[0]].view is None else placement(t, plan.nodes[r[0]].view, m)  # type: ignore[arg-type]
                for r, t in zip(node.operands, types, strict=True)
            ]
            sources: list[list] = [at]
            for a in at:  # one operand at a time, at its devices reversed and shuffled
                if a is None:
                    continue
                devices = np.array(list(a.values()))
                for devs in (devices[::-1], rng.permutation(devices)):
                    moved_one = dict(zip(a, devs.tolist(), strict=True))
                    sources.append([moved_one if b is a else None for b in at])
            grads = [True] * len(types)
            sourced = [r is not None and plan.nodes[r[0]].is_source for r in node.operands]
            for source, copies in itertools.product(sources, ([False] * len(types), sourced)):
                for keys in (list(range(len(types))), [0] * len(types)):  # distinct values; one value
                    if keys[0] == 0 and len({None if t is None else t.task_degrees() for t in types}) > 1:
                        continue  # one value has one type
                    want = _loop_transfers(form, where, types, keys, source, grads, m, copies)
                    got = _array_transfers(form, where, types, keys, source, grads, m, copies)
                    assert got is not None, (node.name, "array-shaped placements priced by the loop")
                    assert list(got[0].items()) == list(want[0].items()), (machine_name, node.name)
                    assert got[1] == want[1] and got[2] == want[2], (machine_name, node.name)
                    checked += 1
                    moved += bool(want[1])
                    # by roles: a random half of the devices as representatives
                    mask = rng.random(m.num_devices) < 0.5
                    rep_where = Placed(as_array(where, node.types[0].task_degrees()), mask)
                    rep_source = [
                        None if s is None else Placed(as_array(s, t.task_degrees()), mask)  # type: ignore[union-attr]
                        for s, t in zip(source, types, strict=True)
                    ]
                    want = _loop_transfers(form, rep_where, types, keys, rep_source, grads, m, copies)
                    got = _array_transfers(form, rep_where, types, keys, rep_source, grads, m, copies)
                    assert got is not None
                    assert list(got[0].items()) == list(want[0].items()), (machine_name, node.name)
                    assert got[1] == want[1] and got[2] == want[2], (machine_name, node.name)
                    placed += bool(want[0])
    assert checked > 100 and moved > 20 and placed > 20


def test_placements_not_laid_out_as_arrays_go_to_the_loop() -> None:
    m = load_machine("dgx-a100:2")
    plan = megatron(bert(), m).graph
    node = next(
        n
        for n in plan.nodes.values()
        if not n.is_source
        and not n.op.startswith("parallel.")
        and n.view is not None
        and n.operands[0] is not None
        and plan.nodes[n.operands[0][0]].view is not None
        and plan.type_of(n.operands[0]).num_pieces > 1
    )
    types = tuple(None if r is None else plan.type_of(r) for r in node.operands)
    form = node_form_of(node, types)
    where = placement(node.types[0], node.view, m)
    source = placement(types[0], plan.nodes[node.operands[0][0]].view, m)  # type: ignore[arg-type,index]
    shuffled = dict(reversed(list(source.items())))  # the same pieces, not in coordinate order
    only = [shuffled] + [None] * (len(types) - 1)
    keys = list(range(len(types)))
    assert (
        _array_transfers(form, where, types, keys, only, [True] * len(types), m, [False] * len(types)) is None
    )
    assert (
        _array_transfers(
            form, where, types, keys, [source, *only[1:]], [True] * len(types), m, [False] * len(types)
        )
        is not None
    )


def test_phase_and_placed_over_arrays_are_their_loops() -> None:
    rng = np.random.default_rng(1)
    comms = [
        Comm(tuple(rng.choice(512, size=int(n), replace=False).tolist()), float(rng.random()))
        for n in rng.integers(2, 64, size=40)
    ]
    comms += [Comm(range(3, 500, 8), 0.25), Comm((7, 7), 0.5)]  # a range; a device listed twice
    per: dict[int, float] = {}
    for c in comms:  # `phase`'s definition: each device's seconds added in order
        for d in c.devices:
            per[d] = per.get(d, 0.0) + c.seconds
    assert sum(len(c.devices) for c in comms) > 256  # priced over arrays
    assert phase(comms) == max(per.values())
    array = rng.permutation(96).reshape(4, 3, 8)
    mask = rng.random(96) < 0.3
    want = [(tuple(int(i) for i in c), int(array[tuple(c)])) for c in np.argwhere(mask[array])]
    assert list(Placed(array, mask).items()) == want


def test_a_source_is_read_from_any_copy_on_the_readers_device() -> None:
    """A data-parallel weight whose copies are numbered in reverse is still on every reader:
    read from any copy (`read_from`) nothing moves, by coordinate every task receives (8
    copies, none in its place); copies on other devices (past the readers) are sent either way."""
    m, wider = load_machine("dgx-a100:1"), load_machine("dgx-a100:2")
    graph = from_module(import_model(ModelSpec("mlp", "small", batch=256)))
    plan = data_parallel(graph, m).graph
    node, i = next(
        (n, i)
        for n in plan.nodes.values()
        if not n.is_source and n.view is not None and not n.op.startswith("parallel.")
        for i, r in enumerate(n.operands)
        if r is not None and plan.nodes[r[0]].op == "pcg.weight" and plan.type_of(r).copy_degree == 8
    )
    types = tuple(None if r is None else plan.type_of(r) for r in node.operands)
    form = node_form_of(node, types)
    where = placement(node.types[0], node.view, m)
    weight_view = plan.nodes[node.operands[i][0]].view  # type: ignore[index]
    at = placement(types[i], weight_view, m)  # type: ignore[arg-type]
    reversed_copies = dict(zip(at, reversed(list(at.values())), strict=True))
    keys, grads = list(range(len(types))), [True] * len(types)
    only = [reversed_copies if j == i else None for j in range(len(types))]
    for copies in ([False] * len(types), [j == i for j in range(len(types))]):
        for price in (_loop_transfers, _array_transfers):
            priced = price(form, where, types, keys, only, grads, m, copies)
            assert priced is not None
            assert len(priced[1]) == len(priced[2]) == (0 if copies[i] else 8)
    past = {c: d + 8 for c, d in at.items()}  # the same copies on the second node
    only = [past if j == i else None for j in range(len(types))]
    priced = _loop_transfers(form, where, types, keys, only, grads, wider, [True] * len(types))
    assert len(priced[1]) == 8
