"""Checkpoints with `torch.distributed.checkpoint` (DCP), in the model's own state_dict key space.

    train.py --save DIR [--save-every N]     # DIR/step-<k>/ every N steps and at the end
    train.py --resume DIR --steps M          # the newest complete DIR/step-<k>: weights,
                                             # optimizer state and step; runs to step M
    train.py --init DIR[/step-<k>]           # weights only (a fine-tuning start)

A save is atomic: the ranks write DIR/.step-<k>.partial, rank 0 renames it to DIR/step-<k> once
DCP has written its `.metadata`, then names it in DIR/latest. A save killed half-way leaves no
step folder, so `--resume DIR` (`resolve`) takes the newest complete one. Beside the tensors,
rank 0 writes `unityc.json`: what the run was started with (optimizer, learning rate, schedule;
`options`), which a resumed run compares with its own (`recorded`).

A checkpoint holds every weight as one logical tensor under its state_dict key: each rank writes
the pieces it holds (a sharded weight as chunks at their offsets, a replicated one once: DCP keeps
one writer per chunk), so no rank ever assembles a whole weight. Loading reads, on every rank,
exactly the chunks that overlap the pieces it holds under *its* plan: a checkpoint written under
one plan loads into any other plan (resharding on load) and into the plain nn.Module
(`load_module`, or `dcp.load(module.state_dict(), checkpoint_id=DIR)` for the keys it has).

A ZeRO shard (`zero.py`: elements [start, stop) of a weight piece, flattened row-major, in a
1-D tensor) is written as the rectangular boxes of the piece that flat range covers (`boxes`: a
partial first row, whole rows, a partial last row, recursively), each at its offsets in the
logical tensor, and read back the same way: a ZeRO-3 checkpoint is a plain one, loading into
data-parallel or Megatron plans and back.

A weight the plan holds as parts of one stored tensor (`key[:, 0:768]`, `parts.py`) is written
as those parts' chunks of the stored tensor, at their offsets in it: the checkpoint holds the
packed parameter as the model has it.

Also saved: the optimizer state of every weight under `optimizer.<key>.<name>` (tensors shaped
like the weight are sharded like it, scalars such as Adam's `step` are stored whole) and the
step as `trainer.step`. The learning-rate schedule is a function of the step, and dropout masks
hash (seed, step, element), so a resumed run repeats the uninterrupted one exactly.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
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
LATEST = "latest"
"""The file in a --save folder naming its newest complete step folder."""
OPTIONS = "unityc.json"
"""The file in a step folder recording what the run was started with."""
STEP_FOLDER = re.compile(r"step-(\d+)")

Flat = tuple[int, int]
"""Elements [start, stop) of a weight piece flattened row-major (a ZeRO shard's share)."""


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


Box = tuple[int, tuple[int, ...], tuple[int, ...]]
"""(first flat element, offsets, sizes) of a rectangular box of a tensor."""


def boxes(start: int, stop: int, shape: tuple[int, ...]) -> list[Box]:
    """The flat range [start, stop) of a row-major tensor of `shape` as rectangular boxes, in
    order: a partial first row, the whole rows, a partial last row (each recursively)."""
    if start >= stop:
        return []
    if not shape:
        return [(0, (), ())]
    inner = math.prod(shape[1:])
    first, last = start // inner, stop // inner
    if first == last:  # within one row
        return _in_row(first, start % inner, stop % inner, shape)
    out: list[Box] = []
    if start % inner:
        out += _in_row(first, start % inner, inner, shape)
        first += 1
    if last > first:
        out.append((first * inner, (first, *(0,) * (len(shape) - 1)), (last - first, *shape[1:])))
    return out + _in_row(last, 0, stop % inner, shape)


def _in_row(row: int, start: int, stop: int, shape: tuple[int, ...]) -> list[Box]:
    """The boxes of elements [start, stop) of row `row` (dim 0) of a tensor of `shape`."""
    inner = math.prod(shape[1:])
    return [(row * inner + f, (row, *o), (1, *z)) for f, o, z in boxes(start, stop, shape[1:])]


def _chunks(
    fqn: str,
    tensor: torch.Tensor,
    offsets: tuple[int, ...],
    size: tuple[int, ...],
    flat: Flat | None,
    piece_shape: tuple[int, ...],
) -> Entries:
    """`tensor` as entries of the logical tensor `fqn`: whole at `offsets`, or (a ZeRO shard
    holding `flat` of a piece of `piece_shape` at `offsets`) as views of its boxes."""
    if flat is None:
        return _stored(fqn, tensor, offsets, size)
    start, stop = flat
    values = tensor.detach().reshape(-1)
    out: Entries = {}
    for first, box_offsets, box_sizes in boxes(start, stop, piece_shape):
        at = tuple(a + b for a, b in zip(offsets, box_offsets, strict=True))
        view = values[first - start : first - start + math.prod(box_sizes)].view(box_sizes)
        out.update(_stored(fqn, view, at, size))
    return out


def _stored(fqn: str, tensor: torch.Tensor, offsets: tuple[int, ...], size: tuple[int, ...]) -> Entries:
    """`tensor` at `offsets` as an entry of the stored tensor of `size`: a padded weight's piece
    (`parts.py`, `key[0:50257+7, :]`) narrowed to the stored rows, none where it holds only
    padding (the zeros are the plan's, never written; read, they stay as they are)."""
    for d, (at, n) in enumerate(zip(offsets, size, strict=True)):
        if at >= n:
            return {}
        if at + tensor.shape[d] > n:
            tensor = tensor.narrow(d, 0, n - at)
    return _entry(fqn, Entry(tensor, offsets, size))


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
    flats: Mapping[str, Flat] | None = None,
) -> Entries:
    """This rank's weight pieces as checkpoint entries (partial sums other than 0 are not
    weights' business: a weight piece holds values, so only sum index 0 is written); `flats`:
    the weights held as ZeRO shards, and which elements of the piece they hold."""
    flats = flats or {}
    out: Entries = {}
    for key, tensor in weights.items():
        layout = layouts[key]
        if layout.pieces[rank][-2] != 0:
            continue
        fqn, offsets, size = placement(key, layout, rank, sizes)
        out.update(_chunks(fqn, tensor, offsets, size, flats.get(key), layout.piece_shape))
    return out


