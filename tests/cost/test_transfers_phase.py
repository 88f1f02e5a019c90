"""`pricing.transfers_phase` (the machine-mapping DP's edge price over arrays) is `phase` of
`tasks_and_transfers`' forward plus backward transfers for one operand, to the last bit: every
op operand of zoo plans, its source at its producer's placement and at that placement's devices
reversed (transfers within a socket, across sockets and across nodes), on a homogeneous, a
two-socket and a mixed machine."""

from __future__ import annotations

import os

import numpy as np
import pytest

from unityc.cost.estimate import node_form_of
from unityc.cost.pricing import phase, placement, tasks_and_transfers, transfers_phase
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module
from unityc.machine import load_machine
from unityc.search.baselines import data_parallel, megatron

HETERO = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", "examples", "machines", "hetero_v100_m4.toml")
)


@pytest.mark.parametrize("machine_name", ["dgx-a100:2", "summit:2", HETERO])
def test_transfers_phase_is_the_phase_of_the_transfers(machine_name: str) -> None:
    m = load_machine(machine_name)
    graph = from_module(import_model(ModelSpec("bert", "small")))
    checked = moved = 0
    for plan in (data_parallel(graph, m).graph, megatron(graph, m).graph):
        for node in plan.nodes.values():
            if node.is_source or node.op.startswith("parallel.") or node.view is None:
                continue
            types = tuple(None if r is None else plan.type_of(r) for r in node.operands)
            form = node_form_of(node, types)
            where = placement(node.types[0], node.view, m)
            for i, ref in enumerate(node.operands):
                if ref is None or plan.nodes[ref[0]].view is None:
                    continue
                at = placement(types[i], plan.nodes[ref[0]].view, m)  # type: ignore[arg-type]
                for source in (at, dict(zip(at, reversed(list(at.values())), strict=True))):
                    for wants in (False, True):
                        only = [source if j == i else None for j in range(len(types))]
                        grads = [wants if j == i else False for j in range(len(types))]
                        _, fwd, bwd = tasks_and_transfers(
                            form, where, types, list(range(len(types))), only, grads, m
                        )
                        want = phase(fwd) + phase(bwd)
                        got = transfers_phase(form, where, i, types[i], source, wants, m)  # type: ignore[arg-type]
                        assert got == want, (machine_name, node.name, i, got, want)
                        # as the mapping DP passes them: the placements' arrays (`as_array`)
                        arrays = (_array(where), _array(source))
                        assert transfers_phase(form, arrays[0], i, types[i], arrays[1], wants, m) == want  # type: ignore[arg-type]
                        checked += 1
                        moved += want > 0
    assert checked > 100 and moved > 20


def _array(where: dict) -> np.ndarray:
    """A placement's devices in coordinate order, shaped by its largest coordinate + 1."""
    shape = tuple(max(c[k] for c in where) + 1 for k in range(len(next(iter(where)))))
    return np.array(list(where.values()), dtype=np.int64).reshape(shape)
