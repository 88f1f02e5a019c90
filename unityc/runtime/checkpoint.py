"""Checkpoints with `torch.distributed.checkpoint` (DCP), in the model's own state_dict key space.

    train.py --save DIR [--save-every N]     # DIR/step-<k>/ every N steps and at the end
    train.py --resume DIR/step-<k> --steps M # weights, optimizer state and step; runs to step M
    train.py --init DIR/step-<k>             # weights only (a fine-tuning start)

A checkpoint holds every weight as one logical tensor under its state_dict key: each rank writes
the pieces it holds (a sharded weight as chunks at their offsets, a replicated one once: DCP keeps
one writer per chunk), so no rank ever assembles a whole weight. Loading reads, on every rank,
exactly the chunks that overlap the pieces it holds under *its* plan: a checkpoint written under
one plan loads into any other plan (resharding on load) and into the plain nn.Module
(`load_module`, or `dcp.load(module.state_dict(), checkpoint_id=DIR)` for the keys it has).

A weight the plan holds as parts of one stored tensor (`key[:, 0:768]`, `parts.py`) is written
as those parts' chunks of the stored tensor, at their offsets in it: the checkpoint holds the
packed parameter as the model has it.

Also saved: the optimizer state of every weight under `optimizer.<key>.<name>` (tensors shaped
like the weight are sharded like it, scalars such as Adam's `step` are stored whole) and the
step as `trainer.step`. The learning-rate schedule is a function of the step, and dropout masks
hash (seed, step, element), so a resumed run repeats the uninterrupted one exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadPlan, SavePlan, TensorWriteData, WriteItem, WriteItemType
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

from unityc.runtime.parts import WeightKey, stored_key
from unityc.runtime.plan import Layout

STEP_KEY = "trainer.step"
OPTIMIZER_PREFIX = "optimizer."


class CheckpointError(ValueError):
    """A checkpoint that cannot be read into this plan."""


@dataclass(frozen=True)
class Entry:
    """One local tensor of a checkpoint: where it lies in the logical tensor `size`."""

    tensor: torch.Tensor
    offsets: tuple[int, ...]
    size: tuple[int, ...]

    @classmethod
    def whole(cls, tensor: torch.Tensor) -> Entry:
        return cls(tensor, (0,) * tensor.dim(), tuple(tensor.shape))

    @property
    def chunk(self) -> ChunkStorageMetadata:
        return ChunkStorageMetadata(offsets=torch.Size(self.offsets), sizes=self.tensor.shape)


Entries = dict[tuple[str, tuple[int, ...]], Entry]
"""A rank's local tensors by (checkpoint key, offsets): several chunks of one key may be local
(the parts of a packed weight)."""


def _entry(fqn: str, entry: Entry) -> Entries:
    return {(fqn, entry.offsets): entry}


class _PieceSavePlanner(DefaultSavePlanner):
    """Writes each entry as the chunk of its logical tensor that it is (DCP drops duplicates)."""

    def __init__(self, entries: Entries):
        super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)
        self.entries = entries

    def create_local_plan(self) -> SavePlan:
        items = [
            WriteItem(
                index=MetadataIndex(fqn, torch.Size(e.offsets)),
                type=WriteItemType.SHARD,
                tensor_data=TensorWriteData(
                    chunk=e.chunk,
                    properties=TensorProperties.create_from_tensor(e.tensor),
                    size=torch.Size(e.size),
                ),
            )
            for (fqn, _), e in self.entries.items()
        ]
        self.plan = SavePlan(items)
        return self.plan

    def lookup_object(self, index: MetadataIndex) -> torch.Tensor:
        return self.entries[(index.fqn, tuple(index.offset or ()))].tensor.detach()


class _PieceLoadPlanner(DefaultLoadPlanner):
    """Reads, for each entry, the stored chunks that overlap it (in place)."""

    def __init__(self, entries: Entries):
        super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)
        self.entries = entries

    def create_local_plan(self) -> LoadPlan:
        assert self.metadata is not None
        stored = self.metadata.state_dict_metadata
        items = []
        for (fqn, _), e in self.entries.items():
            md = stored.get(fqn)
            if not isinstance(md, TensorStorageMetadata):
                raise CheckpointError(f"the checkpoint has no tensor '{fqn}'")
            if tuple(md.size) != e.size:
                raise CheckpointError(
                    f"'{fqn}' has shape {list(md.size)} in the checkpoint, here {list(e.size)}"
                )
            items += create_read_items_for_chunk_list(fqn, md, [e.chunk])
        return LoadPlan(items)

    def lookup_tensor(self, index: MetadataIndex) -> torch.Tensor:
        return self.entries[(index.fqn, tuple(index.offset or ()))].tensor.detach()


def placement(
    key: str, layout: Layout, rank: int, sizes: Mapping[str, tuple[int, ...]]
) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """(state_dict key, offsets, size): where this rank's piece of the plan's weight `key` lies
    in the stored tensor (a part's piece: at the part's offsets; `sizes`: stored shapes)."""
    part = WeightKey.parse(key)
    local = layout.offsets(layout.pieces[rank])
    if not part.is_part:
        return key, local, layout.shape
    if part.stored not in sizes:
        raise CheckpointError(f"the shape of '{part.stored}', which '{key}' is a part of, is not known")
    return part.stored, tuple(a + b for a, b in zip(part.offsets(), local, strict=True)), sizes[part.stored]


def weight_entries(
    weights: Mapping[str, torch.Tensor],
    layouts: Mapping[str, Layout],
    rank: int,
    sizes: Mapping[str, tuple[int, ...]],
) -> Entries:
    """This rank's weight pieces as checkpoint entries (partial sums other than 0 are not
    weights' business: a weight piece holds values, so only sum index 0 is written)."""
    out: Entries = {}
    for key, tensor in weights.items():
        layout = layouts[key]
        if layout.pieces[rank][-2] != 0:
            continue
        fqn, offsets, size = placement(key, layout, rank, sizes)
        out.update(_entry(fqn, Entry(tensor, offsets, size)))
    return out


