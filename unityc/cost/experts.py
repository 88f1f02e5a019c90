"""Expert parallelism priced as `runtime/experts.py` runs it: the all-to-alls of dispatch and
combine, forward and backward, and the memory of the dispatched rows and the experts'
activations on one rank.

One rank of an expert-parallel (EP) group of P devices routes T tokens of H elements to k
experts each: R = T·k rows, a buffer of S = R·H·element bytes. Forward runs three all-to-alls
over the group (`collective_floor("all_to_all", ...)`, the alpha-beta model of
`cost/communication.py`): the row counts (E int64 values), the rows (dispatch) and the experts'
outputs back (combine); backward runs the duals of the last two with the gradients (the counts
are not exchanged again: the splits are kept). The router's load enters as `skew`, the slowest
rank's received rows over the balanced mean (1: balanced, P: every row to one rank): a rank
waits for its whole receive, so the bytes term is that of skew·S.

Where the group spans nodes, its members on one node share the node's link (`inter_node`, the
node's bandwidth per direction): m members each send S·(P-m)/P off the node, so the bytes term
is at least m·skew·S·(P-m)/P over that link. `collective_floor` alone, pricing one device's
buffer over the slowest link, would let every member use the whole node link at once.

Memory (the slowest rank's, skew·R rows received): the received rows (the experts' input, saved
by their first matmul), the experts' intermediates saved for backward per received row
(`ffn_saved`), the returned rows saved by the gate weighting (R·H), and the permuted send buffer
(R·H, transient: freed once exchanged).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from unityc.cost.communication import collective_floor
from unityc.cost.compute import Piece
from unityc.cost.schedule import Comm
from unityc.dialects.pcg_types import TensorType
from unityc.machine.spec import Machine
from unityc.runtime.expert_ranks import expert_group_ranks

COUNT_BYTES = 8
"""Bytes of one exchanged row count (int64, `runtime/experts.dispatch`)."""


@dataclass(frozen=True)
class ExpertLoad:
    """What one rank of an EP group routes per micro-batch, and how unevenly it lands."""

    tokens: int
    """Tokens this rank routes (its share of batch x sequence)."""
    hidden: int
    top_k: int
    experts: int
    element: int = 2
    """Bytes of one activation element (2: bf16)."""
    skew: float = 1.0
    """The slowest rank's received rows over the balanced mean: 1 (balanced) ... the EP degree."""

    def __post_init__(self) -> None:
        for name in ("tokens", "hidden", "top_k", "experts", "element"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"experts: {name} must be a positive integer, not {value!r}")
        if self.top_k > self.experts:
            raise ValueError(f"experts: top-{self.top_k} of {self.experts} experts")
        if not self.skew >= 1.0:
            raise ValueError(
                f"experts: the skew is the slowest rank's rows over the mean (>= 1), not {self.skew}"
            )

    @property
    def rows(self) -> int:
        """(token, expert) rows this rank sends: T·k."""
        return self.tokens * self.top_k

    @property
    def buffer(self) -> int:
        """Bytes of this rank's rows: T·k·H·element."""
        return self.rows * self.hidden * self.element

    def received(self, degree: int) -> float:
        """Rows the slowest rank of a group of `degree` receives (skew x the mean T·k)."""
        if self.skew > degree:
            raise ValueError(f"experts: a skew of {self.skew} exceeds the EP degree {degree}")
        if self.experts % degree:
            raise ValueError(f"experts: {self.experts} experts do not split over {degree} ranks")
        return self.skew * self.rows


def expert_devices(degree: int, tensor: int = 1, start: int = 0) -> tuple[int, ...]:
    """The devices of the first EP group of a stage group starting at device `start`, laid out
    as the runtime lays its ranks (`runtime.expert_ranks.expert_group_ranks`: tensor innermost, then
    expert): within a node while degree x tensor fits one."""
    ep, _ = expert_group_ranks(degree * tensor, degree, tensor)
    return tuple(start + r for r in ep[0])


def all_to_all_seconds(nbytes: float, devices: Sequence[int], machine: Machine) -> float:
    """One all-to-all of `nbytes` per device over `devices` (`collective_floor`'s bytes and
    latency parts), its bytes term at least the node link's share where the group spans nodes."""
    data, latency = collective_floor("all_to_all", nbytes, devices, machine)
    if data <= 0:
        return latency
    per_node: dict[int, int] = {}
    for d in devices:
        node = machine.device(d).node
        per_node[node] = per_node.get(node, 0) + 1
    n = len(devices)
    if len(per_node) > 1:
        node, m = max(per_node.items(), key=lambda item: item[1])
        link = machine.nodes[node].inter_node
        data = max(data, m * nbytes * (n - m) / n / link.bandwidth)
    return data + latency


