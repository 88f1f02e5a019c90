"""The importer: PyTorch models (zoo, file:factory, HuggingFace configs) -> pcg MLIR.

Route: build the model with parameters on the meta device -> torch.export ->
run_decompositions keeping coarse ops whole -> FX walk (`importer.py`, lowerings in `aten.py`)
-> cleanup (`canonicalize`) and `fuse-attention`, which makes multi-head attention one op.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from unityc.frontend.export import export_model
from unityc.frontend.importer import ImportFailure, import_program
from unityc.frontend.models import LoadedModel, ModelError, ModelSpec, load_model

__all__ = ["ImportFailure", "ModelError", "ModelSpec", "import_loaded", "import_model", "load_model"]


def import_model(spec: ModelSpec) -> ModuleOp:
    """Imports the model `spec` names, without materializing its weights."""
    return import_loaded(load_model(spec, weights=False))


def import_loaded(loaded: LoadedModel, simplify: bool = True) -> ModuleOp:
    exported = export_model(loaded.module, loaded.inputs)
    module = import_program(exported, {ModelSpec.ATTRIBUTE: loaded.spec.to_attr()})
    if simplify:
        simplify_graph(module)
    module.verify()
    return module


def simplify_graph(module: ModuleOp) -> None:
    """Folds the shape plumbing export leaves behind, then fuses attention."""
    from xdsl.transforms.canonicalize import CanonicalizePass

    from unityc.passes.fuse_attention import FuseAttentionPass

    ctx = Context()
    CanonicalizePass().apply(ctx, module)
    FuseAttentionPass().apply(ctx, module)
    CanonicalizePass().apply(ctx, module)