def optimizer_entries(
    optimizer: torch.optim.Optimizer | None,
    weights: Mapping[str, torch.Tensor],
    layouts: Mapping[str, Layout],
    rank: int,
    sizes: Mapping[str, tuple[int, ...]],
) -> Entries:
    """The optimizer state of this rank's pieces: tensors shaped like the piece are chunks of
    the logical state, other tensors (step counters) are whole (the parts of one packed weight
    share theirs: equal, as the parts step together)."""
    if optimizer is None:
        return {}
    out: Entries = {}
    for key, param in weights.items():
        stored, offsets, size = placement(key, layouts[key], rank, sizes)
        for name, value in optimizer.state.get(param, {}).items():
            if not isinstance(value, torch.Tensor):
                continue
            fqn = f"{OPTIMIZER_PREFIX}{stored}.{name}"
            if value.shape == param.shape and value.dim() > 0:
                out.update(_entry(fqn, Entry(value, offsets, size)))
            else:
                out.update(_entry(fqn, Entry.whole(value)))
    return out


def save(
    path: str | Path,
    step: int,
    weights: Mapping[str, torch.Tensor],
    layouts: Mapping[str, Layout],
    rank: int,
    optimizer: torch.optim.Optimizer | None,
    sizes: Mapping[str, tuple[int, ...]] | None = None,
) -> None:
    """A collective: every rank writes its pieces of the weights and optimizer state (`sizes`:
    the stored shape of each tensor the plan holds parts of)."""
    sizes = sizes or {}
    entries = weight_entries(weights, layouts, rank, sizes)
    entries.update(optimizer_entries(optimizer, weights, layouts, rank, sizes))
    entries.update(_entry(STEP_KEY, Entry.whole(torch.tensor(step, dtype=torch.int64))))
    dcp.save({}, checkpoint_id=str(path), planner=_PieceSavePlanner(entries))


