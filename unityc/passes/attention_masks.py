"""The causal structure of attention masks: a `pcg.attention` whose additive mask is a causal
mask (alone, or with a padding mask) becomes `causal`, its mask operand only the rest (a
[B|1, 1, 1, Sk] padding mask, or none), so that the program runs SDPA with `is_causal` or a
key mask instead of reading a materialized B x S x S float mask.

Recognized (the forms Hugging Face's masking utilities, GPT-2 and SDPA's own causal mask import to):

    mask = scalar_mul(scalar_add(neg(A), 1), big)       big <= -1e30: 0 where A, big elsewhere
    A    = cast(mul(cast(A1), cast(A2)), i1)            A1 and A2 (a boolean and, as imported)
    Ai   = compare_tensors(kpos, qpos, "le")            kpos [.., 1, Sk] = 0..Sk-1, qpos [.., Sq, 1] = 0..Sq-1
         | a 0/1 constant [.., Sq, Sk] equal to tril    (a causal mask folded at import)
         | any value [B|1, 1, 1, Sk]                    (a key padding mask)
    mask = reshape(constant)                            0 on and below the diagonal, big (or -inf) above
    mask = add(causal mask, rest)                       (T5's decoder: position bias + causal mask)

The rewrite is exact: where the causal mask holds, the scores get the rest's additive value (as
before); where it does not, the dtype's lowest value (before: `big` <= -1e30 added), whose
probability is 0 either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects.builtin import ModuleOp, f32, i1
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from unityc.dialects import pcg
from unityc.dialects.literals import literal_values
from unityc.dialects.plan import carry_plan
from unityc.passes.attention_weights import _owner, _shape

BIG = -1e30
"""An additive mask value at or below this gives probability 0 exactly (exp underflows)."""


@dataclass(frozen=True)
class _Structure:
    """A mask as a causal part and the rest: key factors (booleans or 0/1 floats, [B|1, 1, 1, Sk])
    to multiply and turn additive with `big`, or an additive value kept as it is."""

    causal: bool
    keys: tuple[SSAValue, ...] = ()
    big: float = 0.0
    additive: SSAValue | None = None


def _element(value: SSAValue) -> Any:
    return getattr(value.type, "element_type", None)


def _constant_values(value: SSAValue) -> list[float] | None:
    c = _owner(value, pcg.ConstantOp)
    return None if c is None else [float(v) for v in literal_values(c.attrs()["value"])]


def _arange(value: SSAValue, dim: int) -> int | None:
    """n if `value` is a constant 0..n-1 laid along `dim` (every other dim 1), else None."""
    shape = _shape(value)
    values = _constant_values(value)
    if values is None or not shape or any(n != 1 for d, n in enumerate(shape) if d != len(shape) + dim):
        return None
    return len(values) if values == [float(i) for i in range(len(values))] else None


def _is_tril(values: list[float], shape: tuple[int, ...], on: Any, off: Any) -> bool:
    """Whether `values` of `shape` [1.., Sq, Sk] are `on` where key <= query and `off` elsewhere."""
    if len(shape) < 2 or any(n != 1 for n in shape[:-2]):
        return False
    sq, sk = shape[-2:]
    return all(
        on(values[i * sk + j]) if j <= i else off(values[i * sk + j]) for i in range(sq) for j in range(sk)
    )


def _is_causal(value: SSAValue) -> bool:
    """Whether the boolean (or 0/1) value is true exactly where key position <= query position."""
    compare = _owner(value, pcg.CompareTensorsOp)
    if compare is not None:
        kind = compare.attrs()["kind"]
        keys, queries = (compare.lhs, compare.rhs) if kind == "le" else (compare.rhs, compare.lhs)
        if kind not in ("le", "ge"):
            return False
        return _arange(keys, -1) is not None and _arange(queries, -2) is not None
    values = _constant_values(value)
    return values is not None and _is_tril(values, _shape(value), lambda v: v == 1, lambda v: v == 0)


def _is_key(value: SSAValue, sk: int) -> bool:
    shape = _shape(value)
    return len(shape) == 4 and shape[1:] == (1, 1, sk)


def _uncast(value: SSAValue) -> SSAValue:
    """The boolean a float 0/1 value casts (the value itself if not a cast of a boolean)."""
    cast = _owner(value, pcg.CastOp)
    return cast.input if cast is not None and _element(cast.input) == i1 else value


def _factors(value: SSAValue) -> list[SSAValue]:
    """The factors of a conjunction `cast(mul(cast(a), cast(b)), i1)` (as imported), recursively."""
    value = _uncast(value)
    cast = _owner(value, pcg.CastOp)
    mul = _owner(cast.input, pcg.MulOp) if cast is not None and _element(value) == i1 else None
    if mul is None:
        mul = _owner(value, pcg.MulOp)
    if mul is None:
        return [value]
    return _factors(mul.lhs) + _factors(mul.rhs)


def _structure(mask: SSAValue) -> _Structure | None:
    """The mask as causal and rest, or None if it has no causal part this module recognizes."""
    sk = _shape(mask)[-1]
    add = _owner(mask, pcg.AddOp)
    if add is not None:
        for causal, rest in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
            found = _structure(causal)
            if (
                found is not None
                and not found.keys
                and found.additive is None
                and _shape(rest) == _shape(mask)
            ):
                return _Structure(True, additive=rest)
        return None
    reshape = _owner(mask, pcg.ReshapeOp)
    values = _constant_values(reshape.input) if reshape is not None else None
    if reshape is not None and values is not None:
        shape = _shape(reshape.input)
        if values and values[0] == 0 and _is_tril(values, shape, lambda v: v == 0, lambda v: v <= BIG):
            return _Structure(True)
        return None
    scaled = _owner(mask, pcg.ScalarMulOp)
    shifted = _owner(scaled.input, pcg.ScalarAddOp) if scaled is not None else None
    negated = _owner(shifted.input, pcg.NegOp) if shifted is not None else None
    if (
        scaled is None
        or shifted is None
        or negated is None
        or shifted.attrs()["value"] != 1.0
        or not scaled.attrs()["scale"] <= BIG
    ):
        return None
    factors = _factors(negated.input)
    causal = [f for f in factors if _is_causal(f)]
    keys = tuple(f for f in factors if not _is_causal(f))
    if not causal or not all(_is_key(f, sk) for f in keys):
        return None
    return _Structure(True, keys, scaled.attrs()["scale"])


@dataclass
class _Rewrite:
    """The rest masks built so far (one per mask value: every layer shares it)."""

    rests: dict[SSAValue, SSAValue | None] = field(default_factory=dict)

    def rest(self, mask: SSAValue, found: _Structure) -> SSAValue | None:
        if mask in self.rests:
            return self.rests[mask]
        rest = found.additive
        if found.keys:
            rest = self._additive_keys(mask, found)
        self.rests[mask] = rest
        return rest

    def _additive_keys(self, mask: SSAValue, found: _Structure) -> SSAValue:
        """(1 - k1·k2·...)·big, [B|1, 1, 1, Sk], built before the mask's own op."""
        ops: list[Operation] = []

        def add(op: Operation) -> SSAValue:
            op.results[0].name_hint = "key_mask"
            ops.append(op)
            return op.results[0]

        floats = [
            k if _element(k) == f32 else add(pcg.CastOp.build_inferred([k], dtype=f32)) for k in found.keys
        ]
        product = floats[0]
        for other in floats[1:]:
            product = add(pcg.MulOp.build_inferred([product, other]))
        negated = add(pcg.NegOp.build_inferred([product]))
        shifted = add(pcg.ScalarAddOp.build_inferred([negated], value=1.0))
        rest = add(pcg.ScalarMulOp.build_inferred([shifted], scale=found.big))
        assert mask.owner is not None and isinstance(mask.owner, Operation)
        Rewriter.insert_op(ops, InsertPoint.before(mask.owner))
        return rest


def causal_masks(module: ModuleOp) -> None:
    """Every `pcg.attention` whose mask has a recognized causal part becomes `causal`, its mask
    operand the rest (the masks' own ops are left for dead-code elimination)."""
    rewrite = _Rewrite()
    for op in list(module.walk()):
        if not isinstance(op, pcg.AttentionOp) or op.mask is None:
            continue
        found = _structure(op.mask)
        if found is None:
            continue
        operands: list[Any] = [getattr(op, name) for name in pcg.AttentionOp.NAMES]
        operands[pcg.AttentionOp.NAMES.index("mask")] = rewrite.rest(op.mask, found)
        fused = pcg.AttentionOp.build_inferred(operands, **(op.attrs() | {"causal": True}))
        fused.results[0].name_hint = op.results[0].name_hint
        carry_plan(op, fused)
        Rewriter.replace_op(op, fused)
