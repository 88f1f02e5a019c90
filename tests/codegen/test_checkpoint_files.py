"""The checkpoint folder without torchrun: the boxes a ZeRO shard's flat range is saved as, which
step folder `--resume DIR` takes (the newest complete one: a save killed before its rename left
only a `.partial` folder), the record of options, and located errors for broken checkpoints."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from unityc.runtime import checkpoint
from unityc.runtime.checkpoint import CheckpointError, boxes, recorded, resolve, stored

SHAPES = [(), (5,), (3, 4), (2, 3, 4), (4, 1, 3)]


@pytest.mark.parametrize("shape", SHAPES)
def test_boxes_cover_every_flat_range_once_in_order(shape: tuple[int, ...]) -> None:
    n = math.prod(shape)
    for start in range(n + 1):
        for stop in range(start, n + 1):
            covered = torch.zeros(shape, dtype=torch.int64)
            position = start
            for first, offsets, sizes in boxes(start, stop, shape):
                assert first == position, (shape, start, stop)
                covered[tuple(slice(o, o + z) for o, z in zip(offsets, sizes, strict=True))] += 1
                position += math.prod(sizes)
            flat = covered.reshape(-1)
            assert position == stop
            assert flat[start:stop].eq(1).all() and flat[:start].eq(0).all() and flat[stop:].eq(0).all()


def test_a_shard_within_rows_is_at_most_three_boxes() -> None:
    """Shard 1 of 4 of a 30x15 weight (elements 113..225): the rest of row 7, rows 8-14, the
    start of row 15."""
    expected = [(113, (7, 8), (1, 7)), (120, (8, 0), (7, 15)), (225, (15, 0), (1, 1))]
    assert boxes(113, 226, (30, 15)) == expected


def complete(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(b"")
    return folder


def test_resume_takes_the_newest_complete_step(tmp_path: Path) -> None:
    complete(tmp_path / "step-2")
    newest = complete(tmp_path / "step-10")
    (tmp_path / ".step-12.partial").mkdir()  # a save killed before its rename
    (tmp_path / "step-11").mkdir()  # not DCP's: no .metadata
    assert resolve(tmp_path) == newest
    assert resolve(newest) == newest
    (tmp_path / checkpoint.LATEST).write_text("step-2\n")
    assert resolve(tmp_path) == tmp_path / "step-2"  # the marker names the newest save


def test_a_folder_without_a_checkpoint_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="holds no complete step-<k> checkpoint"):
        resolve(tmp_path)
    with pytest.raises(CheckpointError, match="no such checkpoint folder"):
        resolve(tmp_path / "missing")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(CheckpointError, match="a file, not a checkpoint folder"):
        resolve(tmp_path / "a-file")


def test_a_truncated_index_is_named(tmp_path: Path) -> None:
    (tmp_path / ".metadata").write_bytes(b"\x80\x04\x95")
    with pytest.raises(CheckpointError, match=r"\.metadata: not a readable checkpoint \(\w+"):
        stored(tmp_path)


def test_the_record_of_options(tmp_path: Path) -> None:
    assert recorded(tmp_path) == {}  # saved before records existed
    (tmp_path / checkpoint.OPTIONS).write_text('{"optimizer": {"name": "Adam"}}')
    assert recorded(tmp_path) == {"optimizer": {"name": "Adam"}}
    (tmp_path / checkpoint.OPTIONS).write_text("[1, 2")
    with pytest.raises(CheckpointError, match=r"unityc\.json: unreadable"):
        recorded(tmp_path)
