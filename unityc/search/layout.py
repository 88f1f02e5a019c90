"""A whole-graph parallel layout as one value with named axes (JAX's `Mesh(devices, axis_names)`,
Megatron-Core's `parallel_state` groups), and the levers beside them.

The *mesh axes* (`AXES`) are named degrees whose product is the devices a layout runs on:
`data` (replicas, each on its own samples), `context` (the sequence split across ranks, ring
attention: `strategies.megatron_layouts`), `tensor` (Megatron's column/row-parallel
regions and attention heads within a node) and `pipeline` (stage groups, each running `virtual`
model chunks). `expert` is carved out of the data x context ranks, as Megatron-Core does (room
for MoE). Beside the axes: `sequence` (Megatron's sequence parallelism inside the tensor group),
the ZeRO stage over each weight's copies, recomputation, and gradient accumulation
(`microbatches` per replica of `microbatch_size` samples).

A new axis is one field here and one row of `AXES` (what it splits), one hook in the strategy
that lays it out (`strategies._Megatron`: an axis that splits the batch needs none, its degree
joins `replicas`), and its degrees in one enumeration (`tilings`). See README.md, "Add a
parallel dimension".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import ClassVar

from unityc.dialects.pcg.attention import AttentionOp
from unityc.runtime.expert_ranks import expert_group_ranks

EXCHANGES = AttentionOp.CONTEXT_EXCHANGES
"""The exchanges of a context-parallel attention (`pcg.attention`'s `context`)."""

NONE = "none"
SELECTIVE = "selective"
FULL = "full"
RECOMPUTE_LEVELS = (FULL, SELECTIVE, NONE)
"""Recomputation at the granularities practitioners use, the smallest footprint first."""

ZERO_STAGES = (0, 1, 2, 3)
"""ZeRO over each weight's copies: none, the optimizer state, + the gradients, + the weights."""

SPLITS = ("batch", "sequence", "weights", "layers", "experts")
"""What a mesh axis splits: the samples, the sequence, the weights (and the activations between a
column- and a row-parallel op), the layers (pipeline stages), the experts of an MoE layer."""


@dataclass(frozen=True)
class Axis:
    """A named mesh axis and what it splits (`SPLITS`)."""

    name: str
    splits: str

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"layout: an axis name is an identifier, not {self.name!r}")
        if self.splits not in SPLITS:
            raise ValueError(
                f"layout: axis {self.name} splits one of {', '.join(SPLITS)}, not {self.splits!r}"
            )


