"""The match helpers `fuse_attention` shares with its weight preparation, and that preparation:
equal constants shared (`share_constants`), packed projections unpacked into one linear per piece
(`unpack_linears`), and the weights the fused ops read as parts split into `WeightKey` parts
(`split_weights`). `FuseAttentionPass` runs them around the pattern."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from unityc.dialects import pcg
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import carry_plan
from unityc.runtime.parts import WeightKey


def _owner(value: SSAValue, cls: type[Operation] | tuple[type[Operation], ...]) -> Any:
    owner = value.owner
    return owner if isinstance(owner, cls) else None


def _perm(op: Any) -> list[int]:
    return list(op.attrs()["perm"])


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return value.type.shape


def _pairs(op: Any) -> tuple[tuple[SSAValue, SSAValue], tuple[SSAValue, SSAValue]]:
    return (op.lhs, op.rhs), (op.rhs, op.lhs)


def _is_zero(value: SSAValue) -> bool:
    c = _owner(value, pcg.ConstantOp)
    return c is not None and all(v == 0 for v in c.attrs()["value"].get_values())


def share_constants(module: ModuleOp) -> None:
    """Equal `pcg.constant`s (type and value) become one, so a mask or rotary table folded once
    per layer is stored, printed and matched once."""
    first: dict[tuple[Any, Any], pcg.ConstantOp] = {}
    for op in list(module.walk()):
        if not isinstance(op, pcg.ConstantOp):
            continue
        key = (op.results[0].type, op.properties["value"])
        kept = first.setdefault(key, op)
        if kept is not op:
            op.results[0].replace_all_uses_with(kept.results[0])
            op.detach()
            op.erase()


def unpack_linears(module: ModuleOp) -> None:
    """A `pcg.linear` whose result only splits read, on its last dim (a packed projection:
    Phi-3's qkv_proj and gate_up_proj), becomes one linear per piece between the splits' cuts,
    on the matching rows of its weight and bias (a `pcg.split` of each, which `split_weights`
    then makes weights of their own). Exact (each output column reads only its own weight row),
    and each piece can then be split by columns on its own (heads, Megatron's MLP), which no
    layout of the packed result can express."""
    for op in list(module.walk()):
        if not isinstance(op, pcg.LinearOp) or not _plain(op.output):
            continue
        last = len(_shape(op.output)) - 1
        readers = [use.operation for use in op.output.uses]
        splits = [r for r in readers if isinstance(r, pcg.SplitOp) and r.attrs()["dim"] % (last + 1) == last]
        if not readers or len(splits) != len(readers):
            continue
        cuts = {0, _shape(op.output)[-1]}
        for split in set(splits):
            cuts.update(itertools.accumulate(split.attrs()["sizes"]))
        cuts_list = sorted(cuts)
        if len(cuts_list) < 3:
            continue
        _unpack(op, cuts_list, set(splits))


def _unpack(op: pcg.LinearOp, cuts: list[int], readers: set[pcg.SplitOp]) -> None:
    sizes = [b - a for a, b in itertools.pairwise(cuts)]
    new_ops: list[Operation] = []
    parts = []
    for value in (op.weight, op.bias):
        if value is None:
            parts.append([None] * len(sizes))
            continue
        split = pcg.SplitOp.build_inferred([value], dim=0, sizes=sizes)
        for i, part in enumerate(split.results):
            part.name_hint = f"{value.name_hint or 'w'}_{i}"
        new_ops.append(split)
        parts.append(list(split.results))
    pieces = []
    for w, b in zip(*parts, strict=True):
        piece = pcg.LinearOp.build_inferred([op.input, w, b])
        piece.output.name_hint = op.output.name_hint
        new_ops.append(piece)
        pieces.append(piece.output)
    last = len(_shape(op.output)) - 1
    for reader in readers:
        start = 0
        for result, size in zip(reader.results, reader.attrs()["sizes"], strict=True):
            first, stop = cuts.index(start), cuts.index(start + size)
            start += size
            if not result.uses:
                continue
            value = pieces[first]
            if stop - first > 1:
                joined = pcg.ConcatOp.build_inferred([pieces[first:stop]], dim=last)
                new_ops.append(joined)
                value = joined.output
            result.replace_all_uses_with(value)
    _swap(op, new_ops, (*readers, op))


def split_weights(module: ModuleOp) -> None:
    """A weight read only by a `pcg.split` (directly, or through a `pcg.transpose` read only by
    the split) becomes one weight per part, each a box of the stored tensor (`key[:, 0:E]`,
    `unityc.runtime.parts`), transposed like the whole was. Each part is then a parameter of its
    own that a plan shards on its own: GPT-2's packed QKV weight [E, 3E] and nn.MultiheadAttention's
    in_proj [3E, E] by heads, which no layout of the packed tensor can express."""
    for op in list(module.walk()):
        if not isinstance(op, pcg.SplitOp):
            continue
        transpose = _owner(op.input, pcg.TransposeOp)
        source = transpose.input if transpose is not None else op.input
        weight = _owner(source, pcg.WeightOp)
        reads = [op.input] if transpose is None else [op.input, source]
        if weight is None or any(len(list(v.uses)) != 1 for v in reads) or not _plain(source):
            continue
        perm = _perm(transpose) if transpose is not None else list(range(len(_shape(source))))
        dim, shape = perm[op.attrs()["dim"]], _shape(source)
        key = WeightKey.parse(weight.attrs()["key"])
        new_ops: list[Operation] = []
        start = 0
        for result, size in zip(op.results, op.attrs()["sizes"], strict=True):
            part = key.sub(dim, start, start + size, shape)
            start += size
            box = list(shape)
            box[dim] = size
            frozen = bool(weight.attrs()["frozen"])
            taken = pcg.WeightOp.named(str(part), TensorType(box, _element(source)), frozen)
            carry_plan(weight, taken)
            hint = result.name_hint
            taken.result.name_hint = f"{hint}_t" if hint and transpose is not None else hint  # W^T
            new_ops.append(taken)
            value = taken.result
            if transpose is not None:
                turned = pcg.TransposeOp.build_inferred([value], perm=perm)
                carry_plan(transpose, turned)
                turned.output.name_hint = result.name_hint
                new_ops.append(turned)
                value = turned.output
            result.replace_all_uses_with(value)
        _swap(op, new_ops, (op, transpose, weight))


def _plain(value: SSAValue) -> bool:
    """An unparallelized value (degree 1 everywhere), as the importer makes them."""
    t = value.type
    return isinstance(t, TensorType) and t.num_pieces == 1


def _element(value: SSAValue) -> Any:
    t = value.type
    assert isinstance(t, TensorType)
    return t.element_type


def _swap(anchor: Operation, new_ops: Sequence[Operation], dead: Iterable[Operation | None]) -> None:
    """`new_ops` inserted before `anchor`, then the `dead` ops (None: absent) erased, readers first."""
    block = anchor.parent_block()
    assert block is not None
    block.insert_ops_before(new_ops, anchor)
    for op in dead:
        if op is not None:
            op.detach()
            op.erase()
