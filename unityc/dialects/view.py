"""Machine views: which devices run an op's tasks (FlexFlow's MachineView).

`#pcg.view<start 4, [intra 1, inter 2]>` places an op whose task space has two dimensions of
degree > 1 (in the order shard dims, sum, copy) so that task (i, j) runs on the device
`start + i*1` of node `j*2` relative to the start: intra-node strides count devices, inter-node
strides count nodes. A single-task op has a view with no dimensions: `#pcg.view<start 4>`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, IntAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException


@irdl_attr_definition
class MachineViewAttr(ParametrizedAttribute):
    """Start device, and per task-space dimension (degree > 1) a stride and a placement."""

    name = "pcg.view"

    start_attr: IntAttr
    strides_attr: ArrayAttr[IntAttr]
    inter_attr: ArrayAttr[IntAttr]

    def __init__(self, start: int, strides: Sequence[int] = (), inter: Sequence[bool] = ()):
        inter = list(inter) or [False] * len(strides)
        super().__init__(
            IntAttr(start),
            ArrayAttr([IntAttr(s) for s in strides]),
            ArrayAttr([IntAttr(int(b)) for b in inter]),
        )

    @property
    def start(self) -> int:
        return self.start_attr.data

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(a.data for a in self.strides_attr.data)

    @property
    def inter(self) -> tuple[bool, ...]:
        return tuple(bool(a.data) for a in self.inter_attr.data)

    def verify(self) -> None:
        if self.start < 0:
            raise VerifyException(f"machine view start device {self.start} is negative")
        if len(self.strides) != len(self.inter):
            raise VerifyException("machine view needs one placement per stride")
        if any(s < 1 for s in self.strides):
            raise VerifyException(f"machine view strides must be positive, got {list(self.strides)}")

    def placement(self, coord: Sequence[int]) -> tuple[int, int]:
        """(node offset, device offset within the node) of a task, relative to the start."""
        node = sum(c * s for c, s, x in zip(coord, self.strides, self.inter, strict=True) if x)
        local = sum(c * s for c, s, x in zip(coord, self.strides, self.inter, strict=True) if not x)
        return node, local

    def largest(self, task_degrees: Sequence[int]) -> tuple[int, int]:
        """(node offset, device offset within the node) of the farthest task of a task space with
        these degrees (its degrees > 1 matching the strides), relative to the start: each offset
        is a sum of stride x (degree - 1), so the view fits N nodes of n devices iff the start's
        node and device plus these stay below them. Constant in the number of tasks."""
        dims = [d for d in task_degrees if d > 1]
        node = sum((d - 1) * s for d, s, x in zip(dims, self.strides, self.inter, strict=True) if x)
        local = sum((d - 1) * s for d, s, x in zip(dims, self.strides, self.inter, strict=True) if not x)
        return node, local

    def problem_for(self, task_degrees: Sequence[int]) -> str | None:
        """Why this view cannot place a task space with these degrees, or None. Checked
        arithmetically (`_nested`) for the views the compiler writes, so that verifying a plan of
        65,536 tasks per op costs what one of 8 does; any other view by placing every task (the
        first two tasks that meet named)."""
        dims = [d for d in task_degrees if d > 1]
        if len(dims) != len(self.strides):
            return (
                f"machine view has {len(self.strides)} dimensions but the op's task space has "
                f"{len(dims)} of degree > 1 ({list(task_degrees)})"
            )
        strides, inter = self.strides, self.inter
        if all(
            _nested([(d, s) for d, s, x in zip(dims, strides, inter, strict=True) if x == side])
            for side in (True, False)
        ):
            return None
        seen: set[tuple[int, int]] = set()
        for coord in itertools.product(*(range(d) for d in dims)):
            where = self.placement(coord)
            if where in seen:
                return f"machine view places two tasks on one device (task {list(coord)})"
            seen.add(where)
        return None

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start_pos = parser.pos
        with parser.in_angle_brackets():
            parser.parse_keyword("start")
            start = parser.parse_integer(allow_negative=False)
            strides: list[int] = []
            inter: list[bool] = []
            if parser.parse_optional_punctuation(",") is not None:

                def dim() -> None:
                    inter.append(parser.parse_keyword_in(("intra", "inter")) == "inter")
                    strides.append(parser.parse_integer(allow_negative=False))

                parser.parse_comma_separated_list(parser.Delimiter.SQUARE, dim)
            if any(s < 1 for s in strides):
                parser.raise_error("machine view strides must be positive", start_pos, parser.pos)
        return (
            IntAttr(start),
            ArrayAttr([IntAttr(s) for s in strides]),
            ArrayAttr([IntAttr(int(b)) for b in inter]),
        )

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<start {self.start}")
        if self.strides:
            dims = ", ".join(
                f"{'inter' if x else 'intra'} {s}" for s, x in zip(self.strides, self.inter, strict=True)
            )
            printer.print_string(f", [{dims}]")
        printer.print_string(">")


def _nested(dims: Sequence[tuple[int, int]]) -> bool:
    """Whether the tasks of these (degree, stride) dims land on distinct offsets because their
    strides nest: in increasing stride, each stride passes the largest offset the smaller ones
    reach (as mixed-radix digits do: the strides the compiler writes are products of the degrees
    before them). Sufficient, not necessary (strides 2 and 3 over degrees 3 and 2 are distinct
    too, and left to `problem_for`'s enumeration)."""
    reach = 0
    for degree, stride in sorted(dims, key=lambda ds: ds[1]):
        if stride <= reach:
            return False
        reach += stride * (degree - 1)
    return True