@dataclass(frozen=True)
class Layout:
    """Degrees along named axes, and the levers beside them; validated, hashable.

    >>> Layout(data=4, tensor=2, sequence=True)
    Layout(data=4, tensor=2, sequence=True)
    >>> Layout(data=4, tensor=2).devices
    8
    """

    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    """Stage groups (the pipeline's depth across ranks)."""
    virtual: int = 1
    """Model chunks per stage group (interleaved 1F1B beyond 1)."""
    context: int = 1
    """The sequence split across ranks (context parallelism: the token stream sharded on the
    sequence, every attention split over it by the ring; `strategies.megatron_layouts`)."""
    expert: int = 1
    """Expert parallelism, carved out of the data x context ranks, placed within a node first
    (`expert_groups`; degrees: `experts.expert_degrees`; the layout: `strategies._Megatron`)."""
    sequence: bool = False
    """Megatron's sequence parallelism inside each tensor group (needs tensor >= 2)."""
    zero: int = 0
    """The ZeRO stage over the copies of every weight held in copies (`ZERO_STAGES`)."""
    recompute: str = NONE
    """`RECOMPUTE_LEVELS`: none, the attention core (selective), every op (full)."""
    microbatches: int = 1
    """Micro-batches each replica accumulates per step (with one stage: gradient accumulation)."""
    microbatch_size: int = 1
    """Samples per micro-batch per replica (what `microbatches` implies; for the description)."""
    exchange: str = "ring"
    """How each context-parallel attention exchanges its sequence shards (`EXCHANGES`): the ring
    of K/V blocks or the all-to-all between rows and heads (Ulysses); only with context >= 2."""

    AXES: ClassVar[tuple[Axis, ...]] = (
        Axis("data", "batch"),
        Axis("context", "sequence"),
        Axis("tensor", "weights"),
        Axis("pipeline", "layers"),
    )
    """The mesh axes, outermost first; their degrees multiply to `devices`."""
    CARVED: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = (("expert", ("data", "context")),)
    """Axes laid over the ranks of others (each must divide their product), not multiplying."""

    def __post_init__(self) -> None:
        names = {f.name for f in fields(self)}
        for axis in self.AXES:
            if axis.name not in names:
                raise TypeError(f"layout: axis {axis.name} has no field")
        counts = ("virtual", "microbatches", "microbatch_size", *(c for c, _ in self.CARVED))
        for name in (*self.axis_names(), *counts):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"layout: {name} must be a positive integer, not {value!r}")
        for carved, over in self.CARVED:
            ranks = self.degree(*over)
            if ranks % getattr(self, carved):
                raise ValueError(
                    f"layout: {carved} {getattr(self, carved)} does not divide the {' x '.join(over)} "
                    f"ranks ({ranks})"
                )
        if self.sequence and self.tensor < 2:
            raise ValueError("layout: sequence parallelism shards inside a tensor group: needs tensor >= 2")
        if self.exchange not in EXCHANGES:
            raise ValueError(
                f"layout: the context exchange is one of {', '.join(EXCHANGES)}, not {self.exchange!r}"
            )
        if self.exchange != "ring" and self.context < 2:
            raise ValueError(f"layout: the {self.exchange} exchange needs context >= 2")
        if self.zero not in ZERO_STAGES:
            raise ValueError(f"layout: the ZeRO stage is 0, 1, 2 or 3, not {self.zero!r}")
        if self.recompute not in RECOMPUTE_LEVELS:
            levels = ", ".join(f"'{r}'" for r in RECOMPUTE_LEVELS)
            raise ValueError(f"layout: recompute is one of {levels}, not {self.recompute!r}")

    def __repr__(self) -> str:
        """The fields that differ from their defaults, in order (`Layout()`: one device, no levers)."""
        shown = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.repr and getattr(self, f.name) != f.default
        ]
        return f"{type(self).__name__}({', '.join(shown)})"

    @classmethod
    def axis_names(cls) -> tuple[str, ...]:
        return tuple(a.name for a in cls.AXES)

    @property
    def axes(self) -> tuple[tuple[str, int], ...]:
        """(name, degree) of every mesh axis, outermost first."""
        return tuple((a.name, getattr(self, a.name)) for a in self.AXES)

    def degree(self, *names: str) -> int:
        """The product of the named axes' degrees (every mesh axis: `devices`)."""
        out = 1
        for name in names or self.axis_names():
            out *= getattr(self, name)
        return out

    @property
    def devices(self) -> int:
        return self.degree()

    def splitting(self, what: str) -> tuple[str, ...]:
        """The mesh axes that split `what` (`SPLITS`)."""
        return tuple(a.name for a in self.AXES if a.splits == what)

    @property
    def replicas(self) -> int:
        """Ranks holding copies of a weight that each run their own samples: the degrees of the
        axes splitting the batch (the data-parallel degree)."""
        return self.degree(*self.splitting("batch"))

    @property
    def stages(self) -> int:
        """The pipeline's stage groups (`pipeline`; the name `megatron_lm.Config` gave it)."""
        return self.pipeline

    @property
    def splits_tokens(self) -> bool:
        """Whether the token stream runs split on the sequence: context parallelism, or
        Megatron's sequence parallelism in a tensor group (the flattened token-wise projections
        are then kept on the tokens, `tokens.unflatten_tokens`, so that the split runs through
        GPT-2's MLP)."""
        return self.context > 1 or (self.sequence and self.tensor > 1)

    @property
    def group(self) -> int:
        """The devices of one stage group: every mesh axis but the pipeline's."""
        return self.devices // self.pipeline

    def beyond(self, known: Sequence[str]) -> tuple[str, ...]:
        """Axes (mesh or carved) of degree > 1 that split something other than the batch and are
        not in `known`: what a strategy that lays out only `known` cannot build."""
        carved = tuple(c for c, _ in self.CARVED)
        batch = self.splitting("batch")
        names = [n for n in self.axis_names() + carved if n not in batch]
        return tuple(n for n in names if getattr(self, n) > 1 and n not in known)

    @property
    def within_stage(self) -> Layout:
        """This layout without what only the pipeline sees (stages, chunks, micro-batches, levers):
        what lays out one stage group (`pipeline.Layouts` is keyed by it)."""
        return replace(self, pipeline=1, virtual=1, zero=0, recompute=NONE, microbatches=1, microbatch_size=1)

    def expert_groups(self) -> tuple[list[list[int]], list[list[int]]]:
        """(expert-parallel groups, expert-data-parallel groups) over one stage group's ranks,
        as the runtime builds them (`runtime.expert_ranks.expert_group_ranks`): tensor innermost,
        then expert, then the expert-data rest, so an expert group stays within a node while
        expert x tensor fits one, as a tensor group does."""
        return expert_group_ranks(self.group, self.expert, self.tensor)

    @property
    def schedule(self) -> str:
        """Interleaved 1F1B with chunks; else 1F1B, or GPipe's schedule where there are fewer
        micro-batches than stages (what Megatron-LM's 1F1B runs then: every forward is warm-up),
        which torch's 1F1B refuses."""
        if self.virtual > 1:
            return "interleaved-1f1b"
        return "1f1b" if self.microbatches >= self.pipeline else "gpipe"

    def describe(self) -> str:
        """One line for a report: 'data 4 x tensor 2 x pipeline 1, 1f1b, ...'."""
        chunks = f", {self.virtual} chunks per stage group" if self.virtual > 1 else ""
        sequence = ", sequence parallel" if self.sequence else ""
        recompute = "no" if self.recompute == NONE else self.recompute
        others = [n for n in self.axis_names() if n not in _DESCRIBED and getattr(self, n) > 1]
        extra = "".join(f" x {n} {getattr(self, n)}" for n in others)
        extra += "".join(f", {c} {getattr(self, c)}" for c, _ in self.CARVED if getattr(self, c) > 1)
        extra += f" ({self.exchange})" if self.exchange != "ring" else ""
        return (
            f"data {self.data} x tensor {self.tensor} x pipeline {self.pipeline}{extra}{chunks}, "
            f"{self.schedule}, {self.microbatches} micro-batches of {self.microbatch_size} per replica, "
            f"ZeRO-{self.zero}, {recompute} recomputation{sequence}"
        )


