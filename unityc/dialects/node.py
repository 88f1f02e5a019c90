"""One op as a hashable value (`Node`): its name, operands as references to other ops'
results, properties, result types and plan. The Graph (`graph/`) holds these; the plan checks of
`dialects/pipeline.py` read an xDSL module's ops as these too, so that they are written once."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr

from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import NO_PLAN, OpPlan
from unityc.dialects.view import MachineViewAttr

Ref = tuple[int, int]
"""A tensor: (node id, result index)."""

SOURCE_OPS = ("pcg.input", "pcg.weight", "pcg.constant")


@dataclass(frozen=True, slots=True)
class Node:
    op: str
    operands: tuple[Ref | None, ...]
    """Flattened operands in definition order; None where an optional operand is absent."""
    attrs: tuple[tuple[str, Any], ...]
    types: tuple[TensorType, ...]
    plan: OpPlan = NO_PLAN
    """The op's plan: view, ZeRO stage, recomputation, pipeline stage (`dialects/plan.py`)."""
    hint: str | None = field(default=None, compare=False)
    """An SSA name for printing only (not part of equality or hashes)."""

    def attr(self, name: str, default: Any = None) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    @property
    def view(self) -> MachineViewAttr | None:
        return self.plan.view

    @property
    def zero(self) -> int:
        """ZeRO stage of a weight held in copies (1, 2, 3; 0: plain copies)."""
        return self.plan.zero

    @property
    def recompute(self) -> bool:
        """Activation checkpointing: the op's saved activations are recomputed in backward."""
        return self.plan.recompute

    @property
    def stage(self) -> int | None:
        """The pipeline stage, or None."""
        return self.plan.stage

    def with_plan(self, **changes: Any) -> Node:
        """This node with some fields of its plan changed (`view=`, `zero=`, `recompute=`, `stage=`)."""
        return replace(self, plan=self.plan.with_(**changes))

    def operand_refs(self) -> Iterator[Ref]:
        return (r for r in self.operands if r is not None)

    @property
    def is_source(self) -> bool:
        return self.op in SOURCE_OPS


def batch_size(nodes: Iterable[Node]) -> int | None:
    """The batch: dim 0 of the first input that has a dim (`nodes` in the graph's order), None
    without one."""
    return next((n.types[0].shape[0] for n in nodes if n.op == "pcg.input" and n.types[0].rank), None)


def is_batch_splat(node: Node, batch: int) -> bool:
    """A splat constant (every element alike) whose dim 0 is `batch`: how the importer spells a
    broadcast over the batch (ViT's `cls_token.expand(B, -1, -1)` is the token plus a [B, 1, 1]
    zero; a base written into by `slice_scatter` is a [B, ...] zero). Each slice of its dim 0 is
    the same, so cutting it there like the batch (data parallelism's shards, a micro-batch's
    rows) is always exact; a causal mask that is batch-sized by chance is no splat."""
    if node.op != "pcg.constant" or not node.types[0].rank or node.types[0].shape[0] != batch:
        return False
    value = node.attr("value")
    return isinstance(value, DenseIntOrFPElementsAttr) and value.is_splat()


__all__ = ["SOURCE_OPS", "Node", "Ref", "batch_size", "is_batch_splat"]
