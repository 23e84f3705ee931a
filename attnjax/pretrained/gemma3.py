"""Gemma 3 text checkpoints (Hugging Face's `gemma3_text`) as a causal `attnjax.nn.Transformer`.

Gemma Team 2025, "Gemma 3 technical report". What sets it apart from llama,
each an `attnjax.nn` switch:

* local and global layers: `layer_types` (default: five 'sliding_attention'
  layers, then one 'full_attention', repeating) give each layer a sliding
  window of `sliding_window` keys or none (`TransformerConfig.layer_windows`)
  and its own rotary base: 10^4 on local layers (`rope_local_base_freq`), 10^6
  on global ones (`rope_theta`) (`TransformerConfig.layer_rope_bases`);
* QK-norm: an RMSNorm over each head's Dh on q and k, before RoPE
  (`normalize_qk='rmsnorm'`);
* a norm before and after each sub-layer (`norm='sandwich'`), all RMSNorms
  whose weight w scales as (1 + w): the loader stores 1 + w;
* a GeGLU MLP (`mlp_activation='geglu'`: tanh GELU of the gate);
* head width `head_dim` apart from D / H (`AttentionConfig.head_dim`);
* the logits scaled by `query_pre_attn_scalar`^(-1/2), not Dh^(-1/2): the
  temperature tau = sqrt(query_pre_attn_scalar / Dh) (1 when they are equal,
  as in every released Gemma 3);
* the token embedding times sqrt(D) (`embedding_scale`), the head tied to
  the unscaled embedding.

Half-split RoPE ('half') in both Hugging Face and GGUF files (llama.cpp
keeps Gemma's q/k rows as they are). Soft-capping, rope scaling and
bidirectional attention are not supported (an error names the field).

Tensors (prefix `model.`), torch layout `[out, in]`: `embed_tokens.weight`,
`layers.{i}.{input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
post_feedforward_layernorm}.weight`, `self_attn.{q,k,v,o}_proj.weight`,
`self_attn.{q,k}_norm.weight`, `mlp.{gate,up,down}_proj.weight`, `norm.weight`.
GGUF files are read by `attnjax.pretrained.gguf_gemma3` (`load_gemma3`).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import nn
from attnjax.nn import params
from attnjax.pretrained.fields import Fields

MODEL_TYPES = ("gemma3_text",)
LAYERS_FIELD = "num_hidden_layers"
LOCAL, GLOBAL = "sliding_attention", "full_attention"
SLIDING_WINDOW_PATTERN = 6  # transformers' Gemma3TextConfig: every sixth layer is global
ROPE_THETA = {GLOBAL: 1_000_000.0, LOCAL: 10_000.0}  # its default_theta
# `transformers.Gemma3TextConfig`'s defaults of the options a config.json may leave out.
DEFAULTS = {
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "head_dim": 256,
    "num_key_value_heads": 4,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "layer_types": None,
    "rope_parameters": None,
    "rope_scaling": None,
    "attention_bias": False,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "use_bidirectional_attention": False,
}


def default_layer_types(num_layers: int) -> list[str]:
    """Gemma 3's pattern: layer i is global when (i + 1) is a multiple of 6, else local."""
    return [GLOBAL if (i + 1) % SLIDING_WINDOW_PATTERN == 0 else LOCAL for i in range(num_layers)]


def gemma3_config(
    *,
    num_layers: int,
    features: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    mlp_features: int,
    vocab_size: int,
    max_len: int,
    eps: float,
    sliding_window: int,
    layer_types: Sequence[str],
    rope_bases: dict,
    query_pre_attn_scalar: float,
    tied: bool = True,
    dtype=None,
    param_dtype=jnp.float32,
) -> nn.TransformerConfig:
    """The `TransformerConfig` of a Gemma 3 text model (the switches in the module docstring).

    `layer_types`: one of 'sliding_attention' / 'full_attention' per layer; `rope_bases`: the
    rotary base of each kind.
    """
    return nn.TransformerConfig.create(
        num_layers=num_layers,
        features=features,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        temperature=math.sqrt(query_pre_attn_scalar / head_dim),
        normalize_qk="rmsnorm",
        qk_norm_eps=eps,
        rope="half",
        layer_rope_bases=tuple(rope_bases[kind] for kind in layer_types),
        layer_windows=tuple(sliding_window if kind == LOCAL else None for kind in layer_types),
        vocab_size=vocab_size,
        max_len=max_len,
        positions=None,
        embedding_scale=math.sqrt(features),
        norm="sandwich",
        norm_kind="rmsnorm",
        norm_eps=eps,
        final_norm=True,
        use_bias=False,
        mlp_features=mlp_features,
        mlp_activation="geglu",
        head="tied" if tied else "linear",
        head_bias=False,
        causal=True,
        dtype=dtype,
        param_dtype=param_dtype,
    )


def _layer_types(f: Fields, num_layers: int) -> list[str]:
    kinds = f.get("layer_types")
    if kinds is None:
        return default_layer_types(num_layers)
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - {LOCAL, GLOBAL}:
        raise f.error(
            f"layer_types must list {num_layers} entries, each {LOCAL!r} or {GLOBAL!r}, got {kinds!r}"
        )
    return kinds


