"""Sources of a `pcg` graph: inputs, weights (named by state_dict key), folded constants."""

from __future__ import annotations

from typing import Any, ClassVar

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.dialects.builtin import TensorType as BuiltinTensorType
from xdsl.ir import Attribute
from xdsl.irdl import (
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from unityc.dialects.forms import Form, FormError
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg_types import (
    FLOAT_TYPES,
    PcgOp,
    TensorType,
    own_form,
)
from unityc.dialects.syntax import Kind, op_definition, to_attr
from unityc.runtime.parts import WeightKey


class SourceOp(PcgOp, fam.Source):
    """An op with no operands: its tasks are exactly the pieces of its result (sum 1)."""

    result = result_def(TensorType)
    AUTOCAST: ClassVar[str] = "declared"

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        raise FormError(f"{cls.name} has no operands to infer from")

    def parallel_form(self) -> Form:
        t = self.result.type
        assert isinstance(t, TensorType)
        return own_form(t)

    def verify_(self) -> None:
        t = self.result.type
        assert isinstance(t, TensorType)
        if t.sum_degree != 1:
            raise VerifyException(f"{self.name} cannot hold partial sums (sum degree must be 1)")
        self.verify_source(t)
        self.verify_extra()

    def verify_source(self, t: TensorType) -> None:
        """Op-specific checks of the result type."""

    @classmethod
    def named(cls, key: str, t: TensorType, frozen: bool = False) -> SourceOp:
        """An input or weight called `key`, of type `t` (`frozen`: a weight the model does not
        train)."""
        properties = {"key": to_attr(Kind.STR, key)}
        if frozen:
            properties["frozen"] = to_attr(Kind.FLAG, True)
        return cls.build(result_types=[t], properties=properties)


@op_definition
class InputOp(SourceOp):
    """A graph input (data or labels). Integer inputs are indices or class labels."""

    name = "pcg.input"
    PROPS = (("key", Kind.STR, False),)


@op_definition
class WeightOp(SourceOp):
    """A parameter named by its state_dict key; values never live in the IR. The key may name a
    part of a stored tensor, `key[:, 0:768]` (a box: `:` or `start:stop` per dim,
    `unityc.runtime.parts`), a parameter of its own in the graph (e.g. the query columns of
    GPT-2's packed QKV weight). `frozen`: the model does not train it (`requires_grad=False`:
    a fine-tuned backbone, Whisper's sinusoidal positions): no gradient, no optimizer state, no
    update, held and saved like any other weight; it cannot be ZeRO-1/2 (no optimizer state or
    gradient to shard), only ZeRO-3 (the weight itself sharded)."""

    name = "pcg.weight"
    PROPS = (("key", Kind.STR, False), ("frozen", Kind.FLAG, True))

    def verify_source(self, t: TensorType) -> None:
        key = self.attrs()["key"]
        if t.element_type not in FLOAT_TYPES:
            raise VerifyException(f"weight '{key}' must be floating point")
        try:
            problem = WeightKey.parse(key).check_shape(t.shape)
        except ValueError as e:
            raise VerifyException(f"weight '{key}': {e}") from None
        if problem is not None:
            raise VerifyException(f"weight '{key}' of shape {list(t.shape)}: {problem}")


@op_definition
class ConstantOp(SourceOp):
    """A tensor folded at import (masks, position ids, rotary tables), as a dense literal; a
    large one prints packed (`value zlib<"..."> : tensor<...>`, see `Kind.DENSE`)."""

    name = "pcg.constant"
    PROPS = (("value", Kind.DENSE, False),)

    def verify_source(self, t: TensorType) -> None:
        value = self.properties["value"]
        if not isinstance(value, DenseIntOrFPElementsAttr):
            raise VerifyException("pcg.constant value must be a dense literal")
        vtype = value.type
        assert isinstance(vtype, BuiltinTensorType)
        if tuple(vtype.get_shape()) != t.shape or vtype.element_type != t.element_type:
            raise VerifyException(f"pcg.constant literal of type {vtype} does not match {t}")
