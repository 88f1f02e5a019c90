"""Expert-parallel MoE (`unityc/runtime/experts.py`) on WORLD gloo ranks against a dense MoE in
one process.

`python experts_worker.py WORLD DIR`: for each case (EP degree, the expert-data-parallel rest,
routing balanced or skewed so that some experts get no rows, dtype), every rank routes its own
tokens through a softmax top-k router, runs `expert_parallel_moe` with its local SwiGLU experts,
takes the mean loss of its tokens, and after backward reduces its expert weights' gradients
over its expert-data group (`reduce_expert_grads`, 1/WORLD as a data-parallel average). The
reference runs the same router and experts densely (every expert on every token, weighted by
the gate where chosen, zero elsewhere) on all WORLD x T tokens, loss the mean of the replicas'
means. Compared: the loss, the gradients of this rank's input rows and router logits (through
the gates), and of every local expert weight. Prints one line per case; exit 1 on a mismatch."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from unityc.runtime.experts import expert_group_ranks, expert_parallel_moe, reduce_expert_grads

T, H, FF, E, K = 12, 8, 16, 8, 2


def swiglu(x: torch.Tensor, w: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return (F.silu(x @ w[0].T) * (x @ w[1].T)) @ w[2].T


def route(logits: torch.Tensor, skewed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert ids [T, k], renormalised softmax gates [T, k]); skewed: only experts 0-2 chosen."""
    if skewed:
        logits = logits.clone()
        logits[:, 3:] = logits[:, 3:] - 100.0
    probs = torch.softmax(logits.float(), -1)
    gates, ids = probs.topk(K, -1)
    return ids, (gates / gates.sum(-1, keepdim=True)).to(logits.dtype)


def dense(x: torch.Tensor, ids: torch.Tensor, gates: torch.Tensor, weights: list) -> torch.Tensor:
    out = torch.zeros_like(x)
    for e, w in enumerate(weights):
        gate = (gates * (ids == e)).sum(-1, keepdim=True)
        out = out + gate * swiglu(x, w)
    return out


def case(rank: int, world: int, ep: int, skewed: bool, dtype: torch.dtype) -> str:
    gen = torch.Generator().manual_seed(1234)
    xs = torch.randn(world * T, H, generator=gen).to(dtype)
    router = torch.randn(E, H, generator=gen).to(dtype)
    weights = [
        tuple((torch.randn(*s, generator=gen) / s[1] ** 0.5).to(dtype) for s in ((FF, H), (FF, H), (H, FF)))
        for _ in range(E)
    ]
    target = torch.randn(world * T, H, generator=gen).to(dtype)

    # the reference: all tokens, every expert dense, the mean of the replicas' mean losses
    ref_x = xs.clone().requires_grad_()
    ref_w = [tuple(t.clone().requires_grad_() for t in w) for w in weights]
    ref_r = router.clone().requires_grad_()
    ids, gates = route(ref_x @ ref_r.T, skewed)
    ref_y = dense(ref_x, ids, gates, ref_w)
    ref_loss = ((ref_y.float() - target.float()) ** 2).sum(-1).mean()
    ref_loss.backward()

    ep_groups, edp_groups = expert_group_ranks(world, ep)
    groups = {tuple(g): dist.new_group(g) for g in ep_groups + edp_groups}  # every rank, one order
    my_ep = next(g for g in ep_groups if rank in g)
    my_edp = next(g for g in edp_groups if rank in g)
    local_n = E // ep
    first = my_ep.index(rank) * local_n
    rows = slice(rank * T, (rank + 1) * T)
    x = xs[rows].clone().requires_grad_()
    r = router.clone().requires_grad_()
    local = [tuple(t.clone().requires_grad_() for t in weights[first + j]) for j in range(local_n)]
    experts = [lambda z, w=w: swiglu(z, w) for w in local]  # type: ignore[misc]
    ids, gates = route(x @ r.T, skewed)
    y = expert_parallel_moe(x, ids, gates, experts, groups[tuple(my_ep)])
    loss = ((y.float() - target[rows].float()) ** 2).sum(-1).mean()
    loss.backward()
    params = [t for w in local for t in w]
    reduce_expert_grads(params, groups[tuple(my_edp)], 1.0 / world)
    total = loss.detach().clone()
    dist.all_reduce(total)
    assert r.grad is not None
    dist.all_reduce(r.grad)  # the router is a dense weight: its data-parallel average
    r.grad /= world

    tol = 1e-5 if dtype == torch.float32 else 3e-2
    checks = {
        "loss": (total / world, ref_loss),
        "x": (x.grad / world, ref_x.grad[rows]),  # type: ignore[index, operator]  (its own mean's)
        "router": (r.grad, ref_r.grad),
    }
    for j, w in enumerate(local):
        for n, t in enumerate(w):
            checks[f"w{first + j}.{n}"] = (t.grad, ref_w[first + j][n].grad)
    worst = 0.0
    for name, (got, want) in checks.items():
        assert got is not None and want is not None, name
        got, want = got.detach().float(), want.detach().float()
        err = float((got - want).abs().max() / (want.abs().max() + 1e-12))
        worst = max(worst, err)
        if err > tol:
            raise AssertionError(f"ep {ep} {name}: relative error {err:.2e} > {tol:.0e}")
    kind = "skewed" if skewed else "balanced"
    return f"ep {ep} x edp {world // ep}, {kind}, {str(dtype)[6:]}: ok ({len(checks)} tensors, {worst:.1e})"


def main(rank: int, world: int, folder: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world)
    cases = [(world, True, torch.float32), (2, False, torch.bfloat16)]
    if world == 4:
        cases.insert(0, (world, False, torch.float32))
        cases.insert(2, (2, True, torch.float32))
    try:
        for ep, skewed, dtype in cases:
            line = case(rank, world, ep, skewed, dtype)
            if rank == 0:
                print(line, flush=True)
    finally:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    world, folder = int(sys.argv[1]), sys.argv[2]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    mp.spawn(main, args=(world, folder), nprocs=world)
