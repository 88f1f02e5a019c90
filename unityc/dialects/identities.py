"""The parallel ops' identities and fusions, once, as rules on plain values (op name, `dim`,
`degree`): `graph/simplify.py` applies them to a `Graph` (the search), the dialect's
canonicalization patterns and the `fuse-collectives` pass to xDSL modules.

* `identity(outer, inner)`: what `outer(inner(x))` is. Inverse ops on the same dim cancel
  (`combine[d, a](partition[d, a](x))` is `x`; `batch`/`pipeline` likewise) or, by different
  degrees, leave one op of the remaining degree (combine and partition only); two ops of one kind
  on the same dim merge into one with the product of the degrees.
* `fusion(first, second)`: the collective that does `second(first(x))` at once: reduce then
  replicate is an all_reduce, reduce then partition a reduce_scatter, combine then replicate an
  all_gather, combine then partition on another dim an all_to_all (same degree).

An op is `(name, attrs)`, attrs holding `dim` (where the op has one) and `degree`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

Attrs = Mapping[str, Any]

INVERSE = {
    "parallel.partition": "parallel.combine",
    "parallel.combine": "parallel.partition",
    "parallel.pipeline": "parallel.batch",
    "parallel.batch": "parallel.pipeline",
}
MERGEABLE = ("parallel.partition", "parallel.combine", "parallel.replicate", "parallel.reduce")
_SPLITTABLE = ("parallel.combine", "parallel.partition")


class Kind(Enum):
    CANCEL = "cancel"
    """`outer(inner(x))` is `x`."""
    SPLIT = "split"
    """Inverse ops by different degrees: one op of the remaining degree on `x`."""
    MERGE = "merge"
    """Two ops of one kind: one op with the product of the degrees on `x`."""


@dataclass(frozen=True)
class Identity:
    kind: Kind
    op: str = ""
    """The op that reads `x` instead (empty for CANCEL)."""
    attrs: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.kind is Kind.CANCEL) != (self.op == ""):
            raise ValueError(f"{self.kind.value}: an op exactly when not cancelling, got '{self.op}'")


def _with_dim(dim: int | None, degree: int) -> dict[str, int]:
    return {"degree": degree} if dim is None else {"dim": dim, "degree": degree}


def identity(outer: str, outer_attrs: Attrs, inner: str, inner_attrs: Attrs) -> Identity | None:
    """What `outer(inner(x))` is, or None if no identity applies."""
    inverse = INVERSE.get(outer) == inner
    if not inverse and not (outer == inner and outer in MERGEABLE):
        return None
    dim = outer_attrs.get("dim")
    if dim != inner_attrs.get("dim"):
        return None
    a, b = outer_attrs["degree"], inner_attrs["degree"]
    if inverse:
        if a == b:
            return Identity(Kind.CANCEL)
        if outer in _SPLITTABLE and b % a == 0:  # part of the inner op survives
            return Identity(Kind.SPLIT, inner, _with_dim(dim, b // a))
        if outer in _SPLITTABLE and a % b == 0:
            return Identity(Kind.SPLIT, outer, _with_dim(dim, a // b))
        return None
    return Identity(Kind.MERGE, outer, _with_dim(dim, a * b))


_FUSED = {
    ("parallel.reduce", "parallel.replicate"): "parallel.all_reduce",
    ("parallel.reduce", "parallel.partition"): "parallel.reduce_scatter",
    ("parallel.combine", "parallel.replicate"): "parallel.all_gather",
    ("parallel.combine", "parallel.partition"): "parallel.all_to_all",
}


def fusion(
    first: str, first_attrs: Attrs, second: str, second_attrs: Attrs
) -> tuple[str, dict[str, Any]] | None:
    """The collective (name, attrs) that does `second(first(x))` at once, or None."""
    fused = _FUSED.get((first, second))
    n = second_attrs.get("degree")
    if fused is None or first_attrs.get("degree") != n:
        return None
    match fused:
        case "parallel.all_reduce":
            return fused, {"degree": n}
        case "parallel.reduce_scatter":
            return fused, {"dim": second_attrs["dim"], "degree": n}
        case "parallel.all_gather":
            return fused, {"dim": first_attrs["dim"], "degree": n}
    if first_attrs["dim"] == second_attrs["dim"]:
        return None
    return fused, {"src": first_attrs["dim"], "dst": second_attrs["dim"], "degree": n}