def optimizer_entries(
    optimizer: torch.optim.Optimizer | None,
    weights: Mapping[str, torch.Tensor],
    layouts: Mapping[str, Layout],
    rank: int,
    sizes: Mapping[str, tuple[int, ...]],
    flats: Mapping[str, Flat] | None = None,
) -> Entries:
    """The optimizer state of this rank's pieces: tensors shaped like the piece (or shard) are
    chunks of the logical state, other tensors (step counters) are whole (the parts of one
    packed weight share theirs: equal, as the parts step together)."""
    if optimizer is None:
        return {}
    flats = flats or {}
    out: Entries = {}
    for key, param in weights.items():
        layout = layouts[key]
        stored, offsets, size = placement(key, layout, rank, sizes)
        for name, value in optimizer.state.get(param, {}).items():
            if not isinstance(value, torch.Tensor):
                continue
            fqn = f"{OPTIMIZER_PREFIX}{stored}.{name}"
            if value.shape == param.shape and value.dim() > 0:
                out.update(_chunks(fqn, value, offsets, size, flats.get(key), layout.piece_shape))
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
    flats: Mapping[str, Flat] | None = None,
    options: Mapping[str, Any] | None = None,
) -> None:
    """A collective: every rank writes its pieces of the weights and optimizer state (`sizes`:
    the stored shape of each tensor the plan holds parts of; `flats`: the ZeRO shards among the
    weights) to a temporary folder beside `path`, which rank 0 renames to `path` when it is
    complete, recording `options` in it and naming it in the parent's `latest`."""
    sizes = sizes or {}
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    entries = weight_entries(weights, layouts, rank, sizes, flats)
    entries.update(optimizer_entries(optimizer, weights, layouts, rank, sizes, flats))
    entries.update(_entry(STEP_KEY, Entry.whole(torch.tensor(step, dtype=torch.int64))))
    try:
        dcp.save({}, checkpoint_id=str(partial), planner=_PieceSavePlanner(entries))
    except CheckpointException as e:
        raise CheckpointError(f"{path}: the checkpoint could not be written: {_cause(e)}") from None
    if rank == 0:
        _publish(partial, target, {"step": step, **(options or {})})