def stored(path: str | Path) -> dict[str, TensorStorageMetadata]:
    """The tensors a checkpoint holds, by key; CheckpointError if it is not one."""
    try:
        metadata = dcp.FileSystemReader(str(path)).read_metadata()
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path}: not a checkpoint ({type(e).__name__}: {e})") from None
    return {k: v for k, v in metadata.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}


def load(
    path: str | Path,
    weights: Mapping[str, torch.Tensor],
    layouts: Mapping[str, Layout],
    rank: int,
    optimizer: torch.optim.Optimizer | None = None,
    sizes: Mapping[str, tuple[int, ...]] | None = None,
) -> int:
    """A collective: reads this rank's pieces of every weight (and, given an optimizer, its state)
    in place, whatever plan wrote the checkpoint. Returns the step it was saved at."""
    sizes = sizes or {}
    found = stored(path)
    missing = [k for k in map(stored_key, layouts) if k not in found]
    if missing:
        raise CheckpointError(f"{path}: no weight '{missing[0]}' (a checkpoint of another model?)")
    entries = weight_entries(weights, layouts, rank, sizes)
    step = torch.zeros((), dtype=torch.int64)
    entries.update(_entry(STEP_KEY, Entry.whole(step)))
    shared: list[tuple[dict, str, torch.Tensor]] = []
    if optimizer is not None:
        entries.update(_empty_optimizer_state(optimizer, weights, layouts, rank, found, sizes, shared))
    dcp.load({}, checkpoint_id=str(path), planner=_PieceLoadPlanner(entries))
    for state, name, value in shared:  # a step counter the parts of a packed weight share
        state[name] = value.clone()
    for key, tensor in weights.items():  # partial sums other than 0 hold zeros
        if layouts[key].pieces[rank][-2] != 0:
            with torch.no_grad():
                tensor.zero_()
    return int(step.item())


def _empty_optimizer_state(
    optimizer: torch.optim.Optimizer,
    weights: Mapping[str, torch.Tensor],
    layouts: Mapping[str, Layout],
    rank: int,
    found: Mapping[str, TensorStorageMetadata],
    sizes: Mapping[str, tuple[int, ...]],
    shared: list[tuple[dict, str, torch.Tensor]],
) -> Entries:
    """Allocates the optimizer state the checkpoint holds for this rank's pieces, as entries to
    read into (an optimizer's state is created lazily by its first step). A whole state tensor
    two parts of one weight read is read once: `shared` lists (state, name, tensor read) for
    the second reader, to be given a copy after the load."""
    out: Entries = {}
    for key, param in weights.items():
        fqn_of, offsets, size = placement(key, layouts[key], rank, sizes)
        prefix = f"{OPTIMIZER_PREFIX}{fqn_of}."
        state = optimizer.state[param]
        for fqn, md in found.items():
            name = fqn.removeprefix(prefix)
            if not fqn.startswith(prefix) or "." in name:
                continue
            dtype = md.properties.dtype
            if tuple(md.size) == size and size:
                value = torch.zeros(param.shape, dtype=dtype, device=param.device)
                entry = Entry(value, offsets, size)
            else:
                value = torch.zeros(tuple(md.size), dtype=dtype, device=param.device if md.size else "cpu")
                entry = Entry.whole(value)
            index = (fqn, entry.offsets)
            if index in out:
                shared.append((state, name, out[index].tensor))
                continue
            out[index] = entry
            state[name] = value
    return out


def load_module(module: nn.Module, path: str | Path) -> list[str]:
    """Loads a checkpoint's weights into a plain nn.Module (one process, no process group) by
    state_dict key; returns the module's keys the checkpoint does not hold (buffers, say)."""
    found = stored(path)
    state = module.state_dict()
    entries = {(k, (0,) * v.dim()): Entry.whole(v) for k, v in state.items() if k in found}
    dcp.load({}, checkpoint_id=str(path), planner=_PieceLoadPlanner(entries), no_dist=True)
    return [k for k in state if k not in found]
