"""Export a llama-family `attnjax.nn.Transformer` as a Hugging Face `LlamaForCausalLM` (config and state dict).

    config, state = llama_state_dict(model)        # e.g. SmolLM2 from load_llama()
    reference = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})

The inverse of `attnjax.pretrained.decoder`'s mapping, NumPy only: kernels
`[in, out]` become torch weights `[out, in]`. A model with interleaved rotary
pairs (`rope='interleaved'`, as GGUF files store llama) has each head's
query and key columns permuted back to Hugging Face's half-split layout:
column 2i + c of a head becomes column c Dh/2 + i (c in {0, 1}), the same
permutation on queries and keys, so every attention logit is unchanged.
"""

from __future__ import annotations

import numpy as np
from flax import nnx

from attnjax import nn


def _check(config: nn.TransformerConfig) -> None:
    """A llama-family model: causal, pre-RMSNorm, SwiGLU, RoPE, no biases, no window, no QK-norm, an
    unscaled embedding, a tied or bias-free head."""
    block, attention = config.block, config.block.attention
    needed = {
        "causal": True,
        "norm": "pre",
        "norm_kind": "rmsnorm",
        "mlp_activation": "swiglu",
        "positions": None,
        "use_bias": False,
        "qkv_bias": None,
        "window": None,
        "fused_qkv": False,
        "normalize_qk": None,
        "embedding_scale": None,
        "layer_windows": None,
        "layer_rope_bases": None,
    }
    found = {
        "causal": config.causal,
        "norm": block.norm,
        "norm_kind": block.norm_kind,
        "mlp_activation": block.mlp_activation,
        "positions": config.positions,
        "use_bias": block.use_bias,
        "qkv_bias": attention.qkv_bias,
        "window": attention.window,
        "fused_qkv": attention.fused_qkv,
        "normalize_qk": attention.normalize_qk,
        "embedding_scale": config.embedding_scale,
        "layer_windows": config.layer_windows,
        "layer_rope_bases": config.layer_rope_bases,
    }
    wrong = {k: found[k] for k in needed if found[k] != needed[k]}
    if attention.rope is None:
        wrong["rope"] = None
    if config.head not in ("tied", "linear") or (config.head == "linear" and config.head_bias):
        wrong.update(head=config.head, head_bias=config.head_bias)
    if wrong:
        raise ValueError(
            f"llama_state_dict exports llama-family models only; this one has {wrong} "
            f"(needed: {needed}, rope set, head 'tied' or 'linear' without bias)"
        )


def _half_layout(kernel: np.ndarray, heads: int) -> np.ndarray:
    """Kernel `[F, heads Dh]` with interleaved rotary pairs -> the half-split layout."""
    width = kernel.shape[0]
    return kernel.reshape(width, heads, -1, 2).transpose(0, 1, 3, 2).reshape(width, -1)


def llama_config(config: nn.TransformerConfig) -> dict:
    """`transformers.LlamaConfig` keyword arguments of `config`."""
    block, attention = config.block, config.block.attention
    rope = {"rope_type": "default", "rope_theta": attention.rope_base}
    if attention.rope_scaling is not None:
        kind, *values = attention.rope_scaling
        names = {
            "linear": ("factor",),
            "llama3": (
                "factor",
                "low_freq_factor",
                "high_freq_factor",
                "original_max_position_embeddings",
            ),
        }[kind]
        rope.update(rope_type=kind, **dict(zip(names, values)))
    return dict(
        hidden_size=block.features,
        intermediate_size=block.mlp_features or 4 * block.features,
        num_hidden_layers=config.num_layers,
        num_attention_heads=block.num_heads,
        num_key_value_heads=attention.kv_heads(block.num_heads),
        head_dim=block.head_dim,
        vocab_size=config.vocab_size,
        max_position_embeddings=config.max_len,
        rms_norm_eps=block.norm_eps,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        rope_parameters=rope,
        tie_word_embeddings=config.head == "tied",
    )


def llama_state_dict(model: nn.Transformer) -> tuple[dict, dict[str, np.ndarray]]:
    """(`LlamaConfig` keyword arguments, state dict `{name: float32 array, torch layout}`) of `model`."""
    config = model.config
    _check(config)
    tree = nnx.to_pure_dict(nnx.state(model, nnx.Param))

    def as_np(x):
        return np.asarray(x, np.float32)

    blocks, heads = tree["blocks"], config.block.num_heads
    kv_heads = config.block.attention.kv_heads(heads)
    interleaved = config.block.attention.rope == "interleaved"
    embedding = as_np(tree["embed"]["embedding"])
    state = {
        "model.embed_tokens.weight": embedding,
        "model.norm.weight": as_np(tree["final_norm"]["scale"]),
        "lm_head.weight": embedding if config.head == "tied" else as_np(tree["head"]["kernel"]).T,
    }
    for i in range(config.num_layers):
        p, kernel = f"model.layers.{i}.", lambda *path: as_np(_leaf(blocks, path)[i])
        for name, proj, n in (("query", "q_proj", heads), ("key", "k_proj", kv_heads)):
            w = kernel("attention", name, "kernel")
            state[f"{p}self_attn.{proj}.weight"] = (_half_layout(w, n) if interleaved else w).T
        state[f"{p}self_attn.v_proj.weight"] = kernel("attention", "value", "kernel").T
        state[f"{p}self_attn.o_proj.weight"] = kernel("attention", "out", "kernel").T
        for name in ("gate", "up", "down"):
            state[f"{p}mlp.{name}_proj.weight"] = kernel("mlp", name, "kernel").T
        state[f"{p}input_layernorm.weight"] = kernel("attention_norm", "scale")
        state[f"{p}post_attention_layernorm.weight"] = kernel("mlp_norm", "scale")
    return llama_config(config), {
        k: np.array(v, np.float32, order="C") for k, v in state.items()
    }  # writable


def _leaf(tree, path):
    for name in path:
        tree = tree[name]
    return tree
