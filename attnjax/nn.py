"""Flax NNX modules built from attnjax's pure attention functions.

* `MultiHeadAttention`: Q/K/V projections (separate W_q, W_k, W_v or one fused
  W_qkv, seed 000 §6.1), optional QK normalisation (seed 000 §2.3), an
  attention function, and the output projection W_o. The module owns the
  parameters; the attention itself is the pure function it is given.
* `Mlp`: two-layer GELU feed-forward network.
* `Block`: attention and MLP sub-layers with the switches that depth studies
  need: `skip`, `mlp`, `norm` in {'pre', 'post', None}, `residual_scale`.
* `Transformer` (+ `TransformerConfig`): embedding, positions, L blocks
  scanned over stacked parameters (compile time independent of depth), final
  norm and output head; optionally returns every layer's hidden states and
  attention weights.

Shapes: tokens `[B, T]` (int) or features `[B, T, F]`; hidden states
`[B, T, D]`; attention weights `[B, H, T, S]`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional, Union

import jax
import jax.numpy as jnp
from flax import nnx

from attnjax import features as features_lib
from attnjax import linear as linear_lib
from attnjax.attention import dot_product_attention

Array = jax.Array
NORM_CHOICES = ("pre", "post", None)
QK_NORM_CHOICES = (None, "layernorm", "cosine")
POSITION_CHOICES = ("learned", "sinusoidal", None)
ATTENTION_KINDS = ("softmax", "linear")
FIXED_FEATURE_MAPS = {"elu_plus_one": features_lib.elu_plus_one, "relu": features_lib.relu}
RANDOM_FEATURE_MAPS = {
    "favor_plus": features_lib.favor_plus,
    "relu_random": features_lib.relu_random,
    "trig_random": features_lib.trig_random,
}


class RandomProjection(nnx.Variable):
    """Non-trainable random feature projection `[M, Dh]` of linear attention."""


def _check_linear_options(attention_kind: str, feature_map: str, num_features: int) -> None:
    if attention_kind not in ATTENTION_KINDS:
        raise ValueError(f"attention_kind must be one of {ATTENTION_KINDS}, got {attention_kind!r}")
    names = tuple(FIXED_FEATURE_MAPS) + tuple(RANDOM_FEATURE_MAPS)
    if feature_map not in names:
        raise ValueError(f"feature_map must be one of {names}, got {feature_map!r}")
    _check_positive_int("num_features", num_features)


def _check_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_divisible(name: str, value: int, by_name: str, by: int) -> None:
    if value % by:
        raise ValueError(f"{name} ({value}) must be divisible by {by_name} ({by})")


def _check_temperature(temperature) -> None:
    if not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")


def _normalize_qk_mode(normalize_qk) -> Optional[str]:
    if normalize_qk is True:
        return "layernorm"
    if normalize_qk is False:
        return None
    if normalize_qk not in QK_NORM_CHOICES:
        raise ValueError(f"normalize_qk must be one of {QK_NORM_CHOICES} or a bool, got {normalize_qk!r}")
    return normalize_qk


def cosine_normalize(x: Array) -> Array:
    """Rescale each vector `[..., D]` to norm sqrt(D), so q.k / sqrt(D) = sqrt(D) cos(q, k)."""
    x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    norm = jnp.sqrt(jnp.sum(x32 * x32, axis=-1, keepdims=True))
    tiny = jnp.finfo(x32.dtype).tiny
    return (x32 * (math.sqrt(x.shape[-1]) / jnp.maximum(norm, tiny))).astype(x.dtype)


class MultiHeadAttention(nnx.Module):
    """Multi-head attention: out = concat_h(attn(x W_q^h, c W_k^h, c W_v^h)) W_o.

    Args:
      in_features: F, the width of `x` (and of `context`).
      num_heads: H query heads.
      qkv_features: H * Dh, the total query width (default `in_features`).
      out_features: width of the output (default `in_features`).
      num_kv_heads: K key/value heads, dividing H (grouped-query attention).
      fused_qkv: one W_qkv `[F, (H + 2K) Dh]` instead of three matrices
        (self-attention only).
      use_bias: biases on every projection.
      temperature: softmax temperature passed to `attention_fn`.
      normalize_qk: None, 'layernorm' (QK-norm, as `flax.nnx.MultiHeadAttention`
        with `normalize_qk=True`; `True` means this) or 'cosine' (q and k
        rescaled to norm sqrt(Dh), so logits are sqrt(Dh) cos(q, k)).
      attention_fn: `fn(q, k, v, *, mask, is_causal, temperature,
        return_weights)` on `[B, T, H, Dh]`; default `dot_product_attention`.
        Used when `attention_kind='softmax'`.
      attention_kind: 'softmax' (exact, through `attention_fn`) or 'linear'
        (`attnjax.linear_attention`; weights from `linear_attention_weights`).
        For linear attention the temperature divides the queries before the
        feature map, which for FAVOR+ is exactly the softmax temperature.
      feature_map: for linear attention: 'favor_plus', 'relu_random',
        'trig_random' (random features, projection `[num_features, Dh]`
        held in a non-trainable `RandomProjection`; `redraw(key)` draws a
        new one), 'elu_plus_one' or 'relu'.
      num_features: M, the number of random features.
      dtype: computation dtype (None: that of the inputs/params).
      param_dtype: parameter dtype.
      rngs: `nnx.Rngs` for initialisation.
    """

    def __init__(
        self,
        in_features: int,
        num_heads: int,
        *,
        qkv_features: Optional[int] = None,
        out_features: Optional[int] = None,
        num_kv_heads: Optional[int] = None,
        fused_qkv: bool = False,
        use_bias: bool = True,
        temperature: float = 1.0,
        normalize_qk: Union[bool, str, None] = None,
        attention_fn: Callable[..., Any] = dot_product_attention,
        attention_kind: str = "softmax",
        feature_map: str = "favor_plus",
        num_features: int = 64,
        dtype: Optional[Any] = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ):
        qkv_features = in_features if qkv_features is None else qkv_features
        out_features = in_features if out_features is None else out_features
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        for name, value in (("in_features", in_features), ("num_heads", num_heads),
                            ("qkv_features", qkv_features), ("out_features", out_features),
                            ("num_kv_heads", num_kv_heads)):
            _check_positive_int(name, value)
        _check_divisible("qkv_features", qkv_features, "num_heads", num_heads)
        _check_divisible("num_heads", num_heads, "num_kv_heads", num_kv_heads)
        _check_temperature(temperature)
        _check_linear_options(attention_kind, feature_map, num_features)
        self.in_features = in_features
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = qkv_features // num_heads
        self.fused_qkv = fused_qkv
        self.temperature = temperature
        self.normalize_qk = _normalize_qk_mode(normalize_qk)
        self.attention_fn = attention_fn
        self.attention_kind = attention_kind
        self.feature_map_name = feature_map
        if attention_kind == "linear" and feature_map in RANDOM_FEATURE_MAPS:
            self.projection = RandomProjection(self._draw_projection(rngs.params(), num_features))
        linear = lambda i, o: nnx.Linear(  # noqa: E731
            i, o, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs
        )
        q_width, kv_width = num_heads * self.head_dim, num_kv_heads * self.head_dim
        if fused_qkv:
            self.qkv = linear(in_features, q_width + 2 * kv_width)
        else:
            self.query = linear(in_features, q_width)
            self.key = linear(in_features, kv_width)
            self.value = linear(in_features, kv_width)
        if self.normalize_qk == "layernorm":
            norm = lambda: nnx.LayerNorm(  # noqa: E731
                self.head_dim, use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs
            )
            self.query_ln, self.key_ln = norm(), norm()
        self.out = linear(q_width, out_features)

    def _draw_projection(self, key: Array, num_features: int) -> Array:
        return features_lib.orthogonal_random_matrix(key, num_features, self.head_dim)

    def redraw(self, key: Array) -> None:
        """Draw a new random feature projection (linear attention with random features)."""
        if not hasattr(self, "projection"):
            raise ValueError(f"redraw needs random features; this module uses {self.attention_kind!r} "
                             f"attention with feature_map={self.feature_map_name!r}")
        self.projection[...] = self._draw_projection(key, self.projection.shape[-2])

    def _feature_map(self) -> Callable:
        if self.feature_map_name in FIXED_FEATURE_MAPS:
            return FIXED_FEATURE_MAPS[self.feature_map_name]
        return RANDOM_FEATURE_MAPS[self.feature_map_name](self.projection[...])

    def _attend(self, q, k, v, mask, is_causal, need_weights):
        """Heads `[..., T, H, Dh]` -> (out `[..., T, H, Dh]`, weights `[..., H, T, S]` or None)."""
        if self.attention_kind == "softmax":
            result = self.attention_fn(
                q, k, v, mask=mask, is_causal=is_causal, temperature=self.temperature, return_weights=need_weights
            )
            return result if need_weights else (result, None)
        phi = self._feature_map()
        q = q / jnp.asarray(self.temperature, q.dtype)
        out = linear_lib.linear_attention(q, k, v, feature_map=phi, is_causal=is_causal, mask=mask)
        weights = None
        if need_weights:
            weights = linear_lib.linear_attention_weights(q, k, feature_map=phi, is_causal=is_causal, mask=mask)
        return out, weights

    def _project(self, x: Array, context: Optional[Array]) -> tuple[Array, Array, Array]:
        """x `[..., T, F]`, context `[..., S, F]` -> q `[..., T, H, Dh]`, k, v `[..., S, K, Dh]`."""
        heads = lambda y, n: jnp.reshape(y, y.shape[:-1] + (n, self.head_dim))  # noqa: E731
        if self.fused_qkv:
            if context is not None:
                raise ValueError("fused_qkv=True supports self-attention only; got a context")
            q_width = self.num_heads * self.head_dim
            kv_width = self.num_kv_heads * self.head_dim
            q, k, v = jnp.split(self.qkv(x), [q_width, q_width + kv_width], axis=-1)
        else:
            context = x if context is None else context
            q, k, v = self.query(x), self.key(context), self.value(context)
        q, k, v = heads(q, self.num_heads), heads(k, self.num_kv_heads), heads(v, self.num_kv_heads)
        if self.normalize_qk == "layernorm":
            q, k = self.query_ln(q), self.key_ln(k)
        elif self.normalize_qk == "cosine":
            q, k = cosine_normalize(q), cosine_normalize(k)
        return q, k, v

    def __call__(
        self,
        x: Array,
        context: Optional[Array] = None,
        *,
        mask: Optional[Array] = None,
        is_causal: bool = False,
        sow_weights: bool = False,
        return_weights: bool = False,
    ):
        """Attend from `x` `[..., T, F]` to `context` `[..., S, F]` (default: `x`).

        Args:
          mask: boolean, broadcastable to `[..., H, T, S]`, True = attend.
          is_causal: apply the causal mask.
          sow_weights: store the weights `[..., H, T, S]` as an
            `nnx.Intermediate` named 'attention_weights' (collect them with
            `nnx.capture(fn, nnx.Intermediate)`).
          return_weights: return `(out, weights)` instead of `out`.

        Returns:
          `[..., T, out_features]`, or `(out, weights)`.
        """
        if x.ndim < 2 or x.shape[-1] != self.in_features:
            raise ValueError(f"x must have shape [..., T, {self.in_features}], got {x.shape}")
        if context is not None and (context.ndim != x.ndim or context.shape[-1] != self.in_features):
            raise ValueError(
                f"context must have shape [..., S, {self.in_features}] like x {x.shape}, got {context.shape}"
            )
        q, k, v = self._project(x, context)
        heads_out, weights = self._attend(q, k, v, mask, is_causal, sow_weights or return_weights)
        if sow_weights:
            self.sow(nnx.Intermediate, "attention_weights", weights)
        out = self.out(jnp.reshape(heads_out, heads_out.shape[:-2] + (-1,)))
        return (out, weights) if return_weights else out


class Mlp(nnx.Module):
    """Feed-forward network `[..., D] -> [..., D]`: W_2 gelu(W_1 x + b_1) + b_2."""

    def __init__(self, features: int, hidden_features: int, *, dtype=None, param_dtype=jnp.float32, rngs: nnx.Rngs):
        _check_positive_int("features", features)
        _check_positive_int("hidden_features", hidden_features)
        self.fc1 = nnx.Linear(features, hidden_features, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.fc2 = nnx.Linear(hidden_features, features, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x: Array) -> Array:
        return self.fc2(jax.nn.gelu(self.fc1(x)))


class Block(nnx.Module):
    """One transformer layer with switchable skip connections, MLP and norm placement.

    For each sub-layer f (attention, then the MLP if `mlp`):
      norm='pre':  x <- x + a f(LN(x))   (skip)   or  f(LN(x))   (no skip)
      norm='post': x <- LN(x + a f(x))   (skip)   or  LN(f(x))   (no skip)
      norm=None:   x <- x + a f(x)       (skip)   or  f(x)       (no skip)
    with a = `residual_scale` (e.g. 1/sqrt(L), Noci et al. 2022, "Signal
    propagation in transformers"). Attention only without skip (`skip=False,
    mlp=False, norm=None`) is the pure-attention network of Dong et al. 2021,
    whose token representations collapse to rank one with depth.

    Args:
      features: D, the hidden width.
      num_heads: attention heads; further keyword arguments (`num_kv_heads`,
        `fused_qkv`, `temperature`, `normalize_qk`, `attention_fn`, ...) go to
        `MultiHeadAttention`.
      mlp_features: hidden width of the MLP (default 4 D).
    """

    def __init__(
        self,
        features: int,
        num_heads: int,
        *,
        skip: bool = True,
        mlp: bool = True,
        norm: Optional[str] = "pre",
        residual_scale: float = 1.0,
        mlp_features: Optional[int] = None,
        dtype=None,
        param_dtype=jnp.float32,
        rngs: nnx.Rngs,
        **attention_kwargs,
    ):
        if norm not in NORM_CHOICES:
            raise ValueError(f"norm must be one of {NORM_CHOICES}, got {norm!r}")
        self.skip, self.use_mlp, self.norm, self.residual_scale = skip, mlp, norm, residual_scale
        self.attention = MultiHeadAttention(
            features, num_heads, dtype=dtype, param_dtype=param_dtype, rngs=rngs, **attention_kwargs
        )
        layer_norm = lambda: nnx.LayerNorm(features, dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # noqa: E731
        if norm is not None:
            self.attention_norm = layer_norm()
        if mlp:
            self.mlp = Mlp(features, mlp_features or 4 * features, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
            if norm is not None:
                self.mlp_norm = layer_norm()

    def _sublayer(self, x: Array, branch: Callable[[Array], Array], layer_norm) -> Array:
        if self.norm == "pre":
            y = branch(layer_norm(x))
            return x + self.residual_scale * y if self.skip else y
        y = branch(x)
        y = x + self.residual_scale * y if self.skip else y
        return layer_norm(y) if self.norm == "post" else y

    def __call__(
        self, x: Array, *, mask: Optional[Array] = None, is_causal: bool = False, return_weights: bool = False
    ):
        """x `[..., T, D]` -> (x `[..., T, D]`, weights `[..., H, T, T]` or None).

        Weights are computed only when `return_weights` is set, so the default
        keeps the fast attention path.
        """
        weights = []

        def attend(h):
            out = self.attention(h, mask=mask, is_causal=is_causal, return_weights=return_weights)
            if return_weights:
                out, w = out
                weights.append(w)
            return out

        x = self._sublayer(x, attend, getattr(self, "attention_norm", None))
        if self.use_mlp:
            x = self._sublayer(x, self.mlp, getattr(self, "mlp_norm", None))
        return x, (weights[0] if return_weights else None)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Everything that defines a `Transformer`; validated on construction.

    Attributes:
      num_layers: L >= 1.
      features: hidden width D, divisible by `num_heads`.
      num_heads, num_kv_heads: attention heads (K divides H; None: K = H).
      vocab_size: token vocabulary (integer inputs `[B, T]`), or None for
        real-valued inputs `[B, T, input_features]` with a linear input projection.
      input_features: width of real-valued inputs (when `vocab_size` is None).
      output_features: width of the output head (default `vocab_size`, else D).
      max_len: longest sequence (learned positions need it).
      positions: 'learned', 'sinusoidal' or None.
      skip, mlp, norm, residual_scale: see `Block`; residual_scale may be
        the string 'inv_sqrt_depth' for 1/sqrt(L).
      final_norm: LayerNorm before the head.
      causal: causal self-attention.
      temperature, fused_qkv, normalize_qk, attention_kind, feature_map,
        num_features: see `MultiHeadAttention`.
      mlp_features: MLP hidden width (default 4 D).
      dtype, param_dtype: computation and parameter dtypes.
    """

    num_layers: int = 2
    features: int = 64
    num_heads: int = 4
    num_kv_heads: Optional[int] = None
    vocab_size: Optional[int] = None
    input_features: Optional[int] = None
    output_features: Optional[int] = None
    max_len: int = 512
    positions: Optional[str] = "learned"
    skip: bool = True
    mlp: bool = True
    norm: Optional[str] = "pre"
    residual_scale: Union[float, str] = 1.0
    final_norm: bool = True
    causal: bool = False
    temperature: float = 1.0
    fused_qkv: bool = False
    normalize_qk: Union[bool, str, None] = None
    attention_kind: str = "softmax"
    feature_map: str = "favor_plus"
    num_features: int = 64
    mlp_features: Optional[int] = None
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def __post_init__(self):
        for name in ("num_layers", "features", "num_heads", "max_len"):
            _check_positive_int(name, getattr(self, name))
        _check_divisible("features", self.features, "num_heads", self.num_heads)
        if self.num_kv_heads is not None:
            _check_positive_int("num_kv_heads", self.num_kv_heads)
            _check_divisible("num_heads", self.num_heads, "num_kv_heads", self.num_kv_heads)
        if (self.vocab_size is None) == (self.input_features is None):
            raise ValueError(
                "give exactly one of vocab_size (token inputs) or input_features (real-valued inputs), "
                f"got vocab_size={self.vocab_size}, input_features={self.input_features}"
            )
        if self.norm not in NORM_CHOICES:
            raise ValueError(f"norm must be one of {NORM_CHOICES}, got {self.norm!r}")
        if self.positions not in POSITION_CHOICES:
            raise ValueError(f"positions must be one of {POSITION_CHOICES}, got {self.positions!r}")
        _check_temperature(self.temperature)
        _normalize_qk_mode(self.normalize_qk)
        _check_linear_options(self.attention_kind, self.feature_map, self.num_features)
        if isinstance(self.residual_scale, str) and self.residual_scale != "inv_sqrt_depth":
            raise ValueError(f"residual_scale must be a number or 'inv_sqrt_depth', got {self.residual_scale!r}")

    @property
    def branch_scale(self) -> float:
        """The numeric residual scale a (1/sqrt(L) for 'inv_sqrt_depth')."""
        if self.residual_scale == "inv_sqrt_depth":
            return 1.0 / math.sqrt(self.num_layers)
        return float(self.residual_scale)

    @property
    def out_features(self) -> int:
        if self.output_features is not None:
            return self.output_features
        return self.vocab_size if self.vocab_size is not None else self.features


def sinusoidal_positions(length: int, features: int) -> Array:
    """Sinusoidal position table `[length, features]` (Vaswani et al. 2017, §3.5)."""
    position = jnp.arange(length, dtype=jnp.float32)[:, None]
    half = features // 2
    rates = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=jnp.float32) / max(half, 1))[None, :]
    table = jnp.concatenate([jnp.sin(position * rates), jnp.cos(position * rates)], axis=-1)
    return jnp.pad(table, ((0, 0), (0, features - 2 * half)))


def _make_block(config: TransformerConfig, rngs: nnx.Rngs) -> Block:
    return Block(
        config.features,
        config.num_heads,
        skip=config.skip,
        mlp=config.mlp,
        norm=config.norm,
        residual_scale=config.branch_scale,
        mlp_features=config.mlp_features,
        num_kv_heads=config.num_kv_heads,
        fused_qkv=config.fused_qkv,
        temperature=config.temperature,
        normalize_qk=config.normalize_qk,
        attention_kind=config.attention_kind,
        feature_map=config.feature_map,
        num_features=config.num_features,
        dtype=config.dtype,
        param_dtype=config.param_dtype,
        rngs=rngs,
    )


class Transformer(nnx.Module):
    """Embedding -> positions -> L scanned `Block`s -> final norm -> head.

    The L blocks' parameters are stacked on a leading axis and the forward pass
    is an `nnx.scan` over them, so compile time does not grow with depth.
    """

    def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
        self.config = config
        kw = dict(dtype=config.dtype, param_dtype=config.param_dtype, rngs=rngs)
        if config.vocab_size is not None:
            self.embed = nnx.Embed(config.vocab_size, config.features, **kw)
        else:
            self.embed = nnx.Linear(config.input_features, config.features, **kw)
        if config.positions == "learned":
            init = nnx.initializers.normal(stddev=0.02)
            self.position_table = nnx.Param(init(rngs.params(), (config.max_len, config.features), config.param_dtype))

        @nnx.split_rngs(splits=config.num_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make_blocks(rngs):
            return _make_block(config, rngs)

        self.blocks = make_blocks(rngs)
        if config.final_norm:
            self.final_norm = nnx.LayerNorm(config.features, **kw)
        self.head = nnx.Linear(config.features, config.out_features, **kw)

    def redraw(self, key: Array) -> None:
        """New random feature projections for every layer (linear attention), one key per layer."""
        attention = self.blocks.attention
        if not hasattr(attention, "projection"):
            raise ValueError("redraw needs linear attention with random features "
                             f"(attention_kind={self.config.attention_kind!r}, feature_map={self.config.feature_map!r})")
        keys = jax.random.split(key, self.config.num_layers)
        num_features = attention.projection.shape[-2]
        head_dim = self.config.features // self.config.num_heads
        draw = lambda k: features_lib.orthogonal_random_matrix(k, num_features, head_dim)  # noqa: E731
        attention.projection[...] = jax.vmap(draw)(keys)

    def _embed(self, inputs: Array) -> Array:
        config = self.config
        if config.vocab_size is not None:
            if inputs.ndim != 2 or not jnp.issubdtype(inputs.dtype, jnp.integer):
                raise ValueError(f"inputs must be integer tokens [B, T], got {inputs.dtype} {inputs.shape}")
        elif inputs.ndim != 3 or inputs.shape[-1] != config.input_features:
            raise ValueError(f"inputs must have shape [B, T, {config.input_features}], got {inputs.shape}")
        length = inputs.shape[1]
        if length > config.max_len and config.positions == "learned":
            raise ValueError(f"sequence length {length} exceeds max_len {config.max_len}")
        x = self.embed(inputs)
        if config.positions == "learned":
            x = x + self.position_table[...][None, :length].astype(x.dtype)
        elif config.positions == "sinusoidal":
            x = x + sinusoidal_positions(length, config.features)[None].astype(x.dtype)
        return x

    def __call__(self, inputs: Array, *, mask: Optional[Array] = None, return_intermediates: bool = False):
        """Forward pass.

        Args:
          inputs: tokens `[B, T]` (int) or features `[B, T, input_features]`.
          mask: optional boolean attention mask broadcastable to `[B, H, T, T]`
            (combined with the causal mask when `config.causal`).
          return_intermediates: also return a dict with 'hidden' `[L + 1, B, T, D]`
            (index 0 is the input to the first block, index l the output of
            block l) and 'attention' `[L, B, H, T, T]`.

        Returns:
          logits `[B, T, out_features]`, or `(logits, intermediates)`.
        """
        x = self._embed(inputs)
        causal = self.config.causal

        @nnx.scan(in_axes=(0, nnx.Carry, None), out_axes=(nnx.Carry, 0))
        def run_blocks(block, h, mask):
            h, weights = block(h, mask=mask, is_causal=causal, return_weights=return_intermediates)
            return h, ((h, weights) if return_intermediates else None)

        h, per_layer = run_blocks(self.blocks, x, mask)
        out = self.final_norm(h) if self.config.final_norm else h
        logits = self.head(out)
        if not return_intermediates:
            return logits
        hidden, weights = per_layer
        hidden = jnp.concatenate([x[None], hidden], axis=0)
        return logits, {"hidden": hidden, "attention": weights}
