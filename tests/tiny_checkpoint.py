"""Tiny checkpoints written by hand (NumPy, `safetensors`, a word-level `tokenizer.json` as JSON):
Hugging Face directories for the tests that need neither torch nor transformers to write them.

`write(path, layers=L)`: config.json, model.safetensors and tokenizer.json of a
llama of width 8, 2 heads (1 key/value head), tied head; `config=` and
`tensors=` replace what is written, `tokenizer=False` leaves the tokenizer out;
`tensors(qkv_bias=True)` adds qwen2's q/k/v biases.
`write_bert(path)`: the same files of a one-layer BERT encoder of width 8
(`BertModel`'s tensor names, GELU, 2 token types). The tokenizer splits on
whitespace; words other than a, b, c, d are <unk>.
`write_gguf(path)`: the llama as a GGUF file (`gguf.GGUFWriter`, float32 tensors
`[out, in]` under GGUF names), a byte-level BPE of six tokens and one merge.
"""

import json

import numpy as np
from safetensors.numpy import save_file

D, HEADS, KV_HEADS, FFN, VOCAB = 8, 2, 1, 16, 6
CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": D,
    "num_hidden_layers": 1,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "intermediate_size": FFN,
    "vocab_size": VOCAB,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}
TOKENIZER = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [],
    "normalizer": None,
    "pre_tokenizer": {"type": "WhitespaceSplit"},
    "post_processor": None,
    "decoder": None,
    "model": {
        "type": "WordLevel",
        "unk_token": "<unk>",
        "vocab": {w: i for i, w in enumerate(["<pad>", "<unk>", "a", "b", "c", "d"])},
    },
}


def tensors(layers: int = 1, qkv_bias: bool = False) -> dict:
    """The checkpoint's tensors (Hugging Face names, torch layout `[out, in]`), standard normal, float32;
    `qkv_bias`: with q/k/v biases (qwen2's), drawn after the rest."""
    rng = np.random.default_rng(0)
    kv = KV_HEADS * D // HEADS
    shapes = {"model.embed_tokens.weight": (VOCAB, D), "model.norm.weight": (D,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (D,),
                p + "post_attention_layernorm.weight": (D,),
                p + "self_attn.q_proj.weight": (D, D),
                p + "self_attn.k_proj.weight": (kv, D),
                p + "self_attn.v_proj.weight": (kv, D),
                p + "self_attn.o_proj.weight": (D, D),
                p + "mlp.gate_proj.weight": (FFN, D),
                p + "mlp.up_proj.weight": (FFN, D),
                p + "mlp.down_proj.weight": (D, FFN),
            }
        )
    drawn = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    for i in range(layers if qkv_bias else 0):
        for name, width in (("q", D), ("k", kv), ("v", kv)):
            bias = rng.standard_normal(width).astype(np.float32)
            drawn[f"model.layers.{i}.self_attn.{name}_proj.bias"] = bias
    return drawn


def write(path, *, config=None, tensors_=None, tokenizer: bool = True, layers: int = 1):
    """Write the checkpoint into directory `path` (a `pathlib.Path`); returns it."""
    path.mkdir(parents=True, exist_ok=True)
    config = {**CONFIG, "num_hidden_layers": layers} if config is None else config
    (path / "config.json").write_text(json.dumps(config))
    save_file(tensors(layers) if tensors_ is None else tensors_, str(path / "model.safetensors"))
    if tokenizer:
        (path / "tokenizer.json").write_text(json.dumps(TOKENIZER))
    return path


BERT_CONFIG = {
    "model_type": "bert",
    "architectures": ["BertModel"],
    "hidden_size": D,
    "num_hidden_layers": 1,
    "num_attention_heads": HEADS,
    "intermediate_size": FFN,
    "vocab_size": VOCAB,
    "type_vocab_size": 2,
    "max_position_embeddings": 64,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "position_embedding_type": "absolute",
    "pad_token_id": 0,
}


def bert_tensors() -> dict:
    """`write_bert`'s tensors (`BertModel` names, torch layout `[out, in]`), standard normal, float32."""
    rng = np.random.default_rng(1)

    def linear(name, out, inp):
        return {f"{name}.weight": (out, inp), f"{name}.bias": (out,)}

    def norm(name):
        return {f"{name}.weight": (D,), f"{name}.bias": (D,)}

    p = "encoder.layer.0."
    types, positions = BERT_CONFIG["type_vocab_size"], BERT_CONFIG["max_position_embeddings"]
    shapes = {
        "embeddings.word_embeddings.weight": (VOCAB, D),
        "embeddings.token_type_embeddings.weight": (types, D),
        "embeddings.position_embeddings.weight": (positions, D),
        **norm("embeddings.LayerNorm"),
        **linear(p + "attention.self.query", D, D),
        **linear(p + "attention.self.key", D, D),
        **linear(p + "attention.self.value", D, D),
        **linear(p + "attention.output.dense", D, D),
        **norm(p + "attention.output.LayerNorm"),
        **linear(p + "intermediate.dense", FFN, D),
        **linear(p + "output.dense", D, FFN),
        **norm(p + "output.LayerNorm"),
    }
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def write_bert(path):
    """Write the tiny BERT encoder into directory `path` (a `pathlib.Path`); returns it."""
    return write(path, config=BERT_CONFIG, tensors_=bert_tensors())


# GGUF names of the llama's tensors (`tensors(1)`'s, one layer).
GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "model.layers.0.input_layernorm.weight": "blk.0.attn_norm.weight",
    "model.layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "model.layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "model.layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "model.layers.0.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "model.layers.0.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "model.layers.0.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "model.layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight",
}

GGUF_WORDS = ["<pad>", "<unk>", "a", "b", "c", "ab"]  # BPE: the merge "a b" gives "ab"


def gguf_tensors() -> dict:
    """`write_gguf`'s tensors by GGUF name: `tensors(1)` (the GGUF q/k row permutation aside)."""
    return {GGUF_NAMES[name]: value for name, value in tensors(1).items()}


def write_gguf(path, *, block_count: int = 1, extra: dict = None):
    """The one-layer llama as a GGUF file `path` (a `pathlib.Path`), with `extra` tensors; returns it."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(block_count)
    writer.add_embedding_length(D)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_context_length(CONFIG["max_position_embeddings"])
    writer.add_feed_forward_length(FFN)
    writer.add_layer_norm_rms_eps(CONFIG["rms_norm_eps"])
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(GGUF_WORDS)
    writer.add_token_merges(["a b"])
    writer.add_token_types([1] * len(GGUF_WORDS))
    for name, value in {**gguf_tensors(), **(extra or {})}.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
