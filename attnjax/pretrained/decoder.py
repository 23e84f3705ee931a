"""llama, mistral and qwen2 checkpoints (Hugging Face layout) as a causal `attnjax.nn.Transformer`.

One architecture with switches (Touvron et al. 2023, "LLaMA"; Jiang et al.
2023, "Mistral 7B"; Yang et al. 2024, "Qwen2"): pre-RMSNorm blocks, rotary
positions in the half-split layout ('half', as Hugging Face stores q/k rows),
grouped-query attention, a SwiGLU MLP, a final RMSNorm and a bias-free head,
tied to the embedding when `tie_word_embeddings`. What differs, as config
switches of `attnjax.nn`:

* llama: `attention_bias` / `mlp_bias` (`use_bias`, both alike);
  `rope_scaling` types 'linear' and 'llama3' (`AttentionConfig.rope_scaling`).
* mistral: `sliding_window` W (`AttentionConfig.window`: query t sees keys
  t - W < s <= t).
* qwen2: biases on q, k, v only (`AttentionConfig.qkv_bias`); a sliding
  window only when every layer has it.

Tensors (prefix `model.` on `*ForCausalLM` checkpoints), torch layout `[out, in]`:
`embed_tokens.weight [V, D]`, `layers.{i}.input_layernorm.weight`,
`self_attn.{q,k,v,o}_proj.{weight,bias}`, `post_attention_layernorm.weight`,
`mlp.{gate,up,down}_proj.weight`, `norm.weight`, `lm_head.weight [V, D]`.

Read by `attnjax.pretrained.from_pretrained`; GGUF files of the family are read by
`attnjax.pretrained.gguf` (`load_llama`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import nn
from attnjax.nn import params

MODEL_TYPES = ("llama", "mistral", "qwen2")
ROPE_TYPES = ("default", "linear", "llama3")


def rope_options(hf: dict) -> dict:
    """`rope_base` and `rope_scaling` of `AttentionConfig` from a config's `rope_parameters` (transformers 5)
    or `rope_theta` / `rope_scaling` (earlier files)."""
    scaling = {**(hf.get("rope_scaling") or {}), **(hf.get("rope_parameters") or {})}
    base = float(scaling.get("rope_theta", hf.get("rope_theta", 10000.0)))
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"unsupported rope_scaling type {kind!r}; supported: {ROPE_TYPES}")
    if float(scaling.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError(
            f"unsupported partial_rotary_factor {scaling['partial_rotary_factor']} (only 1.0)"
        )
    if kind == "default":
        return {"rope_base": base, "rope_scaling": None}
    if kind == "linear":
        return {"rope_base": base, "rope_scaling": ("linear", float(scaling["factor"]))}
    return {
        "rope_base": base,
        "rope_scaling": (
            "llama3",
            float(scaling["factor"]),
            float(scaling["low_freq_factor"]),
            float(scaling["high_freq_factor"]),
            float(scaling["original_max_position_embeddings"]),
        ),
    }


def _window(hf: dict):
    """The sliding window W of every layer, or None; an error when only some layers have one."""
    model_type, window = hf["model_type"], hf.get("sliding_window")
    if model_type == "llama" or window is None:
        return None
    if model_type == "mistral":
        return int(window)
    if not hf.get("use_sliding_window", False):
        return None
    kinds = set(hf.get("layer_types") or ())
    if kinds != {"sliding_attention"}:
        raise ValueError(
            f"unsupported: qwen2 with a sliding window on some layers only (layer_types {sorted(kinds)}, "
            f"max_window_layers={hf.get('max_window_layers')}); supported: on every layer or none"
        )
    return int(window)


def _biases(hf: dict) -> dict:
    if hf["model_type"] == "qwen2":
        return {"use_bias": False, "qkv_bias": True}
    attention, mlp = bool(hf.get("attention_bias", False)), bool(hf.get("mlp_bias", False))
    if attention != mlp:
        raise ValueError(
            f"unsupported: attention_bias={attention} with mlp_bias={mlp}; supported: both alike"
        )
    return {"use_bias": attention, "qkv_bias": None}


def config_from_hf(hf: dict, *, dtype=None, param_dtype=jnp.float32) -> nn.TransformerConfig:
    """A llama / mistral / qwen2 config.json (dict) -> `TransformerConfig`."""
    features, num_heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
    head_dim = hf.get("head_dim") or features // num_heads
    if head_dim * num_heads != features:
        raise ValueError(
            f"unsupported head_dim {head_dim} with hidden_size {features} and {num_heads} heads "
            "(supported: head_dim = hidden_size / num_attention_heads)"
        )
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(
            f"unsupported hidden_act {hf['hidden_act']!r} (supported: 'silu', the SwiGLU MLP)"
        )
    return nn.TransformerConfig.create(
        num_layers=int(hf["num_hidden_layers"]),
        features=features,
        num_heads=num_heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
        rope="half",
        **rope_options(hf),
        window=_window(hf),
        vocab_size=int(hf["vocab_size"]),
        max_len=int(hf["max_position_embeddings"]),
        positions=None,
        norm="pre",
        norm_kind="rmsnorm",
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        final_norm=True,
        mlp_features=int(hf["intermediate_size"]),
        mlp_activation="swiglu",
        head="tied" if hf.get("tie_word_embeddings", False) else "linear",
        head_bias=False,
        causal=True,
        dtype=dtype,
        param_dtype=param_dtype,
        **_biases(hf),
    )


def _linear(get, name: str, shape: tuple, bias: bool) -> dict:
    """torch `[out, in]` (+ bias `[out]`) -> an `nnx.Linear`'s kernel `[in, out]`."""
    return params.linear(
        get(f"{name}.weight", shape).T, get(f"{name}.bias", shape[:1]) if bias else None
    )


