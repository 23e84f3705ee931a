"""GPT-2 checkpoints (Hugging Face layout) as a causal `attnjax.nn.Transformer`.

Radford et al. 2019, "Language models are unsupervised multitask learners":
learned positions, pre-LayerNorm blocks, one fused W_qkv per layer
(`AttentionConfig.fused_qkv`, columns: queries, keys, values), a GELU MLP
(`gelu_new`: the tanh approximation), a final LayerNorm and the head tied to
the token embedding. Biases everywhere except the head.

Tensors (prefix `transformer.` on `GPT2LMHeadModel` checkpoints) use
`Conv1D`, whose weight is stored `[in, out]`, already the layout of an
`nnx.Linear` kernel: `wte.weight [V, D]`, `wpe.weight [P, D]`,
`h.{i}.ln_1`, `h.{i}.attn.c_attn.{weight [D, 3D], bias [3D]}`,
`h.{i}.attn.c_proj`, `h.{i}.ln_2`, `h.{i}.mlp.c_fc.{weight [D, F]}`,
`h.{i}.mlp.c_proj.{weight [F, D]}`, `ln_f`, and `lm_head.weight [V, D]`
when the head is not tied.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import nn
from attnjax.nn import params
from attnjax.pretrained.fields import Fields

MODEL_TYPES = ("gpt2",)
ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}
LAYERS_FIELD = "n_layer"
# Options of GPT-2 configs that change the model; their only supported values (`transformers.GPT2Config`'s
# defaults).
FIXED = {
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
}
# `transformers.GPT2Config`'s values of the options a config.json may leave out (n_inner None: 4 D).
DEFAULTS = {
    **FIXED,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
    "n_inner": None,
    "tie_word_embeddings": True,
}


def config_from_hf(
    hf: dict, *, dtype=None, param_dtype=jnp.float32, source: str = "config.json"
) -> nn.TransformerConfig:
    """A gpt2 config.json (dict) -> `TransformerConfig`.

    Options the file leaves out take `DEFAULTS`; the sizes are required. Errors name `source`
    and the field as the file spells it.
    """
    f = Fields(hf, source, "model_type 'gpt2'", DEFAULTS)
    for name, value in FIXED.items():
        if f.boolean(name) != value:
            raise f.error(f"unsupported {name}={hf[name]!r} (supported: {value})")
    activation = f.choice("activation_function", ACTIVATIONS)
    features, num_heads = f.positive_int("n_embd"), f.positive_int("n_head")
    f.divisible("n_embd", features, "n_head", num_heads)
    return nn.TransformerConfig.create(
        num_layers=f.positive_int(LAYERS_FIELD),
        features=features,
        num_heads=num_heads,
        fused_qkv=True,
        vocab_size=f.positive_int("vocab_size"),
        max_len=f.positive_int("n_positions"),
        positions="learned",
        norm="pre",
        norm_kind="layernorm",
        norm_eps=f.positive_number("layer_norm_epsilon"),
        final_norm=True,
        use_bias=True,
        mlp_features=f.positive_int("n_inner", optional=True) or 4 * features,
        mlp_activation=ACTIVATIONS[activation],
        head="tied" if f.boolean("tie_word_embeddings") else "linear",
        head_bias=False,
        causal=True,
        dtype=dtype,
        param_dtype=param_dtype,
    )


def _conv1d(get, name: str, shape: tuple) -> dict:
    """A Conv1D: weight `[in, out]` (an `nnx.Linear` kernel as stored) and bias `[out]`."""
    return params.linear(get(f"{name}.weight", shape), get(f"{name}.bias", shape[1:]))


def _norm(get, name: str, d: int) -> dict:
    return params.norm(get(f"{name}.weight", (d,)), get(f"{name}.bias", (d,)))


def _layer(get, prefix: str, d: int, f: int) -> dict:
    return params.block(
        attention=params.fused_attention(
            _conv1d(get, f"{prefix}.attn.c_attn", (d, 3 * d)),
            _conv1d(get, f"{prefix}.attn.c_proj", (d, d)),
        ),
        attention_norm=_norm(get, f"{prefix}.ln_1", d),
        mlp=params.mlp(
            fc1=_conv1d(get, f"{prefix}.mlp.c_fc", (d, f)),
            fc2=_conv1d(get, f"{prefix}.mlp.c_proj", (f, d)),
        ),
        mlp_norm=_norm(get, f"{prefix}.ln_2", d),
    )


def params_from_hf(get, names: set, config: nn.TransformerConfig) -> dict:
    """Checkpoint tensors (`get(name, shape)`) -> the `Transformer`'s parameter tree (`attnjax.nn.params`)."""
    prefix = "transformer." if "transformer.wte.weight" in names else ""
    d, f, vocab = config.block.features, config.block.mlp_features, config.vocab_size
    layers = [_layer(get, f"{prefix}h.{i}", d, f) for i in range(config.num_layers)]
    return params.transformer(
        embed=params.embedding(get(f"{prefix}wte.weight", (vocab, d))),
        position_table=get(f"{prefix}wpe.weight", (config.max_len, d)),
        blocks=jax.tree.map(lambda *xs: np.stack(xs), *layers),
        final_norm=_norm(get, f"{prefix}ln_f", d),
        head=params.linear(get("lm_head.weight", (vocab, d)).T)
        if config.head == "linear"
        else None,
    )


def not_read(names: set) -> set:
    """Tensors the model does not have by design: the causal-mask buffers `attn.bias` and
    `attn.masked_bias` older files hold (Hugging Face skips them too)."""
    return {n for n in names if re.search(r"(^|\.)attn\.(bias|masked_bias)$", n)}