def _publish(partial: Path, target: Path, options: Mapping[str, Any]) -> None:
    """Rank 0, after DCP wrote `partial` completely: records the options, renames it to
    `target` (replacing an older one of that name) and names it in `latest`."""
    (partial / OPTIONS).write_text(json.dumps(options, indent=1, default=repr))
    old = target.with_name(f".{target.name}.old")
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    os.replace(partial, target)
    shutil.rmtree(old, ignore_errors=True)
    marker = target.parent / f".{LATEST}.partial"
    marker.write_text(target.name + "\n")
    os.replace(marker, target.parent / LATEST)


def _cause(error: BaseException) -> str:
    """One line for a DCP failure: the first rank's exception (a CheckpointError as it is)."""
    if isinstance(error, CheckpointException):
        for rank, (exc, _) in sorted(error.failures.items()):
            return _cause(exc) if isinstance(exc, CheckpointError) else f"rank {rank}: {_cause(exc)}"
    text = str(error).strip().splitlines()
    first = text[0].split(". ")[0] if text else ""
    return f"{type(error).__name__}: {first}".rstrip(": ")


def resolve(path: str | Path) -> Path:
    """The checkpoint `path` names: itself if complete, else the newest complete step folder in
    it (the one `latest` names, or the highest step); CheckpointError if there is none."""
    folder = Path(path)
    if (folder / ".metadata").is_file():
        return folder
    if not folder.is_dir():
        what = "a file, not a checkpoint folder" if folder.exists() else "no such checkpoint folder"
        raise CheckpointError(f"{path}: {what}")
    marker = folder / LATEST
    if marker.is_file():
        named = folder / marker.read_text().strip()
        if named.name and (named / ".metadata").is_file():
            return named
    steps = [
        (int(m[1]), d)
        for d in folder.iterdir()
        if (m := STEP_FOLDER.fullmatch(d.name)) and (d / ".metadata").is_file()
    ]
    if not steps:
        raise CheckpointError(
            f"{path}: not a checkpoint (no .metadata) and holds no complete step-<k> checkpoint"
        )
    return max(steps)[1]


