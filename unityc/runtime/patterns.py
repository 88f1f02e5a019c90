"""The collectives a generated program runs, and each one's dual (the collective that carries
its gradients back). The cost model prices exactly these (`unityc.cost.communication` imports
them from here); plain Python, so the compiler can import it without torch.
"""

PATTERNS = (
    "p2p",
    "scatter",
    "gather",
    "broadcast",
    "reduce",
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
)

DUAL = {
    "p2p": "p2p",
    "scatter": "gather",
    "gather": "scatter",
    "broadcast": "reduce",
    "reduce": "broadcast",
    "all_reduce": "all_reduce",
    "reduce_scatter": "all_gather",
    "all_gather": "reduce_scatter",
    "all_to_all": "all_to_all",
}
"""Backward of each pattern: partition/combine are scatter/gather, replicate/reduce are
broadcast/reduce, reduce_scatter/all_gather; p2p, all_reduce and all_to_all are their own."""
