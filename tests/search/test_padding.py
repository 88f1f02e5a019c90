"""Images padded to even shards (`search/padding.py`, issue 29): the padded graph equals the
unpadded one in the interpreter (float64) for a U-Net (pixel shuffles, skip concats, batch
norms) and torchvision's ResNet-18 (stride-2 windows, a padded max pool, residual adds, a global
pool the real rows are split off before); one full-size mask per batch norm and per upsampling;
the spatial plans price the padded graph on every device where the unpadded rows leave devices
idle (~7 CPU s). A window that cannot halve the real rows is in
`tests/filecheck/passes/pad_images.mlir`, the torchrun check of a padded plan in
`tests/codegen/test_torchrun_spatial.py`."""

from __future__ import annotations

from pathlib import Path

import pytest
from search_graphs import assert_same_outputs

from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine.presets import preset
from unityc.search.padding import PaddingError, downsampling, pad_images, padded_layout, padded_rows
from unityc.search.plans import Pricing, spatial_plans

TORCHVISION = str(Path(__file__).parent.parent / "codegen" / "torchvision_models.py")


def _zoo(model: str, **config: str) -> Graph:
    return from_module(import_model(ModelSpec(model, "small", None, tuple(config.items()))))


def _full_size_masks(graph: Graph) -> int:
    """Multiplications of a batch-sized activation by a [1, 1, H, 1] row mask."""
    count = 0
    for node in graph.nodes.values():
        if node.op != "pcg.mul":
            continue
        shapes = [graph.type_of(r).shape for r in node.operand_refs()]
        count += any(s[:2] == (1, 1) and s[3] == 1 for s in shapes) and any(s[0] > 1 for s in shapes)
    return count


def test_a_padded_u_net_computes_what_the_unpadded_one_does() -> None:
    unet = _zoo("unet")  # 16 rows, two 2x poolings
    assert downsampling(unet) == 4 and padded_rows(unet, 3) == 24 and padded_rows(unet, 2) == 16
    padded = pad_images(unet, 24)
    batch_norms = sum(node.op == "pcg.batch_norm" for node in unet.nodes.values())
    # one before each batch norm, and one before each decoder stage's first 3x3 convolution
    # (its upsampling's biased 1x1 convolution fills the padded rows)
    assert "pcg.batch_norm" not in padded.op_counts() and _full_size_masks(padded) == batch_norms + 2 == 12
    assert padded.op_counts()["pcg.split"] == 2  # before the loss's reshape and the logits output
    assert_same_outputs(unet, padded)


def test_strided_windows_and_a_padded_max_pool() -> None:
    # torchvision's own ResNet-18, 32 rows down to 1: padded to 96 for 3 ways. Its stem's 3x3/2
    # max pool (padding 1) gives its first padded row a real row's value: the next 3x3
    # convolution must see it masked (a pool of clean rows was taken as clean: 1.4 % off)
    resnet = from_module(import_model(ModelSpec(TORCHVISION + ":resnet18", "small", 2)))
    assert padded_rows(resnet, 3) == 96
    assert_same_outputs(resnet, pad_images(resnet, 96))


def test_the_spatial_plans_pad_where_devices_would_idle() -> None:
    unet = _zoo("unet")
    assert padded_layout(unet, 3, 1) == 24 and padded_layout(unet, 4, 1) is None  # 4 divides
    notes = {plan.note for plan in spatial_plans(unet, preset("cpu:3"), Pricing())}
    assert notes == {
        "2-way over height x width (2 of 3 devices)",
        "3-way over height x width, images padded from 16 to 24 rows",
    }


def test_padding_that_adds_nothing_or_a_graph_without_images_is_refused() -> None:
    unet = _zoo("unet")
    with pytest.raises(PaddingError, match="has 16 rows: padding to 16 would not add any"):
        pad_images(unet, 16)
    with pytest.raises(PaddingError, match="no image input"):
        pad_images(_zoo("mlp"), 8)
