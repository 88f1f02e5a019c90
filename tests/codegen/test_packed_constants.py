"""Large constants travel packed (zlib + base64 of the dense literal's bytes): the runtime
decodes them exactly for every dtype, and a program holds each distinct value once."""

from __future__ import annotations

import math
import re

import pytest
import torch
from helpers import Graph
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, StringAttr, TensorType, f32

from unityc.codegen import emit_program
from unityc.codegen.emit import packed_splat
from unityc.dialects import pcg
from unityc.dialects.pcg_types import PcgOp
from unityc.dialects.syntax import packed_text
from unityc.dialects.view import MachineViewAttr
from unityc.models.spec import ModelSpec
from unityc.runtime import Constant, Layout
from unityc.runtime.packing import pack, unpack


def _layout(shape: tuple[int, ...], dtype: str) -> Layout:
    return Layout(shape, dtype, shard=(1,) * len(shape), pieces={0: (0,) * (len(shape) + 2)})


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        (torch.triu(torch.full((8, 8), -math.inf), 1), "float32"),
        (torch.tensor([math.nan, math.inf, -0.0, 1e-300], dtype=torch.float64), "float64"),
        (torch.arange(-5, 5, dtype=torch.int64).reshape(2, 5), "int64"),
    ],
)
def test_packed_constants_decode_exactly(values: torch.Tensor, dtype: str) -> None:
    text = pack(values.numpy().tobytes())
    got = Constant((), _layout(tuple(values.shape), dtype), packed=text).tensor()
    assert got.dtype == values.dtype and got.shape == values.shape
    assert torch.equal(got.view(torch.uint8), values.contiguous().view(torch.uint8))  # bit for bit


def test_packed_booleans_are_dense_i1_bytes() -> None:
    raw = bytes([0xFF, 0x00, 0xFF, 0xFF])  # how a dense i1 literal holds true and false
    got = Constant((), _layout((4,), "bool"), packed=pack(raw)).tensor()
    assert got.tolist() == [True, False, True, True]


def test_a_large_splat_travels_packed() -> None:
    """A splat prints as one value in the IR; the program packs its bytes (a padded image's
    zero rows were megabytes of literal values), a small one stays a literal."""
    big = DenseIntOrFPElementsAttr.from_list(TensorType(f32, [4, 300]), [0.5])
    text = packed_splat(big)
    assert text is not None and len(text) < 100
    got = Constant((), _layout((4, 300), "float32"), packed=text).tensor()
    assert torch.equal(got, torch.full((4, 300), 0.5))
    assert packed_splat(DenseIntOrFPElementsAttr.from_list(TensorType(f32, [4, 4]), [0.5])) is None


def test_bad_constants_are_refused() -> None:
    with pytest.raises(ValueError, match="exactly 12 bytes"):
        unpack(pack(b"\x00" * 8), 12)
    with pytest.raises(ValueError, match="needs 4 values, got 3"):
        Constant((1.0, 2.0, 3.0), _layout((2, 2), "float32"))
    with pytest.raises(ValueError, match="not both"):
        Constant((1.0,), _layout((1,), "float32"), packed=pack(b"\x00" * 4))


def test_a_value_two_constants_hold_is_written_once() -> None:
    """Two constant ops of one value share one packed text in the program, decoded once."""
    g = Graph()
    x = g.input("x", [64, 64])
    mask = torch.triu(torch.full((64, 64), -math.inf), 1)
    a, b = g.constant(mask), g.constant(mask)
    y = g.op(pcg.AddOp, [g.op(pcg.AddOp, [x, a]), b])
    loss = g.op(pcg.ReduceOp, [y], kind="sum", dims=[0, 1])
    attrs = {"unityc.machine": StringAttr("cpu:1"), "unityc.model": ModelSpec("mlp").to_attr()}
    module = g.module([loss], attrs)
    for op in module.walk():
        if isinstance(op, PcgOp):
            op.attributes["view"] = MachineViewAttr(0)
    values = [op.properties["value"] for op in module.walk() if isinstance(op, pcg.ConstantOp)]
    text = emit_program(module)
    compile(text, "plan.py", "exec")
    assert re.findall(r"^(PACKED_\d+) = '([^']*)'", text, re.M) == [("PACKED_0", packed_text(values[0]))]
    assert len(re.findall(r"packed=PACKED_0\)", text)) == 2
    namespace: dict = {}
    exec(text.split("def forward", 1)[0], namespace)  # the imports, PACKED_0 and PLAN
    tensors = [c.tensor() for c in namespace["PLAN"].constants.values()]
    assert tensors[0] is tensors[1]  # decoded once
    assert torch.equal(tensors[0], mask)