@dataclass(frozen=True)
class ExpertExchange:
    """The all-to-alls of one MoE layer's dispatch and combine on one EP group."""

    forward: tuple[Comm, ...]
    """Counts, dispatch, combine."""
    backward: tuple[Comm, ...]
    """Combine's dual, dispatch's dual (the gradients of the rows)."""

    @property
    def fwd_s(self) -> float:
        return sum(c.seconds for c in self.forward)

    @property
    def bwd_s(self) -> float:
        return sum(c.seconds for c in self.backward)


def expert_exchange(load: ExpertLoad, devices: Sequence[int], machine: Machine) -> ExpertExchange:
    """The exchanges of `load` over the EP group `devices` (one device: none)."""
    group = tuple(devices)
    if len(group) < 2:
        return ExpertExchange((), ())
    rows = load.received(len(group)) * load.hidden * load.element  # the slowest rank's receive
    counts = load.experts * COUNT_BYTES
    count = Comm(group, all_to_all_seconds(counts, group, machine), counts)
    move = Comm(group, all_to_all_seconds(rows, group, machine), rows)
    return ExpertExchange((count, move, move), (move, move))


def ffn_saved(hidden: int, ffn: int, gated: bool = True) -> int:
    """Elements one expert saves for backward per row, as eager autograd runs it: the input
    (H, shared by its matmuls) and, gated (SwiGLU: silu(x W1) * (x W3) then W2), the two
    projections, silu's output and the product (4·F); ungated (act(x W1) W2), the projection
    and the activation (2·F)."""
    return hidden + (4 if gated else 2) * ffn


@dataclass(frozen=True)
class ExpertMemory:
    """Bytes of one MoE layer on the slowest rank of its EP group, per micro-batch."""

    dispatched: float
    """The received rows (the experts' input), saved for backward."""
    activations: float
    """The experts' intermediates saved for backward, over the received rows (beyond the input)."""
    combined: float
    """The returned rows, saved by the gate weighting."""
    transient: float
    """The permuted send buffer, freed once exchanged."""

    @property
    def saved(self) -> float:
        return self.dispatched + self.activations + self.combined


def expert_memory(load: ExpertLoad, degree: int, ffn: int, gated: bool = True) -> ExpertMemory:
    """`ExpertMemory` of `load` over an EP group of `degree` ranks, experts of `ffn` elements."""
    received = load.received(degree)
    per_row = ffn_saved(load.hidden, ffn, gated) - load.hidden  # (the input is `dispatched`)
    return ExpertMemory(
        dispatched=received * load.hidden * load.element,
        activations=received * per_row * load.element,
        combined=load.buffer,
        transient=load.buffer,
    )


def expert_degree(types: Sequence[TensorType | None]) -> int:
    """The expert-parallel degree of a `pcg.experts` with these operand types: the shards of
    its gate_up's expert dim (1: every task holds every expert)."""
    gate_up = types[3] if len(types) > 3 else None
    return 1 if gate_up is None else gate_up.shard[0]


def op_load(x: Piece, ids: Piece, experts: int, skew: float = 1.0) -> ExpertLoad:
    """What one task of an expert-parallel `pcg.experts` routes: its token piece `x` [T, H] to
    the k experts of each row of `ids` [T, k] among `experts` (balanced by default)."""
    element = x.nbytes // max(x.numel, 1)
    return ExpertLoad(x.shape[0], x.shape[1], ids.shape[1], experts, element, skew)


def experts_exchanges(
    groups: Sequence[Sequence[int]], load: ExpertLoad, machine: Machine
) -> tuple[list[Comm], list[Comm]]:
    """Forward and backward all-to-alls (`expert_exchange`) of each expert-parallel group (the
    devices of the tasks differing only in the expert factor)."""
    fwd: list[Comm] = []
    bwd: list[Comm] = []
    for devices in groups:
        exchange = expert_exchange(load, devices, machine)
        fwd += exchange.forward
        bwd += exchange.backward
    return fwd, bwd