def _rope_bases(f: Fields) -> dict:
    """The rotary base of each kind of layer: `rope_parameters[kind]['rope_theta']`
    (transformers 5), else `rope_theta` and `rope_local_base_freq`, else Gemma 3's defaults;
    only the 'default' rope type."""
    if f.get("rope_scaling") is not None:
        raise f.error(f"unsupported rope_scaling {f.get('rope_scaling')!r} (only none)")
    per_kind = f.get("rope_parameters") or {}
    if not isinstance(per_kind, dict):
        raise f.error(f"rope_parameters must be an object or null, got {per_kind!r}")
    legacy = {
        GLOBAL: f.positive_number("rope_theta", ROPE_THETA[GLOBAL]),
        LOCAL: f.positive_number("rope_local_base_freq", ROPE_THETA[LOCAL]),
    }
    bases = {}
    for kind in (LOCAL, GLOBAL):
        part = per_kind.get(kind) or {}
        label = f"rope_parameters[{kind!r}]"
        if part.get("rope_type", "default") != "default":
            raise f.error(f"unsupported {label} rope_type {part['rope_type']!r} (only 'default')")
        rope = Fields(
            {f"{label}['rope_theta']": part.get("rope_theta", legacy[kind])}, f.source, ""
        )
        bases[kind] = rope.positive_number(f"{label}['rope_theta']")
    return bases


def _check_unsupported(f: Fields) -> None:
    if f.get("hidden_activation") != "gelu_pytorch_tanh":
        raise f.error(
            f"unsupported hidden_activation {f.get('hidden_activation')!r} "
            "(supported: 'gelu_pytorch_tanh', the GeGLU MLP)"
        )
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        if f.get(name) is not None:
            raise f.error(f"unsupported {name}={f.get(name)!r} (only null)")
    for name in ("attention_bias", "use_bidirectional_attention"):
        if f.boolean(name):
            raise f.error(f"unsupported {name}=true (only false)")


def config_from_hf(
    hf: dict, *, dtype=None, param_dtype=jnp.float32, source: str = "config.json"
) -> nn.TransformerConfig:
    """A `gemma3_text` config.json (dict) -> `TransformerConfig`; options it leaves out take
    `DEFAULTS` (transformers' `Gemma3TextConfig`), the sizes are required. Errors name `source`
    and the field as the file spells it."""
    f = Fields(hf, source, "model_type 'gemma3_text'", DEFAULTS)
    _check_unsupported(f)
    num_heads, num_layers = f.positive_int("num_attention_heads"), f.positive_int(LAYERS_FIELD)
    num_kv_heads = f.positive_int("num_key_value_heads")
    f.divisible("num_attention_heads", num_heads, "num_key_value_heads", num_kv_heads)
    head_dim = f.positive_int("head_dim")
    if head_dim % 2:
        raise f.error(f"head_dim ({head_dim}) must be even for rotary embeddings")
    return gemma3_config(
        num_layers=num_layers,
        features=f.positive_int("hidden_size"),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        mlp_features=f.positive_int("intermediate_size"),
        vocab_size=f.positive_int("vocab_size"),
        max_len=f.positive_int("max_position_embeddings"),
        eps=f.positive_number("rms_norm_eps"),
        sliding_window=f.positive_int("sliding_window"),
        layer_types=_layer_types(f, num_layers),
        rope_bases=_rope_bases(f),
        query_pre_attn_scalar=f.positive_number("query_pre_attn_scalar"),
        tied=f.boolean("tie_word_embeddings"),
        dtype=dtype,
        param_dtype=param_dtype,
    )


def unit_offset(weight) -> np.ndarray:
    """Gemma's RMSNorm weight w as the scale 1 + w it multiplies by, in float64 (rounded once, to
    the parameters' dtype, when assigned)."""
    return 1.0 + np.asarray(weight, np.float64)


def _layer(get, prefix: str, config: nn.TransformerConfig) -> dict:
    block = config.block
    d, f, dh = block.features, block.mlp_features, block.head_dim
    q, kv = block.num_heads * dh, block.attention.kv_heads(block.num_heads) * dh

    def kernel(name, shape):
        return params.linear(get(f"{prefix}.{name}.weight", shape).T)

    def norm(name, width=d):
        return params.norm(unit_offset(get(f"{prefix}.{name}.weight", (width,))))

    return params.block(
        attention=params.attention(
            kernel("self_attn.q_proj", (q, d)),
            kernel("self_attn.k_proj", (kv, d)),
            kernel("self_attn.v_proj", (kv, d)),
            kernel("self_attn.o_proj", (d, q)),
            query_norm=norm("self_attn.q_norm", dh),
            key_norm=norm("self_attn.k_norm", dh),
        ),
        attention_norm=norm("input_layernorm"),
        attention_post_norm=norm("post_attention_layernorm"),
        mlp=params.mlp(
            gate=kernel("mlp.gate_proj", (f, d)),
            up=kernel("mlp.up_proj", (f, d)),
            down=kernel("mlp.down_proj", (d, f)),
        ),
        mlp_norm=norm("pre_feedforward_layernorm"),
        mlp_post_norm=norm("post_feedforward_layernorm"),
    )


def params_from_hf(get, names: set, config: nn.TransformerConfig) -> dict:
    """Checkpoint tensors (`get(name, shape)`) -> the `Transformer`'s parameter tree."""
    prefix = "model." if "model.embed_tokens.weight" in names else ""
    d, vocab = config.block.features, config.vocab_size
    layers = [_layer(get, f"{prefix}layers.{i}", config) for i in range(config.num_layers)]
    head: Optional[dict] = None
    if config.head == "linear":
        head = params.linear(get("lm_head.weight", (vocab, d)).T)
    return params.transformer(
        embed=params.embedding(get(f"{prefix}embed_tokens.weight", (vocab, d))),
        blocks=jax.tree.map(lambda *xs: np.stack(xs), *layers),
        final_norm=params.norm(unit_offset(get(f"{prefix}norm.weight", (d,)))),
        head=head,
    )


def not_read(names: set) -> set:
    """Tensors the model has no place for by design: none."""
    return set()
