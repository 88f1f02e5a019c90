"""The `pcg` dialect: tensor operators of a Parallel Computation Graph.

Graph container: a `func.func` with no arguments. Inputs are `pcg.input` ops (named, so that
data feeds and machine views attach to an op), parameters are `pcg.weight` ops named by their
state_dict key, and `func.return` lists the graph's outputs, the loss first.

Each op infers its result types from its operands' types and properties (`build_inferred`)
and verifies that its results match; see `forms.py` for how tasks read operand pieces.

The ops live in one module per concept (`sources`, `elementwise`, `contraction`,
`normalization`, `shape`, `embedding`, `attention`, `loss`); this module assembles the
`Dialect` and is the place callers import them from (`from unityc.dialects import pcg`,
`pcg.LinearOp`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import f32, i64
from xdsl.ir import Dialect, Operation

from unityc.dialects.pcg.attention import (
    AttentionOp,
)
from unityc.dialects.pcg.contraction import (
    BatchMatmulOp,
    Conv2dOp,
    LinearOp,
    MatmulOp,
    Pool2dOp,
    window_out,
)
from unityc.dialects.pcg.elementwise import (
    COMPARISONS,
    GATED_ACTIVATIONS,
    AbsOp,
    AddOp,
    BinaryOp,
    CastOp,
    ClampOp,
    CompareOp,
    CompareTensorsOp,
    DivOp,
    DropoutOp,
    ExpOp,
    GatedActivationOp,
    GeluOp,
    IdentityOp,
    Log1pOp,
    LogOp,
    MulOp,
    NegOp,
    PowOp,
    ReluOp,
    ScalarAddOp,
    ScalarMulOp,
    SigmoidOp,
    SqrtOp,
    StopGradientOp,
    SubOp,
    TanhOp,
    UnaryOp,
    broadcast_shape,
)
from unityc.dialects.pcg.embedding import (
    EmbeddingBagOp,
    EmbeddingOp,
)
from unityc.dialects.pcg.experts import (
    EXPERT_ACTIVATIONS,
    EXPERT_FACTOR,
    ExpertsOp,
    TakeOp,
    TopkOp,
)
from unityc.dialects.pcg.families import Family
from unityc.dialects.pcg.loss import (
    CrossEntropyOp,
    MseLossOp,
)
from unityc.dialects.pcg.normalization import (
    BatchNormOp,
    CumsumOp,
    LayerNormOp,
    RmsNormOp,
    SoftmaxOp,
)
from unityc.dialects.pcg.shape import (
    ConcatOp,
    GatherOp,
    ReduceOp,
    ReshapeOp,
    SplitOp,
    TransposeOp,
    reshape_groups,
)
from unityc.dialects.pcg.sources import (
    ConstantOp,
    InputOp,
    SourceOp,
    WeightOp,
)
from unityc.dialects.pcg_types import PcgOp, TensorType
from unityc.dialects.view import MachineViewAttr

ALL_OPS: list[type[PcgOp]] = [
    InputOp,
    WeightOp,
    ConstantOp,
    ReluOp,
    GeluOp,
    SigmoidOp,
    TanhOp,
    ExpOp,
    SqrtOp,
    Log1pOp,
    LogOp,
    AbsOp,
    IdentityOp,
    StopGradientOp,
    NegOp,
    ScalarMulOp,
    ScalarAddOp,
    PowOp,
    ClampOp,
    CompareOp,
    DropoutOp,
    CastOp,
    AddOp,
    SubOp,
    MulOp,
    DivOp,
    CompareTensorsOp,
    GatedActivationOp,
    LinearOp,
    MatmulOp,
    BatchMatmulOp,
    Conv2dOp,
    Pool2dOp,
    BatchNormOp,
    LayerNormOp,
    RmsNormOp,
    SoftmaxOp,
    CumsumOp,
    ConcatOp,
    SplitOp,
    ReshapeOp,
    TransposeOp,
    ReduceOp,
    GatherOp,
    EmbeddingOp,
    EmbeddingBagOp,
    AttentionOp,
    CrossEntropyOp,
    MseLossOp,
    TopkOp,
    TakeOp,
    ExpertsOp,
]

PCG = Dialect("pcg", list[type[Operation]](ALL_OPS), [TensorType, MachineViewAttr])


def family_ops(*families: type[Family | PcgOp]) -> tuple[str, ...]:
    """The names of the `pcg` ops of any of these families (`families.py`) or op classes
    (subclasses included), in `ALL_OPS` order: what a middle-floor table keyed by op name holds."""
    return tuple(cls.name for cls in ALL_OPS if issubclass(cls, families))


__all__ = [
    "ALL_OPS",
    "COMPARISONS",
    "EXPERT_ACTIVATIONS",
    "EXPERT_FACTOR",
    "GATED_ACTIVATIONS",
    "PCG",
    "AbsOp",
    "AddOp",
    "AttentionOp",
    "BatchMatmulOp",
    "BatchNormOp",
    "BinaryOp",
    "CastOp",
    "ClampOp",
    "CompareOp",
    "CompareTensorsOp",
    "ConcatOp",
    "ConstantOp",
    "Conv2dOp",
    "CrossEntropyOp",
    "CumsumOp",
    "DivOp",
    "DropoutOp",
    "EmbeddingBagOp",
    "EmbeddingOp",
    "ExpOp",
    "ExpertsOp",
    "GatedActivationOp",
    "GatherOp",
    "GeluOp",
    "IdentityOp",
    "InputOp",
    "LayerNormOp",
    "LinearOp",
    "Log1pOp",
    "LogOp",
    "MatmulOp",
    "MseLossOp",
    "MulOp",
    "NegOp",
    "PcgOp",
    "Pool2dOp",
    "PowOp",
    "ReduceOp",
    "ReluOp",
    "ReshapeOp",
    "RmsNormOp",
    "ScalarAddOp",
    "ScalarMulOp",
    "SigmoidOp",
    "SoftmaxOp",
    "SourceOp",
    "SplitOp",
    "SqrtOp",
    "StopGradientOp",
    "SubOp",
    "TakeOp",
    "TanhOp",
    "TensorType",
    "TopkOp",
    "TransposeOp",
    "UnaryOp",
    "WeightOp",
    "broadcast_shape",
    "f32",
    "i64",
    "reshape_groups",
    "window_out",
]
