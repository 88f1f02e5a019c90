"""The dense/recommendation zoo models (MLP, BERT, DLRM, XDL, CANDLE-Uno): shapes, losses, sizes, inputs."""

from __future__ import annotations

import inspect
import math
from types import ModuleType

import pytest
import torch

from unityc.models import Config, bert, candle_uno, dlrm, mlp, xdl

MODULES: list[ModuleType] = [mlp, bert, dlrm, xdl, candle_uno]


def _output_shape(name: str, config: Config, batch: int) -> tuple[int, ...]:
    """The forward's second result's shape, from the config."""
    if name == "mlp":
        return (batch, int(config["hidden_dims"][-1]))
    if name == "bert":
        return (batch, int(config["seq_len"]), int(config["vocab_size"]))
    return (batch, 1)


PAPER_PARAMS: dict[str, int] = {
    # 2 towers * (1024 * 8192 + 7 * 8192**2), no bias.
    "mlp": 956_301_312,
    # Embeddings (30522 + 512 + 2) * 1024 + LN 2048 = 31,782,912;
    # 24 layers * (4 * (1024**2 + 1024) + 2 * 4096 * 1024 + 4096 + 1024 + 2 * 2048) = 302,309,376;
    # MLM head 1024**2 + 1024 + 2048 + decoder bias 30522 (decoder weight tied) = 1,082,170.
    "bert": 335_174_458,
    # 16 * 33,762,577 Kaggle rows = 540,201,232; bottom 13-512-256-64-16 with bias = 155,984;
    # top (16 + 27 * 26 / 2 = 367)-512-256-1 with bias = 320,001.
    "dlrm": 540_677_217,
    # 4 * 1,000,000 * 64 + 2 * 256 * 256 + 256 * 1, no bias.
    "xdl": 256_131_328,
    # Shared encoders (942 + 5270 + 2048) * 4192 + 3 * 7 * 4192**2 = 403,656,064;
    # tower (4 * 4192 + 4192 + 1 + 1) * 4192 + 3 * 4192**2 + 4192 * 1 = 140,595,488; no bias.
    "candle_uno": 544_251_552,
}


def _small(module: ModuleType) -> tuple[torch.nn.Module, dict[str, torch.Tensor], int]:
    """The small model (seeded) with its default-batch inputs."""
    model_def = module.MODEL
    torch.manual_seed(0)
    config = model_def.configs["small"]
    batch = model_def.batch["small"]
    model = model_def.build(config)
    return model, model_def.inputs(config, batch, torch.Generator().manual_seed(0)), batch


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.MODEL.name)
def test_small_forward(module: ModuleType) -> None:
    """Small config: input keys are forward's arguments, the loss a finite scalar, the output shaped."""
    model, inputs, batch = _small(module)
    assert list(inputs) == list(inspect.signature(model.forward).parameters)
    loss, output = model(**inputs)
    assert loss.dim() == 0 and math.isfinite(loss.item())
    assert tuple(output.shape) == _output_shape(module.MODEL.name, module.MODEL.configs["small"], batch)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.MODEL.name)
def test_small_exports(module: ModuleType) -> None:
    """Small config exports with `torch.export`, the user inputs named after the example inputs."""
    model, inputs, _ = _small(module)
    program = torch.export.export(model, (), kwargs=inputs)
    assert list(program.graph_signature.user_inputs) == list(inputs)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.MODEL.name)
def test_paper_on_meta(module: ModuleType) -> None:
    """Paper config on meta: the hand-counted parameters and the output shape on meta inputs."""
    model_def = module.MODEL
    config = model_def.configs["paper"]
    with torch.device("meta"):
        model = model_def.build(config)
    assert sum(p.numel() for p in model.parameters()) == PAPER_PARAMS[model_def.name]
    batch = 2
    examples = model_def.inputs(config, batch, torch.Generator().manual_seed(0))
    meta = {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in examples.items()}
    loss, output = model(**meta)
    assert loss.shape == () and tuple(output.shape) == _output_shape(model_def.name, config, batch)


