"""Lowerings of the mixture-of-experts ops (`frontend/moe.py` makes the export call them):
torch.topk, `unityc::topk` (group-limited) and `unityc::experts`."""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

from unityc.dialects import pcg
from unityc.frontend import moe  # noqa: F401  (registers the unityc:: ops lowered here)
from unityc.frontend.importer import Const, FxImporter, Unusable, lowering, tensor_type


@lowering(torch.ops.aten.topk.default)
def _topk(
    im: FxImporter, node: fx.Node, x: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[Any, Any]:
    """torch.topk along the last dim: the indices a `pcg.topk`, the values a `pcg.take` of the
    input at them (so the gradient reaches the chosen elements only, as topk's does)."""
    x = im.tensor(x)
    rank = tensor_type(x).rank
    if dim % rank != rank - 1 or not largest:
        raise im.fail("topk is supported only for the largest elements along the last dim")
    used = {u.args[1] for u in node.users if u.target is operator.getitem}
    index = im.op(pcg.TopkOp, [x], k=k)
    values = im.op(pcg.TakeOp, [x, index], dim=rank - 1) if 0 in used else Unusable("unused topk values")
    return values, index


@lowering(torch.ops.unityc.topk.default)
def _grouped_topk(
    im: FxImporter, node: fx.Node, x: Any, k: int, groups: int, group_k: int, group_top: int
) -> Any:
    return im.op(pcg.TopkOp, [im.tensor(x)], k=k, groups=groups, group_k=group_k, group_top=group_top)


@lowering(torch.ops.unityc.experts.default)
def _experts(im: FxImporter, node: fx.Node, *operands: Any) -> Any:
    if any(isinstance(v, Const) for v in operands[:3]):
        raise im.fail("the experts' tokens, indices and weights must be computed, not constants")
    return im.op(pcg.ExpertsOp, [im.tensor(v) for v in operands], activation="silu")
