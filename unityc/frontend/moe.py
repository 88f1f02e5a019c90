"""Mixture-of-experts layers, imported with static shapes.

Hugging Face's experts loop (`torch.where(expert_mask[e])` per expert, `index_add_`) has
data-dependent shapes that torch.export cannot keep. While the importer exports a model,
`static_moe` makes each experts module call one op instead, `unityc::experts` (through Hugging
Face's own `ExpertsInterface`, as its grouped_mm kernels plug in), which lowers to `pcg.experts`;
and a DeepSeek-V3 router, whose group-limited selection scatters into masks, selects by one
`unityc::topk` (lowered to a group-limited `pcg.topk`). Only the export sees them: the module
itself, and so `--check`'s reference, keep Hugging Face's own forward. Everything else of a
router (scores, the selected weights by gather, renormalization, scaling) and the shared
experts and their gates are ordinary ops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from unityc.runtime.kernels import experts, topk_indices

IMPLEMENTATION = "unityc_static"
"""The name of the experts implementation registered with Hugging Face's ExpertsInterface."""

GROUPED_ROUTERS = ("DeepseekV3TopkRouter",)
"""Routers whose group-limited selection is replaced by `unityc::topk` during export."""


@torch.library.custom_op("unityc::topk", mutates_args=())
def _topk_op(x: torch.Tensor, k: int, groups: int, group_k: int, group_top: int) -> torch.Tensor:
    return topk_indices(x, k, groups, group_k, group_top)


@_topk_op.register_fake
def _(x: torch.Tensor, k: int, groups: int, group_k: int, group_top: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], k), dtype=torch.long)


@torch.library.custom_op("unityc::experts", mutates_args=())
def _experts_op(
    x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor
) -> torch.Tensor:
    return experts(x, indices, weights, gate_up, down)


@_experts_op.register_fake
def _(
    x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor
) -> torch.Tensor:
    return torch.empty_like(x)


def _static_experts(
    module: nn.Module, hidden: torch.Tensor, index: torch.Tensor, weights: torch.Tensor
) -> Any:
    gate_up: Any = module.gate_up_proj  # nn.Parameters
    down: Any = module.down_proj
    if getattr(module, "is_transposed", False):  # stored (in, out), as grouped_mm reads them (Aria)
        gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
    return torch.ops.unityc.experts(hidden, index, weights, gate_up, down)


def _static_grouped_router(module: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """DeepSeek-V3's router (`DeepseekV3TopkRouter.forward`) with its selection as one top-k:
    sigmoid scores; the experts chosen by score + e_score_correction_bias within the topk_group
    best of n_group groups (each scored by its two best); their weights the scores without the
    bias, renormalized if norm_topk_prob, times routed_scaling_factor."""
    hidden = hidden.view(-1, module.hidden_dim)
    logits = F.linear(hidden.type(torch.float32), module.weight.type(torch.float32))
    scores = logits.sigmoid()
    choice = scores + module.e_score_correction_bias
    index = torch.ops.unityc.topk(choice, module.top_k, module.num_group, module.topk_group, 2)
    weights = scores.gather(1, index)
    if module.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return logits, weights * module.routed_scaling_factor, index


def _static_experts_apply(module: nn.Module) -> bool:
    """Whether `module` is a Hugging Face experts module `unityc::experts` computes: gate and up
    concatenated, no biases, SiLU, the default gating (weights stored transposed, as Aria's are,
    are transposed back in the graph)."""
    if not (hasattr(module, "gate_up_proj") and hasattr(module, "down_proj")):
        return False  # before importing transformers: zoo models do not need it
    from transformers.activations import SiLUActivation
    from transformers.integrations import moe

    return (
        getattr(module, "config", None) is not None
        and getattr(module, "has_gate", False)
        and getattr(module, "is_concatenated", False)
        and not getattr(module, "has_bias", True)
        and not getattr(module, "has_post_expert_norm", True)
        and isinstance(getattr(module, "act_fn", None), SiLUActivation | nn.SiLU)
        and getattr(type(module), "_apply_gate", None) is moe._default_apply_gate
    )


@contextlib.contextmanager
def static_moe(model: nn.Module) -> Iterator[None]:
    """While exporting `model`: its experts modules call `unityc::experts`, its grouped routers
    `unityc::topk`; restored afterwards. A model without MoE layers is untouched."""
    chosen = [m for m in model.modules() if _static_experts_apply(m)]
    routers = [m for m in model.modules() if type(m).__name__ in GROUPED_ROUTERS]
    if not chosen and not routers:
        yield
        return
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(IMPLEMENTATION, _static_experts)
    configs: dict[int, Any] = {id(m.config): m.config for m in chosen}  # HF PretrainedConfigs
    saved = {key: c._experts_implementation for key, c in configs.items()}
    try:
        for c in configs.values():
            c._experts_implementation = IMPLEMENTATION
        for r in routers:
            r.forward = _static_grouped_router.__get__(r)
        yield
    finally:
        for key, c in configs.items():
            c._experts_implementation = saved[key]
        for r in routers:
            del r.forward
