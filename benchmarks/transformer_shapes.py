"""Transformer training graphs at paper scale, built op by op on the compact `Graph` (shapes
only: no weights are materialized, no constants are folded). Importing these models through
`unityc-import` works too (`big_shapes.py` does: a Llama-2-7B module is 1.5 MB, its causal mask
and rotary tables stored once and packed); the cost model needs the shapes, which these
builders give without the import's minute.

* `bert_large`: BERT-Large (24 layers, hidden 1024, 16 heads, FFN 4096, vocab 30522, seq 512);
* `t5_3b`: T5-3B's shape (24 encoder and 24 decoder layers, hidden 1024, 32 heads of width 128,
  ReLU FFN 16384, vocab 32128, seq 512 in and out; `hf:T5Config` does not import: the HF
  wrapper knows causal and masked language models, not encoder-decoders);
* `gpt2_xl`: GPT-2 XL (48 layers, hidden 1600, 25 heads, FFN 6400, vocab 50257, seq 1024);
* `llama3_8b`: Llama-3-8B (32 layers, hidden 4096, 32 heads sharing 8 KV heads, SwiGLU FFN
  14336, vocab 128256, seq 2048): the fused `pcg.attention` with `kv_heads` 8 (as `hf:llama`
  imports); RMSNorm as a layer norm, rotary embeddings and the causal mask left out
  (element-wise ops: their time and memory are small beside the rest).

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
    for n in range(layers):
        p = f"layers.{n}"
        h = _norm(g, x, f"{p}.norm1", hidden, bias=not gated)
        a = _attention(g, h, h, f"{p}.attn", hidden, heads, kv, bias=not gated)
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


def _attention(
    g: Graph, q: Ref, kv: Ref, key: str, hidden: int, heads: int, kv_heads: int, bias: bool
) -> Ref:
    """The dialect's fused attention (`pcg.attention`), `kv_heads` key/value heads shared by
    groups of query heads (grouped-query attention where fewer)."""
    d = hidden // heads
    shapes = {
        "wq": (hidden, hidden),
        "wk": (kv_heads * d, hidden),
        "wv": (kv_heads * d, hidden),
        "wo": (hidden, hidden),
    }
    w = [_w(g, f"{key}.{k}", *shape) for k, shape in shapes.items()]
    b = [_w(g, f"{key}.b{k[1]}", shape[0]) if bias else None for k, shape in shapes.items()]
    attrs = {"heads": heads} if kv_heads == heads else {"heads": heads, "kv_heads": kv_heads}
    return g.add("pcg.attention", [q, kv, kv, *w, *b, *[None] * 5], **attrs)[0]


def _wide_attention(
    g: Graph, q: Ref, kv: Ref, key: str, hidden: int, heads: int, d: int, batch: int, sq: int, sk: int
) -> Ref:
    """T5's attention: `heads` heads of width `d` (heads x d may differ from `hidden`), no
    biases, no scaling, spelled out as projections, head reshapes and batch matmuls (the fused
    op's projections are hidden x hidden); the relative position bias is left out (an
    element-wise add)."""
    inner = heads * d

    def split(x: Ref, name: str, s: int) -> Ref:
        y = _linear(g, x, f"{key}.{name}", inner, hidden, bias=False)
        y = g.add("pcg.reshape", [y], shape=(batch, s, heads, d))[0]
        return g.add("pcg.transpose", [y], perm=(0, 2, 1, 3))[0]

    qh, kh, vh = split(q, "q", sq), split(kv, "k", sk), split(kv, "v", sk)
    kt = g.add("pcg.transpose", [kh], perm=(0, 1, 3, 2))[0]
    probs = g.add("pcg.softmax", [g.add("pcg.batch_matmul", [qh, kt])[0]], dim=3)[0]
    ctx = g.add("pcg.batch_matmul", [probs, vh])[0]
    ctx = g.add("pcg.transpose", [ctx], perm=(0, 2, 1, 3))[0]
    ctx = g.add("pcg.reshape", [ctx], shape=(batch, sq, inner))[0]
    return _linear(g, ctx, f"{key}.o", hidden, inner, bias=False)


def t5(layers: int, hidden: int, heads: int, d: int, ffn: int, vocab: int, seq: int, batch: int) -> Graph:
    """An encoder-decoder in T5's shape: `layers` encoder layers (self-attention, ReLU FFN) and
    `layers` decoder layers (self-attention, cross-attention reading the encoder's output, FFN),
    RMSNorm (a layer norm without bias), no biases, sequence `seq` on both sides, a token
    cross-entropy loss on the decoder's logits. Decoder layers are keyed `layers.{layers + n}`."""
    g = Graph()
    ids = g.add_source("pcg.input", "input_ids", TensorType((batch, seq), i64))
    dec_ids = g.add_source("pcg.input", "decoder_input_ids", TensorType((batch, seq), i64))
    labels = g.add_source("pcg.input", "labels", TensorType((batch, seq), i64))

    def ffn_block(x: Ref, p: str) -> Ref:
        h = _norm(g, x, f"{p}.norm_ff", hidden, bias=False)
        f = g.add("pcg.relu", [_linear(g, h, f"{p}.ff.wi", ffn, hidden, bias=False)])[0]
        return g.add("pcg.add", [x, _linear(g, f, f"{p}.ff.wo", hidden, ffn, bias=False)])[0]

    def self_attention(x: Ref, p: str) -> Ref:
        h = _norm(g, x, f"{p}.norm_sa", hidden, bias=False)
        a = _wide_attention(g, h, h, f"{p}.sa", hidden, heads, d, batch, seq, seq)
        return g.add("pcg.add", [x, a])[0]

    x = g.add("pcg.embedding", [ids, _w(g, "encoder.embed.weight", vocab, hidden)])[0]
    for n in range(layers):
        x = ffn_block(self_attention(x, f"layers.{n}"), f"layers.{n}")
    memory = _norm(g, x, "encoder.norm", hidden, bias=False)
    y = g.add("pcg.embedding", [dec_ids, _w(g, "decoder.embed.weight", vocab, hidden)])[0]
    for n in range(layers, 2 * layers):
        p = f"layers.{n}"
        y = self_attention(y, p)
        h = _norm(g, y, f"{p}.norm_ca", hidden, bias=False)
        a = _wide_attention(g, h, memory, f"{p}.ca", hidden, heads, d, batch, seq, seq)
        y = g.add("pcg.add", [y, a])[0]
        y = ffn_block(y, p)
    y = _norm(g, y, "decoder.norm", hidden, bias=False)
    logits = _linear(g, y, "lm_head", vocab, hidden, bias=False)
    flat = g.add("pcg.reshape", [logits], shape=(batch * seq, vocab))[0]
    targets = g.add("pcg.reshape", [labels], shape=(batch * seq,))[0]
    g.outputs = (g.add("pcg.cross_entropy", [flat, targets], reduction="mean")[0],)
    return g


def bert_large(batch: int) -> Graph:
    return transformer(24, 1024, 16, 4096, 30522, 512, batch)


def t5_3b(batch: int) -> Graph:
    return t5(24, 1024, 32, 128, 16384, 32128, 512, batch)


def gpt2_xl(batch: int) -> Graph:
    return transformer(48, 1600, 25, 6400, 50257, 1024, batch)


def llama3_8b(batch: int) -> Graph:
    return transformer(32, 4096, 32, 14336, 128256, 2048, batch, kv_heads=8, gated=True)


MODELS = {"BERT-Large": bert_large, "T5-3B": t5_3b, "GPT-2 XL": gpt2_xl, "Llama-3-8B": llama3_8b}
