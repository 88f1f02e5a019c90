"""Transformer training graphs at paper scale, built op by op on the compact `Graph` (shapes
only: no weights are materialized, no constants are folded). Importing these models through
`unityc-import` works too (`big_shapes.py` does: a Llama-2-7B module is 1.5 MB, its causal mask
and rotary tables stored once and packed); the cost model needs the shapes, which these
builders give without the import's minute.

* `bert_large`: BERT-Large (24 layers, hidden 1024, 16 heads, FFN 4096, vocab 30522, seq 512);
* `gpt2_xl`: GPT-2 XL (48 layers, hidden 1600, 25 heads, FFN 6400, vocab 50257, seq 1024);
* `llama3_8b`: Llama-3-8B (32 layers, hidden 4096, 32 heads sharing 8 KV heads, SwiGLU FFN
  14336, vocab 128256, seq 2048): grouped-query attention as batch matmuls of each KV head with
  its group of 4 query heads; RMSNorm as a layer norm, rotary embeddings and the causal mask left
  out (element-wise ops: their time and memory are small beside the rest).

Layer weights are keyed `layers.N.` (what the `galvatron` baseline groups layers by).
"""

from __future__ import annotations

from xdsl.dialects.builtin import f32, i64

from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Ref


def _w(g: Graph, key: str, *shape: int) -> Ref:
    return g.add_source("pcg.weight", key, TensorType(shape, f32))


def _linear(g: Graph, x: Ref, key: str, out: int, inp: int, bias: bool = True) -> Ref:
    operands = [x, _w(g, f"{key}.weight", out, inp)]
    operands.append(_w(g, f"{key}.bias", out) if bias else None)
    return g.add("pcg.linear", operands)[0]


def _norm(g: Graph, x: Ref, key: str, hidden: int, bias: bool = True) -> Ref:
    operands = [x, _w(g, f"{key}.weight", hidden), _w(g, f"{key}.bias", hidden) if bias else None]
    return g.add("pcg.layer_norm", operands, dims=1, eps=1e-5)[0]


def transformer(
    layers: int, hidden: int, heads: int, ffn: int, vocab: int, seq: int, batch: int,
    kv_heads: int | None = None, gated: bool = False,
) -> Graph:  # fmt: skip
    """A pre-norm decoder (or encoder: the cost is the same) with a token cross-entropy loss."""
    g = Graph()
    ids = g.add_source("pcg.input", "input_ids", TensorType((batch, seq), i64))
    labels = g.add_source("pcg.input", "labels", TensorType((batch, seq), i64))
    x = g.add("pcg.embedding", [ids, _w(g, "embed.weight", vocab, hidden)])[0]
    kv = kv_heads or heads
    d = hidden // heads
    group = heads // kv
    for n in range(layers):
        p = f"layers.{n}"
        h = _norm(g, x, f"{p}.norm1", hidden, bias=not gated)
        if kv == heads and not gated:
            w = [_w(g, f"{p}.attn.{k}", hidden, hidden) for k in ("wq", "wk", "wv", "wo")]
            b = [_w(g, f"{p}.attn.b{k}", hidden) for k in "qkvo"]
            a = g.add("pcg.attention", [h, h, h, *w, *b, None], heads=heads)[0]
        else:
            a = _gqa(g, h, p, hidden, heads, kv, d, group, seq, batch)
        x = g.add("pcg.add", [x, a])[0]
        h = _norm(g, x, f"{p}.norm2", hidden, bias=not gated)
        if gated:
            gate = _linear(g, h, f"{p}.mlp.gate", ffn, hidden, bias=False)
            up = _linear(g, h, f"{p}.mlp.up", ffn, hidden, bias=False)
            silu = g.add("pcg.mul", [gate, g.add("pcg.sigmoid", [gate])[0]])[0]
            f = _linear(g, g.add("pcg.mul", [silu, up])[0], f"{p}.mlp.down", hidden, ffn, bias=False)
        else:
            f = _linear(
                g,
                g.add("pcg.gelu", [_linear(g, h, f"{p}.mlp.fc1", ffn, hidden)])[0],
                f"{p}.mlp.fc2",
                hidden,
                ffn,
            )
        x = g.add("pcg.add", [x, f])[0]
    x = _norm(g, x, "norm", hidden, bias=not gated)
    logits = _linear(g, x, "lm_head", vocab, hidden, bias=False)
    flat = g.add("pcg.reshape", [logits], shape=(batch * seq, vocab))[0]
    targets = g.add("pcg.reshape", [labels], shape=(batch * seq,))[0]
    loss = g.add("pcg.cross_entropy", [flat, targets], reduction="mean")[0]
    g.outputs = (loss,)
    return g


def _gqa(
    g: Graph, h: Ref, p: str, hidden: int, heads: int, kv: int, d: int, group: int, seq: int, batch: int
) -> Ref:
    """Attention whose `heads` query heads share `kv` KV heads: per KV head, one batch matmul
    with its `group` query heads stacked along the sequence."""
    q = _linear(g, h, f"{p}.attn.q", hidden, hidden, bias=False)
    k = _linear(g, h, f"{p}.attn.k", kv * d, hidden, bias=False)
    v = _linear(g, h, f"{p}.attn.v", kv * d, hidden, bias=False)
    q = g.add("pcg.reshape", [q], shape=(batch, seq, kv, group, d))[0]
    q = g.add("pcg.transpose", [q], perm=(0, 2, 3, 1, 4))[0]
    q = g.add("pcg.reshape", [q], shape=(batch * kv, group * seq, d))[0]

    def heads_first(t: Ref) -> Ref:
        t = g.add("pcg.reshape", [t], shape=(batch, seq, kv, d))[0]
        t = g.add("pcg.transpose", [t], perm=(0, 2, 1, 3))[0]
        return g.add("pcg.reshape", [t], shape=(batch * kv, seq, d))[0]

    k, v = heads_first(k), heads_first(v)
    kt = g.add("pcg.transpose", [k], perm=(0, 2, 1))[0]
    scores = g.add("pcg.scalar_mul", [g.add("pcg.batch_matmul", [q, kt])[0]], scale=d**-0.5)[0]
    probs = g.add("pcg.softmax", [scores], dim=2)[0]
    ctx = g.add("pcg.batch_matmul", [probs, v])[0]
    ctx = g.add("pcg.reshape", [ctx], shape=(batch, kv, group, seq, d))[0]
    ctx = g.add("pcg.transpose", [ctx], perm=(0, 3, 1, 2, 4))[0]
    ctx = g.add("pcg.reshape", [ctx], shape=(batch, seq, hidden))[0]
    return _linear(g, ctx, f"{p}.attn.o", hidden, hidden, bias=False)


def bert_large(batch: int) -> Graph:
    return transformer(24, 1024, 16, 4096, 30522, 512, batch)


def gpt2_xl(batch: int) -> Graph:
    return transformer(48, 1600, 25, 6400, 50257, 1024, batch)


def llama3_8b(batch: int) -> Graph:
    return transformer(32, 4096, 32, 14336, 128256, 2048, batch, kv_heads=8, gated=True)


MODELS = {"BERT-Large": bert_large, "GPT-2 XL": gpt2_xl, "Llama-3-8B": llama3_8b}
