"""One transformer layer: norms, the MLP, and `Block`, built from a `BlockConfig`.

Shapes: hidden states `[..., T, D]`; attention weights `[..., H, T, S]`.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
from flax import nnx

from attnjax import checks
from attnjax.nn.attention import MultiHeadAttention, as_key
from attnjax.nn.configs import GATED_ACTIVATIONS, MLP_ACTIVATIONS, BlockConfig

Array = jax.Array
_NORMS = {"layernorm": nnx.LayerNorm, "rmsnorm": nnx.RMSNorm}


def make_norm(
    features: int,
    *,
    kind: str = "layernorm",
    eps: float = 1e-6,
    dtype=None,
    param_dtype=jnp.float32,
    rngs: nnx.Rngs,
) -> nnx.Module:
    """LayerNorm (Ba et al. 2016; scale and bias) or RMSNorm (Zhang & Sennrich 2019; scale only) over `[..., D]`.

    `kind` and `eps` are validated by `BlockConfig` (`norm_kind`, `norm_eps`).
    """
    return _NORMS[kind](features, epsilon=eps, dtype=dtype, param_dtype=param_dtype, rngs=rngs)


class Mlp(nnx.Module):
    """Feed-forward network `[..., D] -> [..., D]`.

    activation 'gelu_tanh' (default), 'gelu' (exact) or 'relu':
        W_2 act(W_1 x + b_1) + b_2                       (params fc1, fc2)
    activation 'swiglu' or 'geglu' (Shazeer 2020, "GLU variants improve transformer"):
        W_down (act(W_gate x) * W_up x)                  (params gate, up, down)
    with act = silu (SwiGLU, llama's) or the tanh GELU (GeGLU, Gemma's).
    `use_bias=False` drops every bias.
    """

    def __init__(
        self,
        features: int,
        hidden_features: int,
        *,
        activation: str = "gelu_tanh",
        use_bias: bool = True,
        dtype=None,
        param_dtype=jnp.float32,
        rngs: nnx.Rngs,
    ):
        checks.positive_int("features", features)
        checks.positive_int("hidden_features", hidden_features)
        checks.choice("mlp_activation", activation, MLP_ACTIVATIONS)
        self.activation = activation

        def linear(i, o):
            return nnx.Linear(
                i,
                o,
                use_bias=use_bias,
                dtype=dtype,
                param_dtype=param_dtype,
                rngs=rngs,
            )

        if activation in GATED_ACTIVATIONS:
            self.gate, self.up = (
                linear(features, hidden_features),
                linear(features, hidden_features),
            )
            self.down = linear(hidden_features, features)
        else:
            self.fc1, self.fc2 = (
                linear(features, hidden_features),
                linear(hidden_features, features),
            )

    def __call__(self, x: Array, sites: Optional[Callable] = None) -> Array:
        """x `[..., D]` -> `[..., D]`; `sites` (an `attnjax.nn.sites.Sites`) sees the hidden activation
        `[..., F]` as 'mlp_hidden'."""
        act, gated = MLP_ACTIVATIONS[self.activation], self.activation in GATED_ACTIVATIONS
        if gated:
            hidden = act(self.gate(x)) * self.up(x)
        else:
            hidden = act(self.fc1(x))
        if sites is not None:
            hidden = sites("mlp_hidden", hidden)
        return self.down(hidden) if gated else self.fc2(hidden)


class Block(nnx.Module):
    """One transformer layer with switchable skip connections, MLP and norm placement.

    For each sub-layer f (attention, then the MLP if `mlp`), with d = dropout:
      norm='pre':  x <- x + a d(f(LN(x)))   (skip)   or  d(f(LN(x)))   (no skip)
      norm='post': x <- LN(x + a d(f(x)))   (skip)   or  LN(d(f(x)))   (no skip)
      norm='sandwich': x <- x + a d(LN'(f(LN(x))))   (skip)   or  d(LN'(f(LN(x))))
                   (a second norm LN' on the sub-layer's output: Gemma 2 and 3's
                   post_attention_layernorm and post_feedforward_layernorm)
      norm=None:   x <- x + a d(f(x))       (skip)   or  d(f(x))       (no skip)
    with a = `config.residual_scale` (e.g. 1/sqrt(L), Noci et al. 2022, "Signal
    propagation in transformers"). Attention only without skip (`skip=False,
    mlp=False, norm=None`) is the pure-attention network of Dong et al. 2021,
    whose token representations collapse to rank one with depth.

    Args:
      config: the layer's `BlockConfig` (width, heads, the switches above, the
        MLP, norms, biases, residual dropout d, dtypes and the attention's
        `AttentionConfig`); kept as `self.config`. Its `residual_scale` must
        be a number here (`TransformerConfig.layer()` resolves 'inv_sqrt_depth').
      rngs: `nnx.Rngs`; with dropout, 'dropout' (or default) streams are forked from it.
    """

    def __init__(self, config: BlockConfig, *, rngs: nnx.Rngs):
        if not isinstance(config, BlockConfig):
            raise TypeError(f"config must be a BlockConfig, got {type(config).__name__}")
        self.config = config
        self.residual_scale = config.branch_scale()
        kw = dict(dtype=config.dtype, param_dtype=config.param_dtype, rngs=rngs)
        attention_module = config.attention_module or MultiHeadAttention
        self.attention = attention_module(
            config.features,
            config.num_heads,
            config=config.attention,
            deterministic=config.deterministic,
            use_bias=config.use_bias,
            **kw,
        )
        layer_norm = functools.partial(
            make_norm, config.features, kind=config.norm_kind, eps=config.norm_eps, **kw
        )
        if config.norm is not None:
            self.attention_norm = layer_norm()
        if config.norm == "sandwich":
            self.attention_post_norm = layer_norm()
        if config.mlp:
            self.mlp = Mlp(
                config.features,
                config.mlp_features or 4 * config.features,
                activation=config.mlp_activation,
                use_bias=config.use_bias,
                **kw,
            )
            if config.norm is not None:
                self.mlp_norm = layer_norm()
            if config.norm == "sandwich":
                self.mlp_post_norm = layer_norm()
        rate = config.residual_dropout_rate
        self.dropout = (
            nnx.Dropout(rate, deterministic=config.deterministic, rngs=rngs) if rate > 0 else None
        )

    def _sublayer(
        self, x: Array, branch: Callable[[Array], Array], layer_norm, deterministic, key, post=None
    ) -> Array:
        def dropped(h):
            y = branch(h)
            y = y if post is None else post(y)
            return (
                y
                if self.dropout is None
                else self.dropout(y, deterministic=deterministic, rngs=key)
            )

        if self.config.norm in ("pre", "sandwich"):
            y = dropped(layer_norm(x))
            return x + self.residual_scale * y if self.config.skip else y
        y = dropped(x)
        y = x + self.residual_scale * y if self.config.skip else y
        return layer_norm(y) if self.config.norm == "post" else y

    def __call__(
        self,
        x: Array,
        *,
        mask: Optional[Array] = None,
        is_causal: bool = False,
        return_weights: bool = False,
        decode: bool = False,
        deterministic: Optional[bool] = None,
        rngs=None,
        core: Optional[Callable] = None,
        sites: Optional[Callable] = None,
    ):
        """x `[..., T, D]` -> (x `[..., T, D]`, weights `[..., H, T, S]` or None).

        Weights are computed only when `return_weights` is set, so the default
        keeps the fast attention path. `decode`, `deterministic`, `rngs`: see
        `MultiHeadAttention.__call__` (one key from `rngs` is split between
        the attention and the two residual dropouts). `core`: passed to the
        attention (`MultiHeadAttention.__call__`); with `return_weights` its
        extra (e.g. statistics) comes back in place of the weights. `sites`: an
        `attnjax.nn.sites.Sites` called at resid_pre, the attention's sites, resid_mid and the
        MLP's (full passes; the Transformer calls resid_post after its residual edits).
        """
        if sites is not None:
            x = sites("resid_pre", x)
        key = as_key(rngs)
        keys = [None] * 3 if key is None else [jax.random.fold_in(key, i) for i in range(3)]
        weights = []

        def attend(h):
            out = self.attention(
                h,
                mask=mask,
                is_causal=is_causal,
                return_weights=return_weights,
                decode=decode,
                deterministic=deterministic,
                rngs=keys[0],
                core=core,
                sites=sites,
            )
            if return_weights:
                out, w = out
                weights.append(w)
            return out

        x = self._sublayer(
            x,
            attend,
            getattr(self, "attention_norm", None),
            deterministic,
            keys[1],
            getattr(self, "attention_post_norm", None),
        )
        if self.config.mlp:
            mlp = self.mlp
            if sites is not None:
                x = sites("resid_mid", x)

                def mlp(h):
                    return sites("mlp_out", self.mlp(h, sites))

            x = self._sublayer(
                x,
                mlp,
                getattr(self, "mlp_norm", None),
                deterministic,
                keys[2],
                getattr(self, "mlp_post_norm", None),
            )
        return x, (weights[0] if return_weights else None)
