"""Inter-op placement of parallel branches (issue 29: Inception's blocks): each branch of a
block data parallel on its own group of devices, the groups disjoint, so the branches run side
by side instead of one after the other on every device.

A *join* is a `pcg.concat` whose operands have ops of their own: a branch is the ops whose
results reach anything only through one operand (back to the ops the operands share: the
block's input), and counts where it has weights of its own (a rotary embedding's concatenated halves or
a U-Net's skip connection are no branches: the trade below is about weights). On n devices, with
K the most branches of a join that divides n, every join of k <= K branches runs its branches
and itself data parallel n / K ways, branch i pinned to devices i·n/K … (i+1)·n/K - 1 (one group
size for the graph: see `branch_groups`); everything else is data parallel over all n
(`strategies.batch_forms`, batch norms synchronized), and the mapping DP places the rest, the
moves into and out of the groups included. A join inside another join's branch (Inception-E's
1x3 / 3x1 pair) stays in the outer branch's group.

What it trades (the cost model prices both sides): each group all-reduces only its branch's
weight gradients, among n / K devices, against moving every block's input to its groups and the
branches' outputs to the join, and a group's time is its branch's (the branches' work differs).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence

from unityc.graph import Graph, Node
from unityc.graph.simplify import fuse_collectives, reduce_loss, simplify
from unityc.machine.spec import Machine
from unityc.search.plans import PricedPlan, Pricing
from unityc.search.rebuild import Operand, Proposal, rebuild
from unityc.search.strategies import batch_forms, sync_batch_norm
from unityc.search.views import View, canonical_view, task_degrees, to_attr


def _reads_weight(graph: Graph, nid: int) -> bool:
    return any(graph.nodes[r[0]].op == "pcg.weight" for r in graph.nodes[nid].operand_refs())


def _branch(graph: Graph, users: Mapping[int, list[int]], position: Mapping[int, int], root: int) -> set[int]:
    """The ops whose results reach anything only through `root` (root included, if its only
    reader is the join): walked back from it, latest first, an op joining once every reader of
    it has. Touches the branch and its border only (a transformer's rotary halves: two ops)."""
    region: set[int] = set()
    heap = [(-position[root], root)]
    seen = {root}
    while heap:
        _, nid = heapq.heappop(heap)
        node = graph.nodes[nid]
        if node.is_source or (nid != root and not all(u in region for u in users[nid])):
            continue
        region.add(nid)
        for r in node.operand_refs():
            if r[0] not in seen:
                seen.add(r[0])
                heapq.heappush(heap, (-position[r[0]], r[0]))
    return region


def joins(graph: Graph) -> dict[int, list[frozenset[int]]]:
    """Each join (`pcg.concat` with at least two branches with weights of their own) -> its
    branches' ops, outermost joins only: a join inside another's branch belongs to that branch."""
    users = graph.users()
    order = graph.topological()
    position = {nid: i for i, nid in enumerate(order)}
    found: dict[int, list[frozenset[int]]] = {}
    claimed: set[int] = set()
    for nid in reversed(order):
        node = graph.nodes[nid]
        if node.op != "pcg.concat" or nid in claimed:
            continue
        roots = [r[0] for r in node.operand_refs() if users[r[0]] == [nid]]
        branches = [frozenset(b) for b in (_branch(graph, users, position, r) for r in dict.fromkeys(roots))]
        branches = [b for b in branches if any(_reads_weight(graph, x) for x in b)]
        if len(branches) >= 2:
            found[nid] = branches
            claimed.update(*branches)
    return found


def branch_groups(graph: Graph, n: int) -> dict[int, tuple[int, int]]:
    """Op -> (the group size, its group index) for the ops of every join's branches and the
    join itself (group 0). One group size for the whole graph, n / K for the most branches K
    of a join that divides n: a join of fewer branches leaves groups idle rather than move its
    input between groups of another size (Inception's 3-branch blocks between 4-branch ones:
    16-device groups would regroup every tensor and straddle 6-GPU nodes). {} where no join
    has branches enough."""
    found = joins(graph)
    ks = [len(b) for b in found.values() if n % len(b) == 0]
    if not ks:
        return {}
    size = n // max(ks)
    groups: dict[int, tuple[int, int]] = {}
    for join, branches in found.items():
        if len(branches) > max(ks):
            continue
        groups[join] = (size, 0)
        for i, ops in enumerate(branches):
            groups.update(dict.fromkeys(ops, (size, i)))
    return groups


def branch_graph(graph: Graph, n: int) -> tuple[Graph, dict[int, tuple[int, int]]]:
    """The plan's graph (see the module docstring) and, for every op of a branch in it (the
    moves into a group included), its group's (first device, size), for `branch_plan` to pin."""
    base = sync_batch_norm(graph)
    degree = {nid: d for nid, (d, _) in branch_groups(base, n).items()}

    def propose(nid: int, node: Node, operands: Sequence[Operand]) -> list[Proposal]:
        return batch_forms(operands, degree.get(nid, n))

    plan = fuse_collectives(reduce_loss(simplify(rebuild(base, propose))))
    pinned = {nid: (i * d, d) for nid, (d, i) in branch_groups(plan, n).items() if d < n}
    return plan, pinned


def branch_plan(graph: Graph, machine: Machine, pricing: Pricing) -> PricedPlan | None:
    """The branch-placed plan on every device of `machine`, mapped and priced; None where the
    graph has no join whose branches divide the devices, or where a branch op runs as more tasks
    than its group has devices (it took no form of the group's size: a batch of 2 images
    cannot be split 4 ways, so its ops stay in copies on every device)."""
    n = machine.num_devices
    plan, pinned = branch_graph(graph, n)
    if not pinned:
        return None
    fixed: dict[int, View] = {}
    for nid, (start, size) in pinned.items():
        degrees = task_degrees(plan.nodes[nid].types[0])
        if math.prod(degrees) > size:
            return None
        fixed[nid] = canonical_view(degrees, start)
    mapped = pricing.mapper(machine).map(plan, fixed=fixed)
    if not mapped.feasible:
        return None
    for nid, view in mapped.views.items():
        plan.with_view(nid, to_attr(view, machine))
    groups = len({start for start, _ in pinned.values()})
    note = f"each block's branches data parallel on {groups} disjoint device groups"
    return PricedPlan("branches", plan, pricing.estimate(plan, machine), mapped, note)
