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
from attnjax.pretrained.fields import REQUIRED, Fields

MODEL_TYPES = ("llama", "mistral", "qwen2")
ROPE_TYPES = ("default", "linear", "llama3")
LAYERS_FIELD = "num_hidden_layers"
_COMMON = {
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "head_dim": None,
}
# The values `transformers`' config classes give the options a config.json may leave out
# (num_key_value_heads None, or null in the file: as many as the query heads; mistral's 8
# and qwen2's 32 are constants). Mistral has no biases and no layer_types; qwen2 biases
# q, k, v only (`_biases`).
DEFAULTS = {
    "llama": {**_COMMON, "num_key_value_heads": None, "attention_bias": False, "mlp_bias": False},
    "mistral": {**_COMMON, "num_key_value_heads": 8, "sliding_window": 4096},
    "qwen2": {
        **_COMMON,
        "num_key_value_heads": 32,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
        "layer_types": None,
    },
}
ROPE_THETA = 10000.0  # every family's default rope_theta


def rope_options(f: Fields) -> dict:
    """`rope_base` and `rope_scaling` of `AttentionConfig` from a config's `rope_parameters` (transformers 5)
    or `rope_theta` / `rope_scaling` (earlier files); errors name the field as the file does."""
    labels, values = {}, {}
    for key in ("rope_scaling", "rope_parameters"):  # rope_parameters wins
        part = f.get(key, None)
        if part is not None and not isinstance(part, dict):
            raise f.error(f"{key} must be an object or null, got {part!r}")
        for name, value in (part or {}).items():
            labels[name] = f"{key}[{name!r}]"
            values[labels[name]] = value
    rope = Fields(values, f.source, f.owner)

    def number(name, default=REQUIRED):
        return rope.positive_number(labels.get(name, f"rope_parameters[{name!r}]"), default)

    base = number("rope_theta", f.positive_number("rope_theta", ROPE_THETA))
    kind_label = labels.get("rope_type") or labels.get("type")
    kind = rope.get(kind_label) if kind_label else "default"
    if kind not in ROPE_TYPES:
        raise f.error(f"unsupported rope_scaling type {kind!r}; supported: {ROPE_TYPES}")
    if number("partial_rotary_factor", 1.0) != 1.0:
        raise f.error(
            f"unsupported partial_rotary_factor {number('partial_rotary_factor')} (only 1.0)"
        )
    if kind == "default":
        return {"rope_base": base, "rope_scaling": None}
    if kind == "linear":
        return {"rope_base": base, "rope_scaling": ("linear", number("factor"))}
    names = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    scaling = ("llama3", *(number(name) for name in names))
    if scaling[3] <= scaling[2]:
        raise f.error(
            f"{labels['high_freq_factor']} ({scaling[3]}) must exceed "
            f"{labels['low_freq_factor']} ({scaling[2]})"
        )
    return {"rope_base": base, "rope_scaling": scaling}


def layer_types(f: Fields, num_layers: int) -> list:
    """qwen2's kind of attention per layer: the file's `layer_types`, else as `transformers.Qwen2Config`
    derives them: 'sliding_attention' from layer `max_window_layers` on when a window is used."""
    kinds = f.get("layer_types")
    if kinds is None:
        start = f.positive_int("max_window_layers") if f.get("max_window_layers") else 0
        return ["sliding_attention" if i >= start else "full_attention" for i in range(num_layers)]
    if not isinstance(kinds, list):
        raise f.error(f"layer_types must be a list of the layers' attention kinds, got {kinds!r}")
    return kinds


def _window(f: Fields, num_layers: int):
    """The sliding window W of every layer, or None; an error when only some layers have one."""
    model_type = f.values["model_type"]
    if model_type == "llama":
        return None
    if model_type == "mistral":
        return f.positive_int("sliding_window", optional=True)
    if not f.boolean("use_sliding_window"):
        return None
    window = f.positive_int("sliding_window", optional=True)
    kinds = set(layer_types(f, num_layers))
    if window is None or kinds == {"full_attention"}:
        return None
    if kinds != {"sliding_attention"}:
        raise f.error(
            f"unsupported: qwen2 with a sliding window on some layers only (layer_types {sorted(kinds)}, "
            f"max_window_layers={f.get('max_window_layers')}); supported: on every layer or none"
        )
    return window


def _biases(f: Fields) -> dict:
    if f.values["model_type"] == "qwen2":
        return {"use_bias": False, "qkv_bias": True}
    if f.values["model_type"] == "mistral":  # MistralAttention and MistralMLP have no biases
        return {"use_bias": False, "qkv_bias": None}
    attention, mlp = f.boolean("attention_bias"), f.boolean("mlp_bias")
    if attention != mlp:
        raise f.error(
            f"unsupported: attention_bias={attention} with mlp_bias={mlp}; supported: both alike"
        )
    return {"use_bias": attention, "qkv_bias": None}


def config_from_hf(
    hf: dict, *, dtype=None, param_dtype=jnp.float32, source: str = "config.json"
) -> nn.TransformerConfig:
    """A llama / mistral / qwen2 config.json (dict) -> `TransformerConfig`.

    Options the file leaves out take `DEFAULTS[model_type]`; the sizes are required. Errors
    name `source` and the field as the file spells it.
    """
    model_type = hf["model_type"]
    f = Fields(hf, source, f"model_type {model_type!r}", DEFAULTS[model_type])
    features, num_heads = f.positive_int("hidden_size"), f.positive_int("num_attention_heads")
    head_dim = f.positive_int("head_dim", optional=True)
    if head_dim is None:
        f.divisible("hidden_size", features, "num_attention_heads", num_heads)
        head_dim = features // num_heads
    if head_dim * num_heads != features:
        raise f.error(
            f"unsupported head_dim {head_dim} with hidden_size {features} and {num_heads} heads "
            "(supported: head_dim = hidden_size / num_attention_heads)"
        )
    if head_dim % 2:
        raise f.error(f"the head dim hidden_size / num_attention_heads ({head_dim}) must be even")
    num_kv_heads = f.positive_int("num_key_value_heads", optional=True) or num_heads
    f.divisible("num_attention_heads", num_heads, "num_key_value_heads", num_kv_heads)
    if f.get("hidden_act") != "silu":
        raise f.error(
            f"unsupported hidden_act {f.get('hidden_act')!r} (supported: 'silu', the SwiGLU MLP)"
        )
    num_layers = f.positive_int(LAYERS_FIELD)
    return nn.TransformerConfig.create(
        num_layers=num_layers,
        features=features,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        rope="half",
        **rope_options(f),
        window=_window(f, num_layers),
        vocab_size=f.positive_int("vocab_size"),
        max_len=f.positive_int("max_position_embeddings"),
        positions=None,
        norm="pre",
        norm_kind="rmsnorm",
        norm_eps=f.positive_number("rms_norm_eps"),
        final_norm=True,
        mlp_features=f.positive_int("intermediate_size"),
        mlp_activation="swiglu",
        head="tied" if f.boolean("tie_word_embeddings") else "linear",
        head_bias=False,
        causal=True,
        dtype=dtype,
        param_dtype=param_dtype,
        **_biases(f),
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


def not_read(names: set) -> set:
    """Tensors the model does not have by design: the `rotary_emb.inv_freq` buffers older files
    hold (Hugging Face skips them too; the rates follow from the config)."""
    return {n for n in names if n.endswith("rotary_emb.inv_freq")}
