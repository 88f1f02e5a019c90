"""The model's own float32 casts of values autocast computes in bf16 survive the fp32 export as
`pcg.cast` to f32 (`frontend/widening.py`: Mixtral's `router_logits.float()` and Qwen2-MoE's
`softmax(dtype=torch.float)`, lost before, made bf16-mixed plans route on bf16 probabilities),
while casts that change nothing under autocast leave the graph as it was; the import stays exact."""

from __future__ import annotations

from pathlib import Path

from unityc.dialects import pcg
from unityc.frontend import ModelSpec
from unityc.frontend.check import check_import


def test_widenings_kept_only_where_autocast_computes_below_f32() -> None:
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'widening_model.py'}:make"))
    casts = [op for op in module.walk() if isinstance(op, pcg.CastOp)]
    assert len(casts) == 2, module  # the two of the gate's logits, not the norm's or the loss's
    for cast in casts:
        assert isinstance(cast.input.owner, pcg.LinearOp | pcg.ScalarMulOp)
        assert cast.input.type == cast.results[0].type
        assert all(isinstance(use.operation, pcg.SoftmaxOp) for use in cast.results[0].uses)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