def recorded(path: str | Path) -> dict[str, Any]:
    """What the run that saved checkpoint `path` recorded (`options`; {} for a checkpoint
    without the record)."""
    record = Path(path) / OPTIONS
    if not record.is_file():
        return {}
    try:
        value = json.loads(record.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{record}: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{record}: not a record of options")
    return value


def stored(path: str | Path) -> dict[str, TensorStorageMetadata]:
    """The tensors a checkpoint holds, by key; CheckpointError if it is not one."""
    try:
        metadata = dcp.FileSystemReader(str(path)).read_metadata()
    except Exception as e:  # a missing, truncated or foreign .metadata: unpickling fails anyhow
        reason = str(e).strip().splitlines()
        raise CheckpointError(
            f"{Path(path) / '.metadata'}: not a readable checkpoint ({type(e).__name__}"
            f"{': ' + reason[0] if reason else ''})"
        ) from None
    _check_files(Path(path), metadata.storage_data)
    return {k: v for k, v in metadata.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}


def _check_files(folder: Path, storage: Any) -> None:
    """CheckpointError naming the first data file the index lists that is missing or shorter
    than the index says (a copy cut short, a save killed before the rename existed)."""
    needed: dict[str, int] = {}
    for info in (storage or {}).values():
        where = getattr(info, "relative_path", None)
        if where is not None:
            needed[where] = max(needed.get(where, 0), info.offset + info.length)
    for name, length in sorted(needed.items()):
        file = folder / name
        if not file.is_file():
            raise CheckpointError(f"{file}: missing (the checkpoint's .metadata lists it)")
        if file.stat().st_size < length:
            raise CheckpointError(
                f"{file}: truncated ({file.stat().st_size} bytes, the checkpoint's .metadata needs {length})"
            )


def _read(path: str | Path, entries: Entries, no_dist: bool = False) -> None:
    """DCP's load of `entries` in place; a corrupt or truncated file is a CheckpointError."""
    try:
        dcp.load({}, checkpoint_id=str(path), planner=_PieceLoadPlanner(entries), no_dist=no_dist)
    except CheckpointError:
        raise
    except (CheckpointException, Exception) as e:
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({_cause(e)})") from None


def load(
    path: str | Path,
    weights: Mapping[str, torch.Tensor],
    layouts: Mapping[str, Layout],
    rank: int,
    optimizer: torch.optim.Optimizer | None = None,
    sizes: Mapping[str, tuple[int, ...]] | None = None,
    flats: Mapping[str, Flat] | None = None,
) -> int:
    """A collective: reads this rank's pieces of every weight (and, given an optimizer, its state)
    in place, whatever plan wrote the checkpoint (`flats`: the ZeRO shards among the weights).
    Returns the step it was saved at."""
    sizes = sizes or {}
    found = stored(path)
    missing = [k for k in map(stored_key, layouts) if k not in found]
    if missing:
        raise CheckpointError(f"{path}: no weight '{missing[0]}' (a checkpoint of another model?)")
    entries = weight_entries(weights, layouts, rank, sizes, flats)
    step = torch.zeros((), dtype=torch.int64)
    entries.update(_entry(STEP_KEY, Entry.whole(step)))
    shared: list[tuple[dict, str, torch.Tensor]] = []
    if optimizer is not None:
        entries.update(
            _empty_optimizer_state(optimizer, weights, layouts, rank, found, sizes, flats or {}, shared)
        )
    _read(path, entries)
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
    flats: Mapping[str, Flat],
    shared: list[tuple[dict, str, torch.Tensor]],
) -> Entries:
    """Allocates the optimizer state the checkpoint holds for this rank's pieces, as entries to
    read into (an optimizer's state is created lazily by its first step). A whole state tensor
    two parts of one weight read is read once: `shared` lists (state, name, tensor read) for
    the second reader, to be given a copy after the load."""
    out: Entries = {}
    for key, param in weights.items():
        layout = layouts[key]
        fqn_of, offsets, size = placement(key, layout, rank, sizes)
        prefix = f"{OPTIMIZER_PREFIX}{fqn_of}."
        state = optimizer.state[param]
        for fqn, md in found.items():
            name = fqn.removeprefix(prefix)
            if not fqn.startswith(prefix) or "." in name:
                continue
            dtype = md.properties.dtype
            if tuple(md.size) == size and size:
                value = torch.zeros(param.shape, dtype=dtype, device=param.device)
                out.update(_chunks(fqn, value, offsets, size, flats.get(key), layout.piece_shape))
                state[name] = value
                continue
            value = torch.zeros(tuple(md.size), dtype=dtype, device=param.device if md.size else "cpu")
            index = (fqn, (0,) * value.dim())
            if index in out:
                shared.append((state, name, out[index].tensor))
                continue
            out[index] = Entry.whole(value)
            state[name] = value
    return out


def load_module(module: nn.Module, path: str | Path) -> list[str]:
    """Loads a checkpoint's weights into a plain nn.Module (one process, no process group) by
    state_dict key; returns the module's keys the checkpoint does not hold (buffers, say)."""
    path = resolve(path)
    found = stored(path)
    state = module.state_dict()
    entries = {(k, (0,) * v.dim()): Entry.whole(v) for k, v in state.items() if k in found}
    _read(path, entries, no_dist=True)
    return [k for k in state if k not in found]
