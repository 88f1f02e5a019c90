"""Expert parallelism for a dropless top-k mixture of experts: dispatch, local experts, combine.

The E experts of an MoE layer are sharded over an expert-parallel (EP) group of P ranks, E/P
consecutive experts per rank (rank r holds experts r·E/P ... (r+1)·E/P - 1, Megatron-Core's
`local_expert_indices`). Every rank routes its own tokens x [T, H] (top-k expert ids [T, k],
gate weights [T, k]) and then, as Megatron-Core's all-to-all token dispatcher and torchtitan's
expert-parallel wrapper do:

1. **permute**: each token is copied once per chosen expert and the T·k rows are sorted by
   expert (a stable sort, so by destination rank too);
2. **counts**: the rows per (rank, expert) are exchanged with `all_to_all_single` (every rank
   learns how many rows it receives from each peer for each of its local experts);
3. **dispatch**: the rows are exchanged with `all_to_all_single` and variable split sizes;
4. **group**: the received rows (ordered by source rank, then expert) are regrouped by local
   expert, so each expert runs once on one contiguous slice (its run-time size);
5. **return**: the expert outputs are ungrouped and sent back by the reverse all-to-all;
6. **combine**: each token's k outputs are weighted by its gates and summed.

Dropless: every row reaches its expert (no capacity factor). The exchange is an autograd
Function whose backward is the all-to-all with the split sizes swapped, so the gradients of x,
of the gates and of every expert weight are exact (the expert ids are not differentiated). An
expert's weight gradient on its rank sums the contributions of every token of the EP group
routed to it; `reduce_expert_grads` then sums it over the expert-data-parallel group (the ranks
holding the same experts, one per EP group) with the caller's scale (1/R for per-replica mean
losses over R replicas, as the dense weights' data-parallel average).

`expert_group_ranks` lays the groups out over a stage group's ranks: tensor innermost, then
expert, then expert-data (Megatron-Core's `tp-ep-dp` order for expert layers), so an EP group
of degree <= node / tensor stays within a node, as tensor parallelism does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.nn.functional as F

from unityc.runtime import kernels
from unityc.runtime.expert_ranks import expert_group_ranks

__all__ = [
    "AllToAll",
    "Dispatch",
    "Expert",
    "combine",
    "dispatch",
    "expert_group_ranks",
    "expert_parallel_experts",
    "expert_parallel_moe",
    "reduce_expert_grads",
    "run_experts",
]

Expert = Callable[[torch.Tensor], torch.Tensor]
"""One local expert: rows [n, H] -> rows [n, H] (a SwiGLU FFN, a module, a closure)."""


@dataclass(frozen=True)
class Dispatch:
    """What `combine` needs to undo one `dispatch`: the row permutations and split sizes."""

    order: torch.Tensor
    """The T·k (token, choice) rows sorted by expert: row i of the sorted rows is flat row order[i]."""
    group_order: torch.Tensor
    """The received rows regrouped by local expert: grouped row i is received row group_order[i]."""
    send: tuple[int, ...]
    """Rows sent to each rank of the EP group (and received back in `combine`)."""
    recv: tuple[int, ...]
    """Rows received from each rank of the EP group."""
    per_expert: tuple[int, ...]
    """Rows each local expert runs on, in local-expert order (the grouped rows' slices)."""
    tokens: int
    top_k: int


def dispatch(
    x: torch.Tensor, ids: torch.Tensor, experts: int, group: dist.ProcessGroup | None = None
) -> tuple[torch.Tensor, Dispatch]:
    """This rank's tokens `x` [T, H] sent to their top-k experts `ids` [T, k] over the EP
    `group` (None: one rank holds all `experts`). Returns the rows this rank's local experts
    run on, grouped by local expert (`Dispatch.per_expert` rows each), and the record
    `combine` reads."""
    world = 1 if group is None else dist.get_world_size(group)
    _check(x, ids, experts, world)
    local = experts // world
    tokens, top_k = ids.shape
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    rows = x.index_select(0, order // top_k)  # token of each sorted (token, choice) row
    counts = torch.bincount(flat, minlength=experts)
    if world == 1:
        received = counts.view(1, local)
    else:
        received = torch.empty_like(counts)
        dist.all_to_all_single(received, counts, group=group)
        received = received.view(world, local)  # [source rank, local expert]
    send = tuple(counts.view(world, local).sum(1).tolist())
    recv = tuple(received.sum(1).tolist())
    if world > 1:
        rows = AllToAll.apply(rows, recv, send, group)
    # received rows come by source rank, then expert: regroup them by local expert (stable)
    local_ids = torch.arange(local, device=x.device).repeat(world)
    group_order = torch.argsort(torch.repeat_interleave(local_ids, received.reshape(-1)), stable=True)
    grouped = rows.index_select(0, group_order)
    per_expert = tuple(received.sum(0).tolist())
    return grouped, Dispatch(order, group_order, send, recv, per_expert, tokens, top_k)


def combine(
    out: torch.Tensor, gates: torch.Tensor, record: Dispatch, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """The local experts' outputs `out` (rows grouped as `dispatch` returned them) sent back to
    their tokens and summed weighted by `gates` [T, k]: [T, H'] in the type torch promotes `out`
    and `gates` to (under bf16-mixed autocast: bf16 expert rows times fp32 gates, summed in fp32
    as `kernels.experts` and Hugging Face's experts loop sum them; the caller casts to the
    tokens' type)."""
    if gates.shape != (record.tokens, record.top_k):
        raise ValueError(f"experts: gates {tuple(gates.shape)} are not [{record.tokens}, {record.top_k}]")
    rows = out.index_select(0, _inverse(record.group_order))  # back to the received order
    if group is not None and dist.get_world_size(group) > 1:
        rows = AllToAll.apply(rows, record.send, record.recv, group)
    flat = rows.index_select(0, _inverse(record.order))  # back to (token, choice) order
    weighted = flat.view(record.tokens, record.top_k, -1) * gates.unsqueeze(-1)  # (as kernels.experts)
    return weighted.sum(1)


def run_experts(rows: torch.Tensor, per_expert: Sequence[int], local: Sequence[Expert]) -> torch.Tensor:
    """Each local expert on its contiguous slice of `rows` (grouped by `dispatch`); an expert
    with no rows still runs on an empty slice, so its weights join the graph on every rank."""
    if len(per_expert) != len(local):
        raise ValueError(f"experts: {len(local)} local experts for {len(per_expert)} row groups")
    return torch.cat([e(part) for e, part in zip(local, rows.split(list(per_expert)), strict=True)])


def expert_parallel_moe(
    x: torch.Tensor,
    ids: torch.Tensor,
    gates: torch.Tensor,
    local: Sequence[Expert],
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """The dropless top-k MoE output for this rank's tokens: `dispatch`, `run_experts` (this
    rank's `local` experts, len(local) x EP degree experts in all), `combine`."""
    world = 1 if group is None else dist.get_world_size(group)
    rows, record = dispatch(x, ids, len(local) * world, group)
    return combine(run_experts(rows, record.per_expert, local), gates, record, group)


class ExpertGroup(Protocol):
    """The ranks of one expert-parallel group in expert-slice order (rank j holds slice j) and
    their process group (the program's `ctx.shards(...)`)."""

    @property
    def ranks(self) -> tuple[int, ...]: ...

    @property
    def process_group(self) -> Any: ...


def expert_parallel_experts(
    x: torch.Tensor,
    indices: torch.Tensor,
    weights: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    activation: str = "silu",
    group: ExpertGroup | None = None,
) -> torch.Tensor:
    """One task of an expert-parallel `pcg.experts` (what `-t torch` emits): this rank's tokens
    x [T, H] routed to their `indices` among all E experts of its `group`, this rank holding the
    E/P consecutive experts gate_up [E/P, 2I, H], down [E/P, H, I] of its slice; `dispatch`, one
    gated FFN per local expert (as `kernels.experts` runs each), `combine`. Returns [T, H] in
    x's dtype. No group: `kernels.experts` on every expert."""
    if group is None or len(group.ranks) == 1:
        return kernels.experts(x, indices, weights, gate_up, down, activation)
    if activation != "silu":
        raise ValueError(f"experts: unknown activation '{activation}'")
    local = gate_up.shape[0]
    ranks = tuple(group.ranks)
    place = [sorted(ranks).index(r) for r in ranks]  # the process group's order of slice j's holder
    if place != list(range(len(ranks))):
        table = torch.tensor(place, device=indices.device)
        indices = table[indices // local] * local + indices % local

    def ffn(e: int) -> Expert:
        def run(rows: torch.Tensor) -> torch.Tensor:
            gate, up = F.linear(rows, gate_up[e]).chunk(2, dim=-1)
            return F.linear(F.silu(gate) * up, down[e])

        return run

    process_group = group.process_group
    process_group = dist.group.WORLD if process_group is None else process_group  # (None: every rank)
    out = expert_parallel_moe(x, indices, weights, [ffn(e) for e in range(local)], process_group)
    return out.to(x.dtype)


def reduce_expert_grads(
    params: Iterable[torch.Tensor], group: dist.ProcessGroup | None, scale: float = 1.0
) -> None:
    """Each expert weight's gradient summed over its expert-data-parallel `group` (the ranks
    holding the same experts) and multiplied by `scale`; one all-reduce per weight."""
    for p in params:
        if p.grad is None:
            raise ValueError("experts: an expert weight has no gradient (run backward first)")
        if group is not None and dist.get_world_size(group) > 1:
            dist.all_reduce(p.grad, group=group)
        if scale != 1.0:
            p.grad.mul_(scale)


class AllToAll(torch.autograd.Function):
    """`all_to_all_single` with variable split sizes; backward: the same with the splits swapped."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: torch.Tensor, recv: Sequence[int], send: Sequence[int], group: dist.ProcessGroup
    ) -> torch.Tensor:
        ctx.splits = (recv, send)
        ctx.group = group
        return _all_to_all(x.contiguous(), recv, send, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # type: ignore[override]
        recv, send = ctx.splits
        return _all_to_all(grad.contiguous(), send, recv, ctx.group), None, None, None


def _all_to_all(
    x: torch.Tensor, recv: Sequence[int], send: Sequence[int], group: dist.ProcessGroup
) -> torch.Tensor:
    out = x.new_empty((sum(recv), *x.shape[1:]))
    dist.all_to_all_single(out, x, list(recv), list(send), group=group)
    return out


def _inverse(order: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(order)
    out[order] = torch.arange(order.numel(), device=order.device)
    return out


def _check(x: torch.Tensor, ids: torch.Tensor, experts: int, world: int) -> None:
    if x.dim() != 2 or ids.dim() != 2 or ids.shape[0] != x.shape[0]:
        raise ValueError(
            f"experts: tokens must be [T, H] and ids [T, k], not {tuple(x.shape)} and {tuple(ids.shape)}"
        )
    if ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"experts: expert ids must be integers, not {ids.dtype}")
    if experts < 1 or experts % world:
        raise ValueError(f"experts: {experts} experts do not split over {world} expert-parallel ranks")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= experts):
        raise ValueError(f"experts: an expert id is outside 0 ... {experts - 1}")
