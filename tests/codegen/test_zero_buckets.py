"""How ZeRO weights are cut into buckets (`runtime/zero.py`, priced alike by
`cost.pricing.zero_bucket_bytes`): per copy group, one collective moves a run of consecutive
weights of one stage, dtype and layer, as FSDP2 moves one module's parameters. In-process,
no torchrun (the torchrun tests of ZeRO run the buckets)."""

from __future__ import annotations

import torch

from unityc.cost.pricing import zero_bucket_bytes
from unityc.runtime.patterns import layer_of
from unityc.runtime.zero import Shard, buckets_of


def test_a_layer_is_the_key_up_to_its_first_number() -> None:
    assert layer_of("model.model.layers.3.mlp.up_proj.weight") == "model.model.layers.3"
    assert layer_of("bert.encoder.layer.11.output.dense.bias") == "bert.encoder.layer.11"
    assert layer_of("model.lm_head.weight") == ""


def test_buckets_are_runs_of_one_group_stage_dtype_and_layer() -> None:
    group_a, group_b = object(), object()

    def shard(key: str, stage: int = 3, group: object = group_a, dtype: torch.dtype = torch.float32) -> Shard:
        ranks = (0, 1) if group is group_a else (0, 2)
        return Shard(key, stage, torch.zeros(5, 3, dtype=dtype), group, ranks, 0)

    shards = [
        shard("embed.weight"),
        shard("layers.0.q.weight"),
        shard("layers.0.k.weight"),
        shard("layers.0.norm.weight", dtype=torch.bfloat16),
        shard("layers.0.v.weight", group=group_b),
        shard("layers.1.q.weight"),
        shard("layers.1.k.weight", stage=2),
        shard("norm.weight"),
        shard("lm_head.weight"),
    ]
    buckets = buckets_of(shards)
    assert [[s.key for s in b.shards] for b in buckets] == [
        ["embed.weight"],
        ["layers.0.q.weight", "layers.0.k.weight"],
        ["layers.0.norm.weight"],
        ["layers.0.v.weight"],
        ["layers.1.q.weight"],
        ["layers.1.k.weight"],
        ["norm.weight", "lm_head.weight"],
    ]
    # 15 elements in 2 shards of 8: a bucket's part per rank is its shards' concatenated
    assert [b.offsets for b in buckets][1] == [0, 8, 16]
    assert buckets[1].m == 16


def test_buckets_are_cut_per_copy_group_as_the_cost_model_cuts_them() -> None:
    """Rank 0 holds weights in two copy groups, (0, 1) and (0, 2), interleaved in plan order:
    rank 1 sees only the first group's and rank 2 only the second's, so each group's weights
    are cut on their own (else rank 0 would split a bucket that rank 1 moves whole: the ranks
    of a group would disagree), and the cost model prices the same buckets per group."""
    groups = {(0, 1): object(), (0, 2): object()}
    plan = [("layers.0.q.weight", (0, 1)), ("layers.0.k.weight", (0, 2)), ("layers.0.v.weight", (0, 1))]
    plan += [("layers.0.o.weight", (0, 2)), ("layers.1.q.weight", (0, 1))]
    shards = [Shard(key, 3, torch.zeros(4, 4), groups[ranks], ranks, 0) for key, ranks in plan]
    buckets = [[s.key for s in b.shards] for b in buckets_of(shards)]
    assert buckets == [
        ["layers.0.q.weight", "layers.0.v.weight"],
        ["layers.0.k.weight", "layers.0.o.weight"],
        ["layers.1.q.weight"],
    ]
    priced = zero_bucket_bytes([((3, "f32"), key, 64, [ranks]) for key, ranks in plan])
    assert priced == [{(0, 1): 128}, {(0, 2): 128}, {(0, 1): 128}, {(0, 2): 128}, {(0, 1): 64}]


def test_copy_out_writes_each_whole_piece_as_pieces_reads_it() -> None:
    """The step's all-gathered buffer copied straight into the whole pieces (one strided copy
    each, padding skipped) gives what `Bucket.pieces` reads from it."""
    group = object()
    shards = [
        Shard(key, 1, torch.zeros(shape), group, (0, 1, 2), 0) for key, shape in (("a", (5, 3)), ("b", (4,)))
    ]
    bucket = buckets_of(shards)[0]
    out = torch.arange(bucket.n * bucket.m, dtype=torch.float32)
    wholes = [torch.empty(s.shape) for s in shards]
    bucket.copy_out(out, wholes)
    for whole, piece in zip(wholes, bucket.pieces(out).values(), strict=True):
        assert torch.equal(whole, piece)