@pytest.mark.parametrize("module", [dlrm, xdl], ids=lambda m: m.MODEL.name)
@pytest.mark.parametrize("size", ["small", "paper"])
def test_sparse_indices_respect_each_table(module: ModuleType, size: str) -> None:
    """Sparse indices are int64 within their own table's rows; labels are 0/1 floats."""
    config = module.MODEL.configs[size]
    tables = [int(n) for n in config["table_sizes"]]
    x = module.MODEL.inputs(config, 512, torch.Generator().manual_seed(1))
    sparse, labels = x["sparse"], x["labels"]
    assert sparse.dtype == torch.int64 and tuple(sparse.shape) == (512, len(tables), int(config["bag_size"]))
    for t, rows in enumerate(tables):
        column = sparse[:, t, :]
        assert column.min() >= 0 and column.max() < rows
        if rows <= 50:
            # Each table draws from its own range, not from the smallest or a shared one.
            assert column.max() == rows - 1
    assert labels.dtype == torch.float32 and labels.min() >= 0 and labels.max() <= 1


def test_dense_inputs_in_range() -> None:
    """BERT and MLP integer inputs lie below their bounds; CANDLE-Uno features have the paper widths."""
    for size in ("small", "paper"):
        config = bert.MODEL.configs[size]
        x = bert.MODEL.inputs(config, 2, torch.Generator().manual_seed(2))
        for key in ("input_ids", "labels"):
            assert x[key].dtype == torch.int64 and x[key].shape == (2, int(config["seq_len"]))
            assert x[key].min() >= 0 and x[key].max() < int(config["vocab_size"])
        config = mlp.MODEL.configs[size]
        x = mlp.MODEL.inputs(config, 64, torch.Generator().manual_seed(3))
        assert x["labels"].dtype == torch.int64
        assert x["labels"].min() >= 0 and x["labels"].max() < int(config["hidden_dims"][-1])
        assert x["input1"].dtype == torch.float32 and x["input1"].shape == (64, int(config["in_features"]))
    x = candle_uno.MODEL.inputs(candle_uno.MODEL.configs["paper"], 2, torch.Generator().manual_seed(4))
    assert {k: tuple(v.shape) for k, v in x.items() if k != "labels"} == {
        "cell_rnaseq": (2, 942),
        "dose1": (2, 1),
        "dose2": (2, 1),
        "drug1_descriptors": (2, 5270),
        "drug1_fingerprints": (2, 2048),
        "drug2_descriptors": (2, 5270),
        "drug2_fingerprints": (2, 2048),
    }
    assert all(v.dtype == torch.float32 for v in x.values())


def test_candle_uno_shares_encoders_per_feature_type() -> None:
    """Inputs of one feature type share an encoder, so the export has one weight per shared layer."""
    model, inputs, _ = _small(candle_uno)
    program = torch.export.export(model, (), kwargs=inputs)
    # 3 encoders (cell, drug descriptors, drug fingerprints) of 8 layers, a 4-layer tower, the output.
    parameters = [s for s in program.graph_signature.input_specs if s.kind.name == "PARAMETER"]
    assert len(parameters) == 3 * 8 + 4 + 1


def test_paper_index_constants_survive_meta_build() -> None:
    """Constant index buffers keep their values on a meta build (the importer folds them)."""
    with torch.device("meta"):
        model = dlrm.MODEL.build(dlrm.MODEL.configs["paper"])
    li, lj = torch.tril_indices(27, 27, offset=-1)
    assert torch.equal(model.li, li) and torch.equal(model.lj, lj)
    with torch.device("meta"):
        model = bert.MODEL.build(bert.MODEL.configs["paper"])
    assert torch.equal(model.position_ids, torch.arange(512))
