"""Op families: what a `pcg` op is and what the cost model, the memory model and the rewrites
may assume of it, as classes its op class inherits (checked with `issubclass`), not as lists of
op names kept beside the tables that read them.

Two kinds of family:

* a **kind** (`KINDS`): what the op is, one per op class (a test checks that every op of
  `pcg.ALL_OPS` has exactly one): a source, element-wise, a contraction, ...;
* a **trait** (`TRAITS`): a property some ops share across kinds (runs at the matmul rate, only
  moves data, keeps its result for the backward, ...), any number per op.

A middle-floor table names a family and reads its ops with `pcg.family_ops(Family)`; a new op
joins the tables by the bases it declares.
"""

from __future__ import annotations


class Family:
    """Base of every op family (a marker: no fields, no behaviour)."""


# --- kinds: exactly one per op -------------------------------------------------------------------


class OpKind(Family):
    """What an op is (exactly one per op class)."""


class Source(OpKind):
    """A value the graph reads (an input, a weight, a constant): no compute, no backward."""


class Elementwise(OpKind):
    """One result element per (broadcast) operand element."""


class Contraction(OpKind):
    """A sum of products over a contracted dim (linear, matmul, convolution)."""


class Pooling(OpKind):
    """A window reduction over spatial dims."""


class Normalization(OpKind):
    """Statistics over the last dims, then a rescale (norms, softmax)."""


class Scan(OpKind):
    """A running reduction along one dim (cumsum)."""


class Shape(OpKind):
    """Moves, reorders or reduces elements without arithmetic per element pair."""


class Lookup(OpKind):
    """Rows of a table at integer ids (embeddings)."""


class Attention(OpKind):
    """softmax(q kᵀ) v, fused."""


class Loss(OpKind):
    """A scalar loss of a prediction and a target."""


class Routing(OpKind):
    """Mixture-of-experts routing and the experts' FFNs."""


# --- traits: any number per op -------------------------------------------------------------------


class Trait(Family):
    """A property shared across kinds."""


class MatmulRate(Trait):
    """Runs at the device's matmul rate (tf32 where the device allows it)."""


class DataMovement(Trait):
    """Only moves data: no FLOPs (its bytes are priced)."""


class RunsAsView(Trait):
    """The program runs it as a view (`permute`, `reshape` of a contiguous tensor): of a weight,
    no bytes of its own."""


class NotDifferentiable(Trait):
    """Its result carries no gradient back (a mask, indices)."""


class SavesResult(Trait):
    """Its backward reads its result (not its operands)."""


class SavesNothing(Trait):
    """Its backward reads neither its result nor its operands."""


class Windowed(Trait):
    """Reads a spatial window around each output element (convolution, pooling)."""


class Finite(Trait):
    """Element-wise and finite at any finite input (padding: padded rows never become inf)."""


class ZeroPreserving(Finite):
    """Element-wise with f(0) = 0 (padding: a clean padded tensor stays clean)."""


KINDS: tuple[type[OpKind], ...] = (
    Source,
    Elementwise,
    Contraction,
    Pooling,
    Normalization,
    Scan,
    Shape,
    Lookup,
    Attention,
    Loss,
    Routing,
)
TRAITS: tuple[type[Trait], ...] = (
    MatmulRate,
    DataMovement,
    RunsAsView,
    NotDifferentiable,
    SavesResult,
    SavesNothing,
    Windowed,
    Finite,
    ZeroPreserving,
)

__all__ = [
    "KINDS",
    "TRAITS",
    "Attention",
    "Contraction",
    "DataMovement",
    "Elementwise",
    "Family",
    "Finite",
    "Lookup",
    "Loss",
    "MatmulRate",
    "Normalization",
    "NotDifferentiable",
    "OpKind",
    "Pooling",
    "Routing",
    "RunsAsView",
    "SavesNothing",
    "SavesResult",
    "Scan",
    "Shape",
    "Source",
    "Trait",
    "Windowed",
    "ZeroPreserving",
]
