"""Op families are classes of the dialect (`dialects/pcg/families.py`): every pcg op has one kind,
its traits are bases of its class, and the middle floor's tables read them (issue 39, item 4)."""

from __future__ import annotations

import pytest

from unityc.cost import compute, memory
from unityc.dialects import pcg
from unityc.dialects.pcg import families as fam
from unityc.rewrites import generalize
from unityc.search import padding


@pytest.mark.parametrize("cls", pcg.ALL_OPS, ids=lambda c: c.name)
def test_every_op_has_one_kind(cls: type) -> None:
    kinds = [k for k in fam.KINDS if issubclass(cls, k)]
    assert len(kinds) == 1, f"{cls.name}: kinds {[k.__name__ for k in kinds]}; add one of families.KINDS"


def test_every_family_row_has_an_op() -> None:
    empty = [f.__name__ for f in (*fam.KINDS, *fam.TRAITS) if not pcg.family_ops(f)]
    assert not empty
    assert {f for f in vars(fam).values() if isinstance(f, type) and issubclass(f, fam.Family)} == {
        fam.Family,
        fam.OpKind,
        fam.Trait,
        *fam.KINDS,
        *fam.TRAITS,
    }, "a family class outside KINDS / TRAITS"


def test_saved_tables_are_disjoint() -> None:
    """An op's backward reads its result, nothing, or (neither family) its operands."""
    assert not set(memory.SAVES_RESULT) & set(memory.SAVES_NOTHING)


# The tables as op-name tuples before they were read from the families: the same ops.
BEFORE = {
    (compute, "BINARY"): {"pcg.add", "pcg.sub", "pcg.mul", "pcg.div", "pcg.compare_tensors"},
    (compute, "NOT_DIFFERENTIABLE"): {"pcg.compare", "pcg.compare_tensors", "pcg.topk", "pcg.stop_gradient"},
    (compute, "SOURCES"): {"pcg.input", "pcg.weight", "pcg.constant"},
    (compute, "DATA_MOVEMENT"): {"pcg.concat", "pcg.split", "pcg.transpose", "pcg.gather", "pcg.take"},
    (compute, "CONTRACTIONS"): {"pcg.linear", "pcg.matmul", "pcg.batch_matmul", "pcg.conv2d"},
    (compute, "MATMUL_LIKE"): {
        "pcg.linear",
        "pcg.matmul",
        "pcg.batch_matmul",
        "pcg.conv2d",
        "pcg.attention",
        "pcg.experts",
    },
    (memory, "SAVES_RESULT"): {"pcg.relu", "pcg.sigmoid", "pcg.tanh", "pcg.exp", "pcg.sqrt", "pcg.softmax"},
    (memory, "SAVES_NOTHING"): {
        "pcg.add",
        "pcg.sub",
        "pcg.neg",
        "pcg.identity",
        "pcg.stop_gradient",
        "pcg.scalar_mul",
        "pcg.scalar_add",
        "pcg.dropout",
        "pcg.cast",
        "pcg.compare",
        "pcg.cumsum",
        "pcg.compare_tensors",
        "pcg.topk",
        "pcg.reshape",
        "pcg.transpose",
        "pcg.concat",
        "pcg.split",
        "pcg.gather",
        "pcg.reduce",
    },
    (memory, "WEIGHT_VIEWS"): {"pcg.transpose", "pcg.reshape"},
    (padding, "ZERO_PRESERVING"): {
        "pcg.relu",
        "pcg.gelu",
        "pcg.tanh",
        "pcg.identity",
        "pcg.stop_gradient",
        "pcg.abs",
        "pcg.neg",
        "pcg.scalar_mul",
        "pcg.cast",
    },
    (padding, "FINITE"): {
        "pcg.relu",
        "pcg.gelu",
        "pcg.tanh",
        "pcg.identity",
        "pcg.stop_gradient",
        "pcg.abs",
        "pcg.neg",
        "pcg.scalar_mul",
        "pcg.cast",
        "pcg.sigmoid",
        "pcg.scalar_add",
        "pcg.clamp",
    },
    (padding, "BINARY"): {"pcg.add", "pcg.sub", "pcg.mul"},
    (padding, "WINDOWS"): {"pcg.conv2d", "pcg.pool2d"},
    (generalize, "DIM_OPS"): {
        "parallel.partition",
        "parallel.combine",
        "pcg.softmax",
        "pcg.concat",
        "pcg.split",
    },
    (generalize, "SHAPE_KEEPING"): {
        "pcg.relu",
        "pcg.sigmoid",
        "pcg.tanh",
        "pcg.softmax",
        "pcg.add",
        "pcg.mul",
        "pcg.attention",
        "parallel.partition",
        "parallel.combine",
        "parallel.replicate",
        "parallel.reduce",
        "parallel.sum_concat",
    },
    (generalize, "BINARY_ELEMENTWISE"): {"pcg.add", "pcg.mul", "parallel.sum_concat"},
    (generalize, "NONLINEAR"): {"pcg.relu", "pcg.sigmoid", "pcg.tanh", "pcg.softmax", "pcg.attention"},
}


@pytest.mark.parametrize("where", BEFORE, ids=lambda w: f"{w[0].__name__.rsplit('.', 1)[-1]}.{w[1]}")
def test_tables_hold_the_ops_they_held(where: tuple) -> None:
    module, name = where
    table = getattr(module, name)
    assert len(set(table)) == len(table), f"{name} names an op twice"
    assert set(table) == BEFORE[where]


def test_a_new_op_joins_by_its_bases() -> None:
    """A table is a question about classes: a subclass of a family is in it."""
    assert pcg.family_ops(fam.Finite) == tuple(
        c.name for c in pcg.ALL_OPS if issubclass(c, (fam.Finite, fam.ZeroPreserving))
    )
    assert set(pcg.family_ops(pcg.BinaryOp)) == {c.name for c in pcg.ALL_OPS if issubclass(c, pcg.BinaryOp)}
    assert set(pcg.family_ops(fam.ZeroPreserving)) < set(pcg.family_ops(fam.Finite))
