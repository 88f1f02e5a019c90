"""This rank's pieces of the weights and of the batch, cut from the reference model.

The model is rebuilt from the spec the plan records (`unityc.model`: a factory file, a zoo
name or a HuggingFace config, settings, seed) by the builder the generated program hands to
`main` (`unityc.models.spec.build_reference`): the runtime itself builds no model, so it imports
nothing else of unityc.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from unityc.runtime.parts import WeightKey
from unityc.runtime.plan import Model, Plan

Build = Callable[[Model], tuple[nn.Module, dict[str, torch.Tensor]]]
"""Builds the reference model a plan records (seeded weights, training mode) and its example
inputs; raises ValueError when it cannot."""


class SourceError(ValueError):
    """The reference model does not provide a weight or input the plan needs."""


@dataclass
class Loaded:
    """The reference model (training mode, seeded weights) and its example inputs by name."""

    module: nn.Module
    inputs: dict[str, torch.Tensor]


def load_reference(model: Model, build: Build | None) -> Loaded:
    """The reference model with its seeded weights and example inputs."""
    if build is None:
        raise SourceError(
            "this program passes no model builder to rt.main (made by an older unityc?): "
            "regenerate it with unityc-opt plan.mlir -t torch"
        )
    try:
        module, inputs = build(model)
    except ValueError as e:  # unityc.models' ModelError
        raise SourceError(f"cannot rebuild the reference model: {e}") from None
    return Loaded(module, inputs)


def _dtype(name: torch.dtype, float_dtype: torch.dtype | None) -> torch.dtype:
    return float_dtype if float_dtype is not None and name.is_floating_point else name


def local_weights(
    plan: Plan, rank: int, module: nn.Module, device: torch.device, float_dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """This rank's weight pieces as leaf parameters, by the plan's weight key (plan order; a part
    `key[:, 0:8]` is cut from its stored tensor); floats in `float_dtype` when given; frozen
    weights (`Plan.frozen`) require no gradient."""
    state = module.state_dict(keep_vars=True)
    out: dict[str, torch.Tensor] = {}
    for key, layout in plan.weights.items():
        part = WeightKey.parse(key)
        if part.stored not in state:
            raise SourceError(
                f"the model has no weight '{part.stored}' (the plan was made for another model?)"
            )
        try:
            value = part.take(state[part.stored].detach())
        except ValueError as e:
            raise SourceError(f"{e} (the plan was made for another model?)") from None
        if tuple(value.shape) != layout.shape:
            raise SourceError(
                f"weight '{key}' has shape {list(value.shape)}, the plan says {list(layout.shape)}"
            )
        piece = layout.piece_of(rank, value.to(_dtype(layout.torch_dtype, float_dtype)))
        if piece is not None:
            out[key] = nn.Parameter(piece.to(device).contiguous(), requires_grad=plan.trained(key))
    return out


def part_sizes(plan: Plan, module: nn.Module) -> dict[str, tuple[int, ...]]:
    """The stored shape of every tensor the plan holds parts of (where checkpoints put them)."""
    state = module.state_dict(keep_vars=True)
    parts = {key.stored for key in map(WeightKey.parse, plan.weights) if key.is_part}
    return {k: tuple(state[k].shape) for k in parts if k in state}


def local_data(
    plan: Plan,
    rank: int,
    inputs: Mapping[str, torch.Tensor],
    device: torch.device,
    float_dtype: torch.dtype | None = None,
) -> dict[str, torch.Tensor]:
    """This rank's pieces of the inputs and constants, by input key or constant name."""
    out: dict[str, torch.Tensor] = {}
    for key, layout in plan.inputs.items():
        if key not in inputs:
            known = ", ".join(inputs)
            raise SourceError(f"the model has no input '{key}' (its inputs: {known})")
        value = inputs[key]
        if tuple(value.shape) != layout.shape:
            raise SourceError(
                f"input '{key}' has shape {list(value.shape)}, the plan says {list(layout.shape)}"
            )
        piece = layout.piece_of(rank, value.to(_dtype(layout.torch_dtype, float_dtype)))
        if piece is not None:
            out[key] = piece.to(device).contiguous()
    out.update(local_constants(plan, rank, device, float_dtype))
    return out


def local_constants(
    plan: Plan, rank: int, device: torch.device, float_dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """This rank's pieces of the plan's folded constants, by constant name."""
    out: dict[str, torch.Tensor] = {}
    for name, constant in plan.constants.items():
        piece = constant.layout.piece_of(
            rank, constant.tensor().to(_dtype(constant.layout.torch_dtype, float_dtype))
        )
        if piece is not None:
            out[name] = piece.to(device).contiguous()
    return out
