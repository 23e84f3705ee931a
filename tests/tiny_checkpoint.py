"""A tiny llama checkpoint written by hand (NumPy, `safetensors`, a word-level `tokenizer.json` as JSON):
a Hugging Face directory for the tests that need neither torch nor transformers.

`write(path, layers=L)`: config.json, model.safetensors and tokenizer.json of a
llama of width 8, 2 heads (1 key/value head), tied head; `config=` and
`tensors=` replace what is written, `tokenizer=False` leaves the tokenizer out.
The tokenizer splits on whitespace; words other than a, b, c, d are <unk>.
"""
import json

import numpy as np
from safetensors.numpy import save_file

D, HEADS, KV_HEADS, FFN, VOCAB = 8, 2, 1, 16, 6
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": D, "num_hidden_layers": 1,
          "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "intermediate_size": FFN, "vocab_size": VOCAB,
          "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": True,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
TOKENIZER = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
             "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
             "model": {"type": "WordLevel", "unk_token": "<unk>",
                       "vocab": {w: i for i, w in enumerate(["<pad>", "<unk>", "a", "b", "c", "d"])}}}


def tensors(layers: int = 1) -> dict:
    """The checkpoint's tensors (Hugging Face names, torch layout `[out, in]`), standard normal, float32."""
    rng = np.random.default_rng(0)
    kv = KV_HEADS * D // HEADS
    shapes = {"model.embed_tokens.weight": (VOCAB, D), "model.norm.weight": (D,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                       p + "self_attn.q_proj.weight": (D, D), p + "self_attn.k_proj.weight": (kv, D),
                       p + "self_attn.v_proj.weight": (kv, D), p + "self_attn.o_proj.weight": (D, D),
                       p + "mlp.gate_proj.weight": (FFN, D), p + "mlp.up_proj.weight": (FFN, D),
                       p + "mlp.down_proj.weight": (D, FFN)})
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def write(path, *, config=None, tensors_=None, tokenizer: bool = True, layers: int = 1):
    """Write the checkpoint into directory `path` (a `pathlib.Path`); returns it."""
    path.mkdir(parents=True, exist_ok=True)
    config = {**CONFIG, "num_hidden_layers": layers} if config is None else config
    (path / "config.json").write_text(json.dumps(config))
    save_file(tensors(layers) if tensors_ is None else tensors_, str(path / "model.safetensors"))
    if tokenizer:
        (path / "tokenizer.json").write_text(json.dumps(TOKENIZER))
    return path
