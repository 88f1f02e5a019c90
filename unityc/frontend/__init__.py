"""The importer: PyTorch models (zoo, file:factory, HuggingFace configs) -> pcg MLIR.

Route: build the model with parameters on the meta device -> torch.export ->
run_decompositions keeping coarse ops whole -> FX walk (`importer.py`, lowerings in `aten.py`)
-> cleanup (`canonicalize`), `fuse-attention`, which makes multi-head attention one op, and
`fuse-norms` (RMS norms and gated activations, one op each).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from unityc.dialects import pcg
from unityc.dialects.pcg_types import TensorType
from unityc.frontend.export import export_model
from unityc.frontend.importer import ImportFailure, LostConstant, import_program
from unityc.models.spec import LoadedModel, ModelError, ModelSpec, load_model

__all__ = ["ImportFailure", "ModelError", "ModelSpec", "import_loaded", "import_model", "load_model"]


REAL_EXPORT_ELEMENTS = 2**28
"""The most parameter elements (1 GiB in fp32) of a model exported again with real weights when
its export on the meta device loses a constant the forward made (`LostConstant`)."""


def import_model(spec: ModelSpec) -> ModuleOp:
    """Imports the model `spec` names, without materializing its weights; one whose forward
    makes a constant the graph needs from data that was on the meta device (`LostConstant`) is
    exported again with real weights, if it has at most `REAL_EXPORT_ELEMENTS`."""
    loaded = load_model(spec, weights=False)
    try:
        return import_loaded(loaded)
    except LostConstant as e:
        elements = sum(p.numel() for p in loaded.module.parameters())
        if elements > REAL_EXPORT_ELEMENTS:
            raise LostConstant(
                f"{e} (the forward made it from tensors on the meta device; exported with real "
                f"weights it would have one, but the model's {elements:,} parameter elements are more "
                f"than {REAL_EXPORT_ELEMENTS:,})"
            ) from None
    return import_loaded(load_model(spec, weights=True))


def import_loaded(loaded: LoadedModel, simplify: bool = True) -> ModuleOp:
    exported = export_model(loaded.module, loaded.inputs)
    module = import_program(exported, {ModelSpec.ATTRIBUTE: loaded.spec.to_attr()})
    if simplify:
        simplify_graph(module)
    module.verify()
    check_index_inputs(module, loaded.inputs)
    return module


def check_index_inputs(module: ModuleOp, inputs: Mapping[str, torch.Tensor]) -> None:
    """Settles each cross-entropy's `ignore_index` against the example input its targets come
    from (through reshapes, slices, transposes; the whole input is checked, also values a slice
    leaves out). An ignore_index that is a class, or that the example targets hold (Hugging Face's
    -100-padded labels), is kept. One outside the classes that the example never uses (torch's
    default -100 on class labels) is dropped, so such losses stay pipelineable; the op then
    requires every target to be a class, and a batch holding -100 later stops the run with an
    error instead of changing the loss. A target outside the classes that is not the
    ignore_index is refused (torch refuses it too)."""
    for op in module.walk():
        if not isinstance(op, pcg.CrossEntropyOp):
            continue
        source = op.target.owner
        while isinstance(source, pcg.ReshapeOp | pcg.SplitOp | pcg.TransposeOp | pcg.IdentityOp):
            source = source.operands[0].owner
        if not isinstance(source, pcg.InputOp) or source.attrs()["key"] not in inputs:
            continue  # targets computed from elsewhere: the declared ignore_index stays
        logits = op.logits.type
        assert isinstance(logits, TensorType)
        key, classes = source.attrs()["key"], logits.shape[1]
        value = inputs[key]
        ignore = op.attrs().get("ignore_index")
        ignored = value == ignore if ignore is not None else torch.zeros_like(value, dtype=torch.bool)
        outside = ((value < 0) | (value >= classes)) & ~ignored
        if outside.any():
            where = [int(i) for i in outside.nonzero()[0]]
            raise ImportFailure(
                f"input '{key}' holds {int(value[tuple(where)])} at {where}, outside the {classes} classes "
                "of the cross-entropy reading it"
                + ("" if ignore is None else f" and not its ignore_index {ignore}")
            )
        if ignore is not None and not 0 <= ignore < classes and not ignored.any():
            del op.properties["ignore_index"]


def simplify_graph(module: ModuleOp) -> None:
    """Folds the shape plumbing export leaves behind, then fuses attention, then RMS norms and
    gated activations."""
    from xdsl.transforms.canonicalize import CanonicalizePass

    from unityc.passes.fuse_attention import FuseAttentionPass
    from unityc.passes.fuse_norms import FuseNormsPass

    ctx = Context()
    CanonicalizePass().apply(ctx, module)
    FuseAttentionPass().apply(ctx, module)
    FuseNormsPass().apply(ctx, module)
    CanonicalizePass().apply(ctx, module)
