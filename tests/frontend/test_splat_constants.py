"""A tensor of one value a scatter writes into (zeros, `new_empty`, `full`) is never built at its
size: the part the scatter leaves is a splat literal that holds its value once
(`dialects/literals.py`) through import, printing, parsing, the interpreter and codegen, and
the parts a later scatter covers are dropped. DeepSeek-V3's keys at its paper shape were a
258 GB dense zero constant in the IR."""

from __future__ import annotations

from pathlib import Path

import torch
from test_import_scale import LargestTensor
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32, i1

from unityc.dialects import pcg
from unityc.dialects.literals import SPLAT_BYTES, literal_values, splat_literal, stored_once
from unityc.dialects.source import make_context, parse_source
from unityc.frontend import import_model, load_model
from unityc.frontend.check import check_import
from unityc.frontend.export import export_model
from unityc.frontend.importer import import_program
from unityc.interpreter.kernels import literal_tensor
from unityc.models.spec import ModelSpec
from unityc.runtime import Constant, Layout

MODEL = f"{Path(__file__).parent / 'splat_model.py'}:make"


def _constants(module) -> list[DenseIntOrFPElementsAttr]:
    return [op.properties["value"] for op in module.walk() if isinstance(op, pcg.ConstantOp)]


def test_scatter_bases_are_splats_and_the_import_is_exact() -> None:
    module, checks = check_import(ModelSpec(MODEL))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    constants = _constants(module)
    assert len(constants) == 2, module  # the zero half and the 0.5 rows: nothing of new_empty's
    assert all(
        c.is_splat() and stored_once(c) == (len(literal_values(c)) * 4 > SPLAT_BYTES) for c in constants
    )
    assert any(stored_once(c) for c in constants)  # the zero half: 4 x 8 x 16 floats
    assert sorted(c.get_values()[0] for c in constants) == [0.0, 0.5]
    again = parse_source(make_context(), str(module), "splat.mlir")
    assert _constants(again) == constants  # printed as one value, read back as one


def test_a_scatter_base_at_scale_is_never_built() -> None:
    """At batch 256 x seq 512 the zero half alone is 32 MiB: nothing the import creates holds
    more than a few bytes of it, and the printed graph stays a few kilobytes."""
    spec = ModelSpec(MODEL, "small", None, (("batch", "256"), ("seq", "512"), ("width", "64")))
    loaded = load_model(spec, weights=False)
    exported = export_model(loaded.module, loaded.inputs)
    with LargestTensor() as largest:
        module = import_program(exported)
    assert largest.bytes <= 256 * 512 * 64 * 4 // 64, (largest.op, largest.bytes)  # the input's fold
    assert all(len(c.data.data) <= SPLAT_BYTES for c in _constants(module))
    assert len(str(module)) < 4096  # as at batch 4: no literal of the batch's size


def test_deepseek_keys_are_the_two_copies() -> None:
    """DeepSeek-V3's keys (a `new_empty` filled by two copies) import as the concat of the two
    sources: no constant of the keys' shape, no split of an earlier concat."""
    module = import_model(ModelSpec("hf:DeepseekV3Config"))
    concats = [op for op in module.walk() if isinstance(op, pcg.ConcatOp)]
    splits = [op for op in module.walk() if isinstance(op, pcg.SplitOp)]
    assert concats and not any(isinstance(s.operands[0].owner, pcg.ConcatOp) for s in splits)
    assert not any(isinstance(v.owner, pcg.ConstantOp) for c in concats for v in c.operands)


def test_a_splat_reads_as_every_element() -> None:
    big = splat_literal(TensorType(f32, [64, 1024]), 0.25)
    assert stored_once(big) and len(big.data.data) == 4
    assert literal_values(big) == (0.25,) * (64 * 1024)
    assert torch.equal(literal_tensor(big, torch.float32), torch.full((64, 1024), 0.25))
    small = splat_literal(TensorType(i1, [2, 3]), True)
    assert not stored_once(small) and literal_values(small) == small.get_values()
    layout = Layout((64, 1024), "float32", shard=(1, 1), pieces={0: (0, 0, 0, 0)})
    assert torch.equal(Constant((0.25,), layout).tensor(), torch.full((64, 1024), 0.25))
