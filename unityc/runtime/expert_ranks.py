"""The expert-parallel and expert-data-parallel groups over a stage group's ranks, torch-free
(the compiler's layout and cost model import it without importing torch; `runtime/experts.py`
builds its process groups from it)."""

from __future__ import annotations


def expert_group_ranks(ranks: int, expert: int, tensor: int = 1) -> tuple[list[list[int]], list[list[int]]]:
    """(EP groups, expert-data-parallel groups) over `ranks` ranks (0 ... ranks-1 of one stage
    group): rank = t + tensor·(e + expert·d) for tensor index t, expert index e and expert-data
    index d. An EP group varies e (t, d fixed); an expert-data group varies d (t, e fixed)."""
    if expert < 1 or tensor < 1 or ranks % (expert * tensor):
        raise ValueError(f"experts: expert {expert} x tensor {tensor} does not divide {ranks} ranks")
    data = ranks // (expert * tensor)
    ep = [[t + tensor * (e + expert * d) for e in range(expert)] for d in range(data) for t in range(tensor)]
    edp = [[t + tensor * (e + expert * d) for d in range(data)] for e in range(expert) for t in range(tensor)]
    return ep, edp