def _layer(get, prefix: str, config: nn.TransformerConfig) -> dict:
    block = config.block
    d, f, kv = (
        block.features,
        block.mlp_features,
        block.attention.kv_heads(block.num_heads) * block.head_dim,
    )
    qkv_bias = block.use_bias if block.attention.qkv_bias is None else block.attention.qkv_bias

    def proj(name, shape, bias=block.use_bias):
        return _linear(get, f"{prefix}.{name}", shape, bias)

    return params.block(
        attention=params.attention(
            proj("self_attn.q_proj", (d, d), qkv_bias),
            proj("self_attn.k_proj", (kv, d), qkv_bias),
            proj("self_attn.v_proj", (kv, d), qkv_bias),
            proj("self_attn.o_proj", (d, d)),
        ),
        attention_norm=params.norm(get(f"{prefix}.input_layernorm.weight", (d,))),
        mlp=params.mlp(
            gate=proj("mlp.gate_proj", (f, d)),
            up=proj("mlp.up_proj", (f, d)),
            down=proj("mlp.down_proj", (d, f)),
        ),
        mlp_norm=params.norm(get(f"{prefix}.post_attention_layernorm.weight", (d,))),
    )


def params_from_hf(get, names: set, config: nn.TransformerConfig) -> dict:
    """Checkpoint tensors (`get(name, shape)`) -> the `Transformer`'s parameter tree (`attnjax.nn.params`)."""
    prefix = "model." if "model.embed_tokens.weight" in names else ""
    d, vocab = config.block.features, config.vocab_size
    layers = [_layer(get, f"{prefix}layers.{i}", config) for i in range(config.num_layers)]
    return params.transformer(
        embed=params.embedding(get(f"{prefix}embed_tokens.weight", (vocab, d))),
        blocks=jax.tree.map(lambda *xs: np.stack(xs), *layers),
        final_norm=params.norm(get(f"{prefix}norm.weight", (d,))),
        head=params.linear(get("lm_head.weight", (vocab, d)).T)
        if config.head == "linear"
        else None,
    )