_DESCRIBED = ("data", "tensor", "pipeline")
"""Axes every description names (others only where their degree is above 1)."""


def tilings(
    devices: int,
    choices: Mapping[str, Sequence[int]],
    rest: str = "data",
    base: Layout | None = None,
) -> Iterator[Layout]:
    """Every layout (from `base`) whose mesh axes tile `devices`: the axes of `choices` take each
    of their degrees (the first axis outermost in the order, as given), the axis `rest` the
    devices left; combinations that do not divide are skipped. The one enumeration of layouts:
    a new axis adds its degrees to a caller's `choices`."""
    base = base or Layout()
    names = list(choices)
    unknown = [n for n in [*names, rest] if n not in base.axis_names()]
    if unknown:
        raise ValueError(f"layout: no mesh axis {', '.join(unknown)} (axes: {', '.join(base.axis_names())})")
    if rest in choices:
        raise ValueError(f"layout: the {rest} axis takes the devices left; it has no choices of its own")

    def walk(k: int, left: int, chosen: dict[str, int]) -> Iterator[Layout]:
        if k == len(names):
            yield replace(base, **chosen, **{rest: left})  # type: ignore[arg-type]
            return
        for degree in choices[names[k]]:
            if degree >= 1 and left % degree == 0:
                yield from walk(k + 1, left // degree, {**chosen, names[k]: degree})

    yield from walk(0, devices, {})


__all__ = [
    "EXCHANGES",
    "FULL",
    "NONE",
    "RECOMPUTE_LEVELS",
    "SELECTIVE",
    "ZERO_STAGES",
    "Axis",
    "Layout",
    "tilings",
]
