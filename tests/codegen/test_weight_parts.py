"""Weight parts (`key[:, 0:8]`, `unityc.runtime.parts`): a packed parameter read by the plan as
boxes of the stored tensor. Where the plan meets the model the parts are that tensor: the
reference takes and updates them in place (the packed gradient is the parts' side by side), and a
checkpoint holds the packed tensor (chunks at the parts' offsets), so it loads into the plain
module, into a plan holding the tensor whole, and back into the parts with their optimizer state."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from unityc.runtime import checkpoint
from unityc.runtime.check import Reference, part_of
from unityc.runtime.parts import WeightKey
from unityc.runtime.plan import Layout


def test_keys_print_parse_and_compose() -> None:
    key = WeightKey.parse("h.0.attn.c_attn.weight[:, 8:16]")
    assert key == WeightKey("h.0.attn.c_attn.weight", (None, (8, 16)))
    assert str(key) == "h.0.attn.c_attn.weight[:, 8:16]"
    assert WeightKey.parse("fc.weight") == WeightKey("fc.weight")
    assert WeightKey.parse("odd[key]").stored == "odd[key]"  # not a box: a key of its own
    assert str(key.sub(1, 4, 8, (16, 8))) == "h.0.attn.c_attn.weight[:, 12:16]"  # a part of a part
    assert str(WeightKey("b").sub(0, 0, 4, (12,))) == "b[0:4]"
    assert WeightKey("b").sub(0, 0, 12, (12,)) == WeightKey("b")  # the whole dim: the whole weight
    assert key.check_shape((16, 8)) is None
    assert "dim 1" in str(key.check_shape((16, 4)))
    assert key.overlaps(WeightKey.parse("h.0.attn.c_attn.weight[:, 15:20]"))
    assert not key.overlaps(WeightKey.parse("h.0.attn.c_attn.weight[:, 16:24]"))
    assert key.overlaps(WeightKey("h.0.attn.c_attn.weight"))
    with pytest.raises(ValueError, match="no part of a tensor"):
        key.slices((16, 12))


class Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(4, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.qkv(x).square().sum()


PARTS = ("qkv.weight[0:2, :]", "qkv.weight[2:4, :]", "qkv.weight[4:6, :]", "qkv.bias[0:3]", "qkv.bias[3:6]")


def _layouts(keys: tuple[str, ...], shapes: dict[str, tuple[int, ...]]) -> dict[str, Layout]:
    out = {}
    for key in keys:
        part = WeightKey.parse(key)
        shape = tuple(s.stop - s.start for s in part.slices(shapes[part.stored]))
        out[key] = Layout(shape, "float32", (1,) * len(shape), pieces={0: (0,) * len(shape) + (0, 0)})
    return out


def test_the_reference_reads_and_updates_parts_in_place() -> None:
    torch.manual_seed(0)
    module = Packed()
    reference = Reference(module, {"x": torch.randn(3, 4)}, torch.optim.SGD(module.parameters(), lr=0.5))
    before = module.qkv.weight.detach().clone()
    _, grads = reference.gradients()
    parts = {k: part_of(grads, k) for k in PARTS}
    assert torch.equal(torch.cat([parts[k] for k in PARTS[:3]]), grads["qkv.weight"])
    reference.update(parts)  # type: ignore[arg-type]
    assert torch.allclose(module.qkv.weight, before - 0.5 * grads["qkv.weight"])
    reference.load({"qkv.weight[2:4, :]": torch.zeros(2, 4)})
    assert torch.equal(reference.weight("qkv.weight[2:4, :]"), torch.zeros(2, 4))
    assert torch.equal(module.qkv.weight[:2], (before - 0.5 * grads["qkv.weight"])[:2])


@pytest.fixture
def one_process(tmp_path: Path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_checkpoints_hold_the_packed_tensor(tmp_path: Path, one_process: None) -> None:
    torch.manual_seed(0)
    module = Packed()
    state = module.state_dict()
    sizes = {k: tuple(v.shape) for k, v in state.items()}
    layouts = _layouts(PARTS, sizes)
    weights = {k: nn.Parameter(part_of(state, k).clone()) for k in PARTS}  # type: ignore[union-attr]
    optimizer = torch.optim.Adam(weights.values(), lr=0.1)
    sum(w.square().sum() for w in weights.values()).backward()
    optimizer.step()
    path = tmp_path / "ck"
    checkpoint.save(path, 7, weights, layouts, 0, optimizer, sizes)

    plain = Packed()
    assert checkpoint.load_module(plain, path) == []
    for key, w in weights.items():  # the plain module holds the parts at their boxes
        assert torch.equal(part_of(plain.state_dict(), key), w)  # type: ignore[arg-type]

    whole = _layouts(("qkv.weight", "qkv.bias"), sizes)  # a plan holding the tensors whole
    into = {k: nn.Parameter(torch.zeros(sizes[k])) for k in whole}
    assert checkpoint.load(path, into, whole, 0) == 7
    assert torch.equal(into["qkv.weight"], plain.qkv.weight) and torch.equal(into["qkv.bias"], plain.qkv.bias)

    again = {k: nn.Parameter(torch.zeros_like(w)) for k, w in weights.items()}  # back into parts
    resumed = torch.optim.Adam(again.values(), lr=0.1)
    assert checkpoint.load(path, again, layouts, 0, resumed, sizes) == 7
    for key in PARTS:
        assert torch.equal(again[key], weights[key])
        saved, loaded = optimizer.state[weights[key]], resumed.state[again[key]]
        assert torch.equal(saved["exp_avg"], loaded["exp_avg"]) and torch.equal(saved["step"], loaded["step"])
    steps = [resumed.state[again[k]]["step"] for k in PARTS]
    assert len({id(s) for s in steps}) == len(PARTS)  # each part its own step counter


def test_padded_keys_take_zeros_after_the_stored_rows() -> None:
    """A padded vocabulary's weight (`search/vocabulary.py`): the stored rows, then zeros that
    only the plan holds (taken as zeros, dropped where the plan writes the stored tensor)."""
    key = WeightKey.parse("wte.weight[0:5+3, :]")
    assert key == WeightKey.padded("wte.weight", (5, 4), 0, 3) and str(key) == "wte.weight[0:5+3, :]"
    assert key.check_shape((8, 4)) is None and "3 zeros" in str(key.check_shape((5, 4)))
    assert key.unpadded() == WeightKey("wte.weight")
    assert WeightKey.parse("b[2:6+2]").unpadded() == WeightKey("b", ((2, 6),))
    stored = torch.arange(20.0).view(5, 4)
    taken = key.take(stored)
    assert taken.shape == (8, 4) and torch.equal(taken[:5], stored) and not taken[5:].any()
    into = torch.zeros(5, 4)
    key.put(into, taken)
    assert torch.equal(into, stored)
    with pytest.raises(ValueError, match="no part of a tensor"):  # padding only after the stored end
        key.take(torch.zeros(6, 4))
    with pytest.raises(ValueError, match="only a whole weight is padded"):
        WeightKey.padded("qkv.weight[0:2, :]", (2, 4), 0, 2)
    with pytest.raises(ValueError, match="only a range"):
        WeightKey("w", (None, (0, 4)), (1, 0))


class Table(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(5, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.wte(ids).square().sum()


def test_checkpoints_of_a_padded_weight_hold_the_stored_rows(tmp_path: Path, one_process: None) -> None:
    """Saved from a plan holding the table padded to 8 rows (two pieces of 4: the second holds
    one stored row and three of padding), a checkpoint is the model's [5, 4] table: it loads
    into the plain module, into the whole table and back into the padded pieces, the padding
    zero and the optimizer state of the stored rows kept."""
    torch.manual_seed(0)
    state = Table().state_dict()
    key, sizes = "wte.weight[0:5+3, :]", {"wte.weight": (5, 4)}
    padded = {key: nn.Parameter(WeightKey.parse(key).take(state["wte.weight"]).clone())}
    optimizer = torch.optim.Adam(padded.values(), lr=0.1)
    padded[key][:5].square().sum().backward()
    optimizer.step()
    for index in (0, 1):  # each half as a rank's piece, saved one after the other
        piece = {key: nn.Parameter(padded[key].detach()[4 * index : 4 * index + 4].clone())}
        pieces = Layout((8, 4), "float32", (2, 1), pieces={0: (index, 0, 0, 0)})
        moments = torch.optim.Adam(piece.values(), lr=0.1)
        moments.state[piece[key]] = {
            k: v[4 * index : 4 * index + 4].clone() if v.dim() else v.clone()
            for k, v in optimizer.state[padded[key]].items()
        }
        checkpoint.save(tmp_path / f"half{index}", 3, piece, {key: pieces}, 0, moments, sizes)
    plain = Table()
    assert checkpoint.load_module(plain, tmp_path / "half0") == []
    assert torch.equal(plain.wte.weight[:4], padded[key][:4])
    assert checkpoint.load_module(plain, tmp_path / "half1") == []  # its one stored row, written
    assert torch.equal(plain.wte.weight, padded[key][:5])
    back = {key: nn.Parameter(torch.zeros(4, 4))}
    resumed = torch.optim.Adam(back.values(), lr=0.1)
    second = Layout((8, 4), "float32", (2, 1), pieces={0: (1, 0, 0, 0)})
    assert checkpoint.load(tmp_path / "half1", back, {key: second}, 0, resumed, sizes) == 3
    assert torch.equal(back[key], padded[key][4:]) and not back[key][1:].any()
    assert torch.equal(resumed.state[back[key]]["exp_avg"], optimizer.state[padded[key]]["exp_avg"][4:])
