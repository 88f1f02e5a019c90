"""bf16 pieces (issue 38 item 3, `runtime.zero`): under bf16-mixed a trained ZeRO-1/2 weight that
only bf16 ops read is held as a bf16 piece beside its fp32 master shard. One rule, two sides:
the program's (`codegen.memory.bf16_pieces`, `PLAN.bf16_pieces`) and the cost model's
(`cost.memory.is_bf16_piece`), which must pick the same weights on real models; the piece's
read (`HeldCast`) gives autocast's own gradients and keeps nothing; `persistent_bytes` books
Megatron-LM's 2 + 4 + 12/d bytes an element. The torchrun side (--check exact, the bytes as
predicted, the saved bytes as estimated) is in `test_torchrun_zero.py` and `test_saved_bytes.py`."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects.builtin import StringAttr

from unityc.codegen.analysis import analyze
from unityc.codegen.memory import bf16_pieces
from unityc.cost.backward import gradient_flags
from unityc.cost.memory import is_bf16_piece, persistent_bytes
from unityc.dialects.container import graph_function
from unityc.dialects.precision import BF16_MIXED, FP32, precision_attrs
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.graph.precision import priced_graph
from unityc.machine.presets import preset
from unityc.runtime.saved import SavedBytes
from unityc.runtime.zero import HeldCast
from unityc.search.baselines import zero
from unityc.search.unity import UnityOptions

MACHINE = "cpu:2"


def _planned(model: str, precision: str, stage: int):  # type: ignore[no-untyped-def]
    module = import_model(ModelSpec(model, "small", batch=4))
    graph_function(module).attributes.update(precision_attrs(precision))
    planned = zero(from_module(module), preset(MACHINE), UnityOptions(optimizer="adam"), None, stage, False)
    planned.graph.module_attrs["unityc.machine"] = StringAttr(MACHINE)
    return planned.graph


def _cost_side(graph) -> set[str]:  # type: ignore[no-untyped-def]
    priced = priced_graph(graph)
    _, gets_grad = gradient_flags(priced, priced.topological())
    users = priced.users()
    return {
        str(node.attr("key"))
        for nid, node in priced.nodes.items()
        if is_bf16_piece(priced, nid, users, (nid, 0) in gets_grad)
    }


@pytest.mark.parametrize(
    ("model", "stage"), [("hf:llama", 1), ("hf:gpt2", 2), ("bert", 1), ("hf:roberta", 2), ("hf:vit", 1)]
)
def test_the_program_and_the_cost_model_hold_the_same_bf16_pieces(model: str, stage: int) -> None:
    graph = _planned(model, BF16_MIXED, stage)
    program = set(bf16_pieces(analyze(to_module(graph))))
    assert program == _cost_side(graph)
    assert program, "no weight is read only in bf16: the rule picks nothing"
    keys = [str(n.attr("key")) for n in graph.nodes.values() if n.op == "pcg.weight"]
    tables = ("embed_tokens.weight", "wte.weight", "wpe.weight", "word_embeddings.weight")
    embeddings = {k for k in keys if k.endswith(tables)}
    assert not program & embeddings, "a token table is read by a gather, in fp32"


def test_no_bf16_pieces_in_fp32_or_without_zero_1_or_2() -> None:
    assert not bf16_pieces(analyze(to_module(_planned("hf:llama", FP32, 1))))
    assert not bf16_pieces(analyze(to_module(_planned("hf:llama", BF16_MIXED, 3))))


def test_the_piece_gives_autocasts_gradients_and_keeps_nothing() -> None:
    torch.manual_seed(0)
    master = torch.randn(8, 6)
    weight = torch.nn.Parameter(master.clone())
    leaf = torch.nn.Parameter(torch.zeros(()).expand(8, 6))
    values = master.to(torch.bfloat16)
    xs = [torch.randn(4, 8, requires_grad=True) for _ in range(2)]
    plain, held = SavedBytes.of([weight]), SavedBytes.of([leaf, values])
    for x in xs:  # two micro-batches accumulate
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with plain:
                y = (x @ weight).float().square().sum()
            y.backward()
            with held:
                y = (x @ HeldCast.apply(leaf, values).t().t()).float().square().sum()
        y.backward()
    assert plain.bytes - held.bytes == 8 * 6 * 2, (plain.sizes, held.sizes)  # no copy of the weight
    assert leaf.grad is not None and weight.grad is not None
    assert leaf.grad.dtype == torch.float32 and leaf.untyped_storage().nbytes() == 4
    assert torch.equal(leaf.grad, weight.grad)


def test_persistent_bytes_are_megatrons() -> None:
    numel, d = 1000, 4
    held = persistent_bytes(numel, 4, d, 1, "adam", True, bf16_piece=True)
    assert (held.weights, held.gradients, held.optimizer) == (2 * numel + 4 * 250, 4 * numel, 8 * 250)
    assert held.weights + held.gradients + held.optimizer == (2 + 4 + 12 / d) * numel
    with pytest.raises(ValueError, match="ZeRO-0/1/2"):
        persistent_bytes(numel, 4, d, 3, "adam", True, bf16_piece=True)
