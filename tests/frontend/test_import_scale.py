"""Importing at any batch and sequence length: masks and position ids are never built at the
batch's size (nor the sequence's square), and the graph is the same at every batch but for the
batch dimension. Memory is measured by what torch allocates (every tensor any op creates while
the FX graph is walked), not by time."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from xdsl.dialects.builtin import ModuleOp

from unityc.dialects import pcg
from unityc.dialects.pcg_types import TensorType
from unityc.frontend import import_model, load_model
from unityc.frontend.export import export_model
from unityc.frontend.importer import FOLD_LIMIT, import_program
from unityc.models.spec import ModelSpec

TINY = (("hidden", "16"), ("heads", "2"), ("kv_heads", "1"), ("ffn", "32"), ("vocab", "64"), ("layers", "1"))


class LargestTensor(TorchDispatchMode):
    """Records the largest storage (bytes) of any real tensor an op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.op = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if (
                isinstance(t, torch.Tensor)
                and t.device.type != "meta"
                and t.untyped_storage().nbytes() > self.bytes
            ):
                self.bytes, self.op = t.untyped_storage().nbytes(), str(func)
        return out


def _spec(model: str, batch: int, seq: int, *extra: tuple[str, str]) -> ModelSpec:
    return ModelSpec(model, "small", batch, (*TINY, ("seq", str(seq)), *extra))


def test_no_tensor_of_batch_times_seq_squared_is_built():
    """HF Llama without an attention mask builds its causal mask from position ids repeated
    over the batch (and a packed-sequence check on them): [B, 1, S, S] booleans and floats when
    folded by value (64 MiB here). The walk now computes on the compact parts and leaves the
    S x S mask to pcg.compare_tensors: no tensor it creates holds more than the B x (S + 1) position ids
    of the packed-sequence check."""
    batch, seq = 64, 512
    loaded = load_model(_spec("hf:LlamaConfig", batch, seq), weights=False)
    exported = export_model(loaded.module, loaded.inputs)
    with LargestTensor() as largest:
        module = import_program(exported)
    assert largest.bytes <= batch * (seq + 1) * 8, (largest.op, largest.bytes)  # ids and a shifted copy
    assert largest.bytes * 64 < batch * seq * seq * 4
    compares = [op for op in module.walk() if isinstance(op, pcg.CompareTensorsOp)]
    assert compares and all(_shape(op.output)[-2:] == (seq, seq) for op in compares)


def _shape(value) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return value.type.shape


def _signature(module: ModuleOp) -> list[tuple[str, list[tuple[int, ...]], dict[str, str]]]:
    """Each op's name, result shapes and properties but for constants' values."""
    rows = []
    for op in module.walk():
        if op.name.startswith("pcg."):
            props = {k: str(v) for k, v in op.properties.items() if k not in ("value", "shape")}
            rows.append((op.name, [_shape(r) for r in op.results], props))
    return rows


def _scales_with_batch(small: tuple[int, ...], large: tuple[int, ...], b1: int, b2: int) -> bool:
    """Each dim is equal, or is the batch (or a multiple of it: flattened tokens) at each batch."""
    return len(small) == len(large) and all(
        s == g or s * b2 == g * b1 for s, g in zip(small, large, strict=True)
    )


def test_graph_is_the_same_at_every_batch_but_for_the_batch():
    """hf:llama with its padding mask, and hf:LlamaConfig without one, at a sequence whose causal
    mask is past the fold limit: batch 2 and 48 import to the same ops; each shape differs only
    in dims that scale with the batch, and every constant (positions, rotary tables) is the same."""
    seq = 96
    assert seq * seq > FOLD_LIMIT
    for model in ("hf:llama", "hf:LlamaConfig"):
        small, large = (import_model(_spec(model, b, seq)) for b in (2, 48))
        rows_small, rows_large = _signature(small), _signature(large)
        assert [r[0] for r in rows_small] == [r[0] for r in rows_large]
        for (name, shapes_small, props_small), (_, shapes_large, props_large) in zip(
            rows_small, rows_large, strict=True
        ):
            assert props_small == props_large or name == "pcg.reshape", name
            for a, b in zip(shapes_small, shapes_large, strict=True):
                assert _scales_with_batch(a, b, 2, 48), (name, a, b)
        constants = [
            [op.properties["value"] for op in m.walk() if isinstance(op, pcg.ConstantOp)]
            for m in (small, large)
        ]
        assert constants[0] == constants[1]
        assert all(2 not in _shape(op.result)[:1] for op in small.walk() if isinstance(op, pcg.ConstantOp))
