"""A vocabulary padded to a multiple of the tensor degree (`search/vocabulary.py`, issue 38):
the padded graph computes what the unpadded one does (interpreter, float64) for GPT-2 and Llama
(untied heads) and the zoo BERT (its head tied to the word embedding, with a decoder bias);
Megatron plans then split the table and the head by rows. The torchrun checks of padded plans
(gradients, updated weights, checkpoints across padded and unpadded plans) are in
`tests/codegen/test_torchrun_vocabulary.py`."""

from __future__ import annotations

import pytest
from search_graphs import assert_same_outputs

from unityc.dialects.forms import FormError
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.search.layout import Layout
from unityc.search.strategies import megatron_layouts
from unityc.search.vocabulary import pad_vocabulary, padded_size, vocabularies


def _import(model: str, **config: str) -> Graph:
    return from_module(import_model(ModelSpec(model, "small", None, tuple(config.items()))))


def _padded_keys(graph: Graph) -> list[str]:
    return sorted(
        n.attr("key") for n in graph.nodes.values() if n.op == "pcg.weight" and "+" in n.attr("key")
    )


@pytest.mark.parametrize(
    ("model", "config", "keys"),
    [
        ("hf:GPT2Config", {"vocab": "1001", "layers": "1"}, ["lm_head.weight", "transformer.wte.weight"]),
        ("hf:LlamaConfig", {"vocab": "1001", "layers": "1"}, ["lm_head.weight", "model.embed_tokens.weight"]),
        ("bert", {"vocab_size": "127"}, ["decoder.bias", "word_embeddings.weight"]),
    ],
)
def test_a_padded_vocabulary_computes_what_the_unpadded_one_does(
    model: str, config: dict[str, str], keys: list[str]
) -> None:
    graph = _import(model, **config)
    (vocabulary,) = vocabularies(graph)
    padded = pad_vocabulary(graph, 8)
    assert [k.split("[")[0].removeprefix("model.") for k in _padded_keys(padded)] == keys
    loss = padded.nodes[vocabulary.loss]
    assert loss.attr("classes") == vocabulary.classes and padded.type_of(loss.operands[0]).shape[1] % 8 == 0  # type: ignore[arg-type]
    assert padded.nodes.keys() >= graph.nodes.keys()  # every node id kept (the real-column split is new)
    assert padded.op_counts()["pcg.split"] == graph.op_counts().get("pcg.split", 0) + 1  # the returned logits
    assert_same_outputs(graph, padded)
    assert pad_vocabulary(padded, 8) is padded  # padded already: nothing to do
    assert pad_vocabulary(graph, 1) is graph


def test_a_dividing_vocabulary_is_left_alone() -> None:
    graph = _import("hf:GPT2Config", vocab="1000", layers="1")
    assert pad_vocabulary(graph, 8) is graph and padded_size(1000, 8) == 1000 and padded_size(1001, 8) == 1008


def test_megatron_splits_a_padded_table_and_head_by_rows() -> None:
    graph = _import("hf:GPT2Config", vocab="1001", layers="1")
    layouts = megatron_layouts(graph, Layout(tensor=2))
    assert len(layouts) == 2  # the head replicated, or kept column-parallel and its logits gathered
    shards = {}
    for laid in layouts:
        for node in laid.graph.nodes.values():
            if node.op == "pcg.weight" and "+" in node.attr("key"):
                shards.setdefault(node.attr("key"), []).append(node.types[0].shard)
    assert shards == {
        "model.transformer.wte.weight[0:1001+1, :]": [(2, 1), (2, 1)],  # vocabulary-parallel lookup
        "model.lm_head.weight[0:1001+1, :]": [(1, 1), (2, 1)],
    }
    assert layouts[1].gathered == 1


def test_a_cross_entropy_takes_no_more_classes_than_its_logits_have() -> None:
    graph = pad_vocabulary(_import("hf:GPT2Config", vocab="1001", layers="1"), 8)
    assert vocabularies(graph) == []  # (its weights are padded parts now: not padded again)
    (loss,) = (n for n in graph.nodes.values() if n.op == "pcg.cross_entropy")
    with pytest.raises(FormError, match=r"classes 1009 should be in 1\.\.1008"):
        graph.add(loss.op, list(loss.operands), **{**dict(loss.attrs), "classes": 1009})


def test_a_few_classes_are_not_padded() -> None:
    """A 2-class head at degree 8 would be 6 rows of zeros in 8 (`MOST`: at most 1 %)."""
    graph = _import("hf:GPT2Config", vocab="1001", layers="1")
    assert pad_vocabulary(graph, 128) is graph  # 1,024 rows: 2.3 % padding
    assert pad_vocabulary(graph, 8) is not graph  # 1,008 rows: 0.7 %
