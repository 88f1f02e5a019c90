"""The ops of the pcg and parallel dialects by name, their properties as hashable values and as
`infer` takes them, and their result types by the dialect's inference (cached): what the Graph
(`graph/`) and the plan checks on either IR form (`dialects/pipeline.py`) look up."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache, lru_cache
from typing import Any

from unityc.dialects import parallel, pcg
from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import PcgOp, TensorType
from unityc.dialects.syntax import Kind


@cache
def op_classes() -> dict[str, type[PcgOp]]:
    return {cls.name: cls for cls in (*pcg.ALL_OPS, *parallel.ALL_OPS)}


def op_class(name: str) -> type[PcgOp]:
    cls = op_classes().get(name)
    if cls is None:
        raise KeyError(f"unknown op '{name}'")
    return cls


def canonical_attrs(name: str, attrs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The properties that are set, in the op's declaration order, as hashable values."""
    out: list[tuple[str, Any]] = []
    for prop, kind, _ in op_class(name).PROPS:
        value = attrs.get(prop)
        if value is None or value is False:
            continue
        if kind is Kind.INTS:
            value = tuple(int(v) for v in value)
        elif kind is Kind.INT:
            value = int(value)
        elif kind is Kind.FLOAT:
            value = float(value)
        out.append((prop, value))
    unknown = set(attrs) - {p for p, _, _ in op_class(name).PROPS}
    if unknown:
        raise KeyError(f"'{name}' has no propert{'y' if len(unknown) == 1 else 'ies'} {sorted(unknown)}")
    return tuple(out)


def full_attrs(name: str, attrs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """Every property of the op, None (False for flags) where unset: what `infer` expects."""
    given = dict(attrs)
    return {p: given.get(p, False if kind is Kind.FLAG else None) for p, kind, _ in op_class(name).PROPS}


@lru_cache(maxsize=200_000)
def infer_types(
    name: str, attrs: tuple[tuple[str, Any], ...], operand_types: tuple[TensorType | None, ...]
) -> tuple[TensorType, ...]:
    """Result types of an op, by the dialect's inference. Raises FormError if it does not apply."""
    cls = op_class(name)
    try:
        _, types = cls.infer(list(operand_types), full_attrs(name, attrs))
    except (IndexError, TypeError, ValueError) as e:  # malformed properties for this operand rank
        raise FormError(f"{name}: {e}") from e
    return tuple(types)  # type: ignore[arg-type]


__all__ = ["canonical_attrs", "full_attrs", "infer_types", "op_class", "op_classes"]
