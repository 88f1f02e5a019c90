"""torch.export of a model, decomposed to core ATen but with the coarse ops the PCG wants whole."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from unityc.frontend.moe import static_moe
from unityc.frontend.no_grad import keep_stop_gradients
from unityc.frontend.widening import keep_widenings
from unityc.models.spec import ModelError

aten = torch.ops.aten

# Decomposing these would lose an op the PCG has (or an op whose parallel forms matter).
KEEP_WHOLE = (
    aten.linear.default,
    aten.layer_norm.default,
    aten.native_layer_norm.default,
    aten.rms_norm.default,
    aten.scaled_dot_product_attention.default,
    aten.nll_loss_forward.default,
    aten.mse_loss.default,
    aten.gelu.default,
    aten._softmax.default,
    aten._log_softmax.default,
    aten._adaptive_avg_pool2d.default,
    aten.avg_pool2d.default,
    aten.max_pool2d_with_indices.default,
    aten._embedding_bag.default,
    aten._embedding_bag_forward_only.default,
    aten.embedding.default,
    aten.native_dropout.default,
    aten.mean.dim,
    aten.sum.dim_IntList,
)


def decomposition_table() -> dict:
    table = torch.export.default_decompositions()
    for op in KEEP_WHOLE:
        table.pop(op, None)
    return table


@dataclass
class Exported:
    program: torch.export.ExportedProgram
    buffers: dict[str, torch.Tensor]
    """Real values of the model's buffers (the exported program may hold meta copies)."""
    parameter_keys: dict[str, str]
    """state_dict key -> the key of the parameter it is tied to (its first name)."""
    frozen: frozenset[str] = frozenset()
    """The keys of the parameters the model does not train (`requires_grad=False`)."""


def export_model(module: nn.Module, inputs: dict[str, torch.Tensor]) -> Exported:
    """Exports `module(**inputs)`. With parameters on the meta device, everything is moved to
    meta first (after saving the buffers' values), so no weight is ever materialized."""
    buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
    first_name: dict[int, str] = {}
    keys = {}
    frozen = set()
    for name, p in module.named_parameters(remove_duplicate=False):
        keys[name] = first_name.setdefault(id(p), name)
        if not p.requires_grad:
            frozen.add(name)
    on_meta = any(p.device.type == "meta" for p in module.parameters())
    if on_meta:
        module = module.to("meta")
        inputs = {k: torch.empty_like(v, device="meta") for k, v in inputs.items()}
    # Tensors the forward creates without `device=` must land beside the meta weights too.
    device = torch.device("meta") if on_meta else contextlib.nullcontext()
    try:
        with warnings.catch_warnings(), _quiet_torch_logs(), device, static_moe(module):
            warnings.simplefilter("ignore")
            program = torch.export.export(module, (), kwargs=inputs, strict=False)
            keep_widenings(program)  # the model's fp32 casts that bf16-mixed needs
            keep_stop_gradients(program)  # what it detaches or computes under no_grad
            program = program.run_decompositions(decomposition_table())
    except Exception as e:
        raise ModelError(_export_failure(e)) from None
    return Exported(program, buffers, keys, frozenset(frozen))


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """torch logs its own traceback when export fails; our error message says it in one line."""
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def _export_failure(e: Exception) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"torch.export failed on the model with its example inputs: {type(e).__name__}: {first}"
