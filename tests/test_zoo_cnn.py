"""The CNN zoo models (ResNeXt-50 32x4d, Inception-v3): small forward, paper parameter counts, seeding."""

from __future__ import annotations

import pytest
import torch

from unityc.models import ZooModel, inception_v3, resnext50

# torchvision's published counts; Inception-v3's excludes the aux classifier (27,161,264 with it).
PAPER_PARAMS = {"resnext50": 25_028_904, "inception_v3": 23_834_568}

MODELS = [resnext50.MODEL, inception_v3.MODEL]


@pytest.fixture(params=MODELS, ids=lambda m: m.name)
def model(request: pytest.FixtureRequest) -> ZooModel:
    return request.param


def _small_forward(model: ZooModel, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    config = model.configs["small"]
    module = model.build(config)
    example = model.inputs(config, model.batch["small"], torch.Generator().manual_seed(seed))
    return module(**example)


def test_small_forward(model: ZooModel) -> None:
    loss, logits = _small_forward(model, 0)
    assert loss.dim() == 0
    assert torch.isfinite(loss)
    assert logits.shape == (model.batch["small"], model.configs["small"]["classes"])
    assert torch.isfinite(logits).all()


def test_inputs_match_config(model: ZooModel) -> None:
    config = model.configs["small"]
    example = model.inputs(config, 3, torch.Generator().manual_seed(1))
    side = config["image"]
    assert set(example) == {"images", "labels"}
    assert example["images"].shape == (3, 3, side, side)
    assert example["images"].dtype == torch.float32
    assert example["labels"].dtype == torch.int64
    assert int(example["labels"].min()) >= 0 and int(example["labels"].max()) < config["classes"]


def test_paper_parameter_count_on_meta(model: ZooModel) -> None:
    config = model.configs["paper"]
    with torch.device("meta"):
        module = model.build(config)
    assert sum(p.numel() for p in module.parameters()) == PAPER_PARAMS[model.name]
    # A meta forward checks the shapes of the full-size network without computing anything.
    side, batch = config["image"], model.batch["paper"]
    images = torch.empty(batch, 3, side, side, device="meta")
    labels = torch.empty(batch, dtype=torch.int64, device="meta")
    loss, logits = module(images=images, labels=labels)
    assert loss.shape == ()
    assert logits.shape == (batch, config["classes"])


def test_build_is_deterministic(model: ZooModel) -> None:
    config = model.configs["small"]
    states = []
    for _ in range(2):
        torch.manual_seed(7)
        states.append(model.build(config).state_dict())
    assert states[0].keys() == states[1].keys()
    for name, value in states[0].items():
        assert torch.equal(value, states[1][name]), name
    # Same seed, same inputs: the (dropout-bearing, batch-statistics) forward repeats exactly too.
    loss_a, logits_a = _small_forward(model, 3)
    loss_b, logits_b = _small_forward(model, 3)
    assert torch.equal(loss_a, loss_b)
    assert torch.equal(logits_a, logits_b)
