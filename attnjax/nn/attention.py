"""`MultiHeadAttention`: Q/K/V projections, an attention function, the output projection, a decoding cache.

Q/K/V are separate W_q, W_k, W_v or one fused W_qkv; optional QK
normalisation (Henry et al. 2020, "Query-Key Normalization for
Transformers"); the attention is the pure function the `AttentionConfig`
names (`attention_fn`, or `attnjax.linear_attention`), and W_o. The module
owns the parameters; the attention itself is the pure function it is given.

A call is four public stages, `project` -> `position` -> `attend` -> `merge`
(`decode` in place of `position` and `attend` when decoding), which edits,
statistics, caches and research variants recombine (`core=`).

Autoregressive decoding: `init_cache(batch_size, max_len)`, then calls with
`decode=True` on chunks of one or more positions (a K/V cache for softmax
attention, the recurrent state for linear attention).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import checks
from attnjax import features as features_lib
from attnjax import linear as linear_lib
from attnjax import masks as masks_lib
from attnjax import rope as rope_lib
from attnjax.attention import default_scale, grouped_logits
from attnjax.nn.attention_fn import check_weights_available
from attnjax.nn.configs import (
    ATTENTION_OPTIONS,
    FIXED_FEATURE_MAPS,
    RANDOM_FEATURE_MAPS,
    AttentionConfig,
)

Array = jax.Array


class RandomProjection(nnx.Variable):
    """Non-trainable random feature projection `[M, Dh]` of linear attention."""


class LayerSetting(nnx.Variable):
    """A non-trainable per-layer constant of a `Transformer`'s attention (stacked `[L]` like the
    parameters, so each layer of the scan reads its own): `layer_window` (int32, 0: no window)
    and `layer_rope_base` (float32), from `TransformerConfig.layer_windows` / `layer_rope_bases`."""


def as_key(rngs) -> Optional[Array]:
    """Per-call randomness (`nnx.Rngs`, `nnx.RngStream`, a PRNG key or None) -> a key or None."""
    checks.rngs(rngs)
    if isinstance(rngs, nnx.Rngs):
        return rngs.dropout()
    if isinstance(rngs, nnx.RngStream):
        return rngs()
    return rngs


def cosine_normalize(x: Array) -> Array:
    """Rescale each vector `[..., D]` to norm sqrt(D), so q.k / sqrt(D) = sqrt(D) cos(q, k)."""
    x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    norm = jnp.sqrt(jnp.sum(x32 * x32, axis=-1, keepdims=True))
    return (x32 * (math.sqrt(x.shape[-1]) / jnp.maximum(norm, jnp.finfo(x32.dtype).tiny))).astype(
        x.dtype
    )


def _visible_keys(
    index: Array, chunk: int, max_len: int, rank: int, window: Optional[int] = None
) -> Array:
    """Causal mask of a chunk at the end of the cache, `[1, ..., 1, C, max_len]` (rank `rank`).

    Query i of the chunk sits at absolute position index + i and sees cache
    slots s <= index + i: earlier positions and the chunk up to itself, never
    the unfilled slots s >= index + C; with a sliding `window` W only
    s > index + i - W (W an int, or a traced int, 0: no window).
    """
    rows = index + jnp.arange(chunk, dtype=index.dtype)[:, None]
    cols = jnp.arange(max_len, dtype=index.dtype)[None, :]
    visible = cols <= rows
    if window is not None:
        visible = visible & ((cols > rows - window) | (window == 0))
    return jnp.reshape(visible, (1,) * (rank - 2) + (chunk, max_len))


def _linear_general(
    layer: nnx.Linear,
    x: Array,
    num_in: int,
    out_shape: tuple[int, ...],
    *,
    kernel: Optional[Array] = None,
    bias: Optional[Array] = None,
) -> Array:
    """`layer` applied to the last `num_in` axes of `x` (flattened), its output axis split into `out_shape`.

    The same product as `layer(reshape(x, [..., F]))` reshaped to `[..., *out_shape]`, as one
    `dot_general` with the kernel `[F, O]` viewed as `[*in_shape, *out_shape]` (how
    `nnx.LinearGeneral` stores it): XLA:CPU then canonicalises the weight gradient into a fast
    matmul, while that of the flat 2-D product is a transposed-operand dot on a slow path
    (1.5x the time of the projection's backward pass at B=64, T=33, F=64, heads of 16).
    `kernel` `[F, O]` and `bias` `[O]` replace the layer's own (dtype, precision and the
    dot are still the layer's), e.g. the query, key and value kernels side by side.
    """
    if kernel is None:
        kernel = layer.kernel[...]
        bias = layer.bias[...] if layer.bias is not None else None
    x, kernel, bias = layer.promote_dtype((x, kernel, bias), dtype=layer.dtype)
    kernel = jnp.reshape(kernel, x.shape[x.ndim - num_in :] + tuple(out_shape))
    contract = (tuple(range(x.ndim - num_in, x.ndim)), tuple(range(num_in)))
    kwargs = (
        {}
        if layer.preferred_element_type is None
        else {"preferred_element_type": layer.preferred_element_type}
    )
    y = layer.dot_general(x, kernel, (contract, ((), ())), precision=layer.precision, **kwargs)
    if bias is not None:
        y = y + jnp.reshape(bias, (1,) * (y.ndim - len(out_shape)) + tuple(out_shape))
    return y


def _time_major(x: Array) -> Array:
    """`[B, C, h, d]` -> `[C, B, h, d]`, for scanning over positions."""
    return jnp.moveaxis(x, -3, 0)


def _attention_config(config: Optional[AttentionConfig], options: dict) -> AttentionConfig:
    """`config` (default `AttentionConfig()`) with the fields in `options` replaced."""
    if config is None:
        config = AttentionConfig()
    elif not isinstance(config, AttentionConfig):
        raise TypeError(f"config must be an AttentionConfig, got {type(config).__name__}")
    unknown = [name for name in options if name not in ATTENTION_OPTIONS]
    if unknown:
        raise TypeError(
            f"MultiHeadAttention got unknown keyword argument(s) {', '.join(unknown)}; "
            f"valid: the AttentionConfig fields {', '.join(ATTENTION_OPTIONS)}"
        )
    return dataclasses.replace(config, **options) if options else config


class MultiHeadAttention(nnx.Module):
    """Multi-head attention: out = concat_h(attn(x W_q^h, c W_k^h, c W_v^h)) W_o.

    The options of the layer (key/value heads, temperature, QK-norm, softmax
    or linear attention, the attention function, RoPE, attention dropout,
    initialisers) are an `AttentionConfig`, given whole (`config=`) or as
    keyword arguments that override its fields. For example:

        mha = MultiHeadAttention(64, 4, num_kv_heads=2, rngs=rngs)   # = config=AttentionConfig(num_kv_heads=2)
        out = mha(x, is_causal=True)        # x [B, T, 64] -> [B, T, 64]
        mha = MultiHeadAttention(64, 4, attention_fn=jax.nn.dot_product_attention, rngs=rngs)
        mha(x, return_weights=True)         # ValueError: jax.nn's function returns no weights
        # On a GPU in bf16, cuDNN's fused kernel:
        cudnn = functools.partial(jax.nn.dot_product_attention, implementation="cudnn")
        mha = MultiHeadAttention(64, 4, attention_fn=cudnn, dtype=jnp.bfloat16, rngs=rngs)

    Autoregressive decoding: `init_cache(batch_size, max_len)`, then calls
    with `decode=True` on chunks `[B, C, F]` (a prompt, then one token at a
    time); each chunk attends causally to everything decoded so far.

    Stages: a call is four public methods in the layout of
    `jax.nn.dot_product_attention` (K key/value heads, Dh = qkv_features / H):

        q, k, v = mha.project(x)              # [B, T, H, Dh], [B, T, K, Dh] x 2; QK-norm
        q, k = mha.position(q), mha.position(k)   # RoPE at 0..T-1 (identity without rope)
        heads, weights = mha.attend(q, k, v, mask=mask, is_causal=True)   # [B, T, H, Dh], None
        y = mha.merge(heads)                  # [B, T, out_features]

    (`__call__` adds the sliding window to the mask before `attend`; when
    decoding, `decode` replaces `position` and `attend`.) An extension passes
    `core=` to the call to replace the middle stages (`attnjax.nn.edits`,
    `statistics`, `sink_cache`); a variant of the attention itself (another
    normaliser of the logits, say) is an `attention_fn` (see
    docs/examples/custom_attention.py); one with parameters of its own is a
    subclass that adds them and overrides a stage, which `nn.Block` builds in
    place of this class when given as `BlockConfig.attention_module` (see
    docs/examples/learned_attention.py).

    Args:
      in_features: F, the width of `x` (and of `context`).
      num_heads: H query heads.
      qkv_features: H * Dh, the total query width (default `in_features`).
      out_features: width of the output (default `in_features`).
      config: the layer's `AttentionConfig` (default `AttentionConfig()`);
        kept as `self.config`.
      use_bias: biases on every projection.
      deterministic: default for the call's `deterministic`: True turns
        dropout off (`nnx.Module.eval()` sets it, `train()` clears it).
      dtype: computation dtype (None: that of the inputs/params).
      param_dtype: parameter dtype.
      rngs: `nnx.Rngs` for initialisation; with `dropout_rate > 0` a 'dropout'
        (or default) stream is forked from it, after the parameters are drawn.
      **options: fields of `AttentionConfig` replacing those of `config`; any
        other keyword raises a `TypeError`.
    """

    def __init__(
        self,
        in_features: int,
        num_heads: int,
        *,
        qkv_features: Optional[int] = None,
        out_features: Optional[int] = None,
        config: Optional[AttentionConfig] = None,
        use_bias: bool = True,
        deterministic: bool = False,
        dtype: Optional[Any] = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
        **options,
    ):
        config = _attention_config(config, options)
        if qkv_features is None:
            qkv_features = in_features if config.head_dim is None else num_heads * config.head_dim
        out_features = in_features if out_features is None else out_features
        for name, value in (
            ("in_features", in_features),
            ("num_heads", num_heads),
            ("qkv_features", qkv_features),
            ("out_features", out_features),
        ):
            checks.positive_int(name, value)
        checks.divisible("qkv_features", qkv_features, "num_heads", num_heads)
        if config.head_dim is not None and qkv_features != num_heads * config.head_dim:
            raise ValueError(
                f"qkv_features={qkv_features} must be num_heads * head_dim = "
                f"{num_heads} * {config.head_dim} when head_dim is given"
            )
        config.check_heads(num_heads, qkv_features // num_heads)
        checks.boolean("deterministic", deterministic)
        self.config = config
        self.in_features = in_features
        self.num_heads = num_heads
        self.num_kv_heads = config.kv_heads(num_heads)
        self.head_dim = qkv_features // num_heads
        self.deterministic = deterministic
        self.dtype, self.param_dtype = dtype, param_dtype
        if config.attention_kind == "linear" and config.feature_map in RANDOM_FEATURE_MAPS:
            self.projection = RandomProjection(
                self._draw_projection(rngs.params(), config.num_features)
            )

        def linear(i, o, init=config.kernel_init, bias=use_bias):
            return nnx.Linear(
                i,
                o,
                use_bias=bias,
                kernel_init=init,
                bias_init=config.bias_init,
                dtype=dtype,
                param_dtype=param_dtype,
                rngs=rngs,
            )

        q_width, kv_width = num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        qkv_bias = use_bias if config.qkv_bias is None else config.qkv_bias
        if config.fused_qkv:
            self.qkv = linear(in_features, q_width + 2 * kv_width, bias=qkv_bias)
        else:
            self.query = linear(in_features, q_width, bias=qkv_bias)
            self.key = linear(in_features, kv_width, bias=qkv_bias)
            self.value = linear(in_features, kv_width, bias=qkv_bias)
        if config.normalize_qk in ("layernorm", "rmsnorm"):
            kind = nnx.LayerNorm if config.normalize_qk == "layernorm" else nnx.RMSNorm
            bias = dict(use_bias=False) if config.normalize_qk == "layernorm" else {}

            def norm():
                return kind(
                    self.head_dim,
                    epsilon=config.qk_norm_eps,
                    dtype=dtype,
                    param_dtype=param_dtype,
                    rngs=rngs,
                    **bias,
                )

            self.query_ln, self.key_ln = norm(), norm()
        out_init = config.kernel_init if config.out_kernel_init is None else config.out_kernel_init
        self.out = linear(q_width, out_features, out_init)
        self.rngs = rngs.dropout.fork() if config.dropout_rate > 0 else None

    def _draw_projection(self, key: Array, num_features: int) -> Array:
        return features_lib.orthogonal_random_matrix(key, num_features, self.head_dim)

    def redraw(self, key: Array) -> None:
        """Draw a new random feature projection (linear attention with random features)."""
        if not hasattr(self, "projection"):
            raise ValueError(
                f"redraw needs random features; this module uses {self.config.attention_kind!r} "
                f"attention with feature_map={self.config.feature_map!r}"
            )
        self.projection[...] = self._draw_projection(key, self.projection.shape[-2])

    def _feature_map(self) -> Callable:
        if self.config.feature_map in FIXED_FEATURE_MAPS:
            return FIXED_FEATURE_MAPS[self.config.feature_map]
        return RANDOM_FEATURE_MAPS[self.config.feature_map](self.projection[...])

    # ------------------------------------------------------------ the stages
    #
    # `__call__` is project -> position -> attend (or decode) -> merge. Each stage is public and
    # documented, so extensions (`attnjax.nn.edits`, `statistics`, `sink_cache`) and research
    # variants recombine them through `core=` without reaching into the module.

    def _dropout_rng(self, deterministic: Optional[bool], rngs) -> Optional[Array]:
        """The key for attention dropout, or None when it is off (rate 0 or deterministic)."""
        deterministic = self.deterministic if deterministic is None else deterministic
        if self.config.dropout_rate == 0 or deterministic:
            return None
        key = as_key(rngs)
        return self.rngs() if key is None else key

    def project(self, x: Array, context: Optional[Array] = None) -> tuple[Array, Array, Array]:
        """Stage 1, the input projections: x `[..., T, F]`, context `[..., S, F]` (None: x) ->
        q `[..., T, H, Dh]`, k, v `[..., S, K, Dh]`.

        q = x W_q + b_q, k = c W_k + b_k, v = c W_v + b_v (c the context), split into H query
        heads and K = `num_kv_heads` key/value heads of Dh (grouped-query attention when K < H:
        `attend` lets each group of H / K query heads read one key/value head), then the QK-norm
        of `config.normalize_qk` on q and k: 'layernorm' (a LayerNorm over Dh without bias, one
        for q and one for k), 'rmsnorm' (an RMSNorm over Dh, likewise) or 'cosine'
        (`cosine_normalize`: norm sqrt(Dh)). No positions yet
        (`position`). A `fused_qkv` layer takes self-attention only.

        Self-attention computes q, k and v as one product with the three
        kernels side by side (`[F, (H + 2K) Dh]`; the parameters stay
        separate): one larger matmul and one input gradient instead of three
        of each, which trains faster (an AdamW step of the rank-collapse
        model, L=8 B=64 T=33, went from 1.02x to 0.89x flax's time).
        """

        def heads(layer, y, n, **kw):
            return _linear_general(layer, y, 1, (n, self.head_dim), **kw)

        split = (self.num_heads, self.num_heads + self.num_kv_heads)
        if self.config.fused_qkv:
            if context is not None:
                raise ValueError("fused_qkv=True supports self-attention only; got a context")
            q, k, v = jnp.split(
                heads(self.qkv, x, self.num_heads + 2 * self.num_kv_heads), split, axis=-2
            )
        elif context is None:
            layers = (self.query, self.key, self.value)
            kernel = jnp.concatenate([layer.kernel[...] for layer in layers], axis=-1)
            bias = (
                None
                if self.query.bias is None
                else jnp.concatenate([layer.bias[...] for layer in layers])
            )
            qkv = heads(
                self.query, x, self.num_heads + 2 * self.num_kv_heads, kernel=kernel, bias=bias
            )
            q, k, v = jnp.split(qkv, split, axis=-2)
        else:
            q = heads(self.query, x, self.num_heads)
            k, v = (
                heads(self.key, context, self.num_kv_heads),
                heads(self.value, context, self.num_kv_heads),
            )
        if self.config.normalize_qk in ("layernorm", "rmsnorm"):
            q, k = self.query_ln(q), self.key_ln(k)
        elif self.config.normalize_qk == "cosine":
            q, k = cosine_normalize(q), cosine_normalize(k)
        return q, k, v

    def position(self, x: Array, positions: Optional[Array] = None) -> Array:
        """Stage 2, positions: queries or keys x `[..., T, N, Dh]` at integer `positions` `[T]`
        (None: 0, ..., T-1) -> `[..., T, N, Dh]`; q and k each at their own positions.

        The rotary embedding of `config.rope` (Su et al. 2021, `attnjax.rope.rotary_embedding`
        with the layer's `rope_base`, layout and `rope_scaling`): coordinate pair i of the
        vector at position p is rotated by the angle p theta_i, so q_t . k_s depends on
        t - s only. The identity when `config.rope` is None. In a `Transformer` with
        `layer_rope_bases` the base is this layer's (`layer_rope_base`).
        """
        if self.config.rope is None:
            return x
        positions = jnp.arange(x.shape[-3]) if positions is None else positions
        base = getattr(self, "layer_rope_base", None)
        return rope_lib.rotary_embedding(
            x,
            positions,
            base=self.config.rope_base if base is None else base[...],
            layout=self.config.rope,
            scaling=self.config.rope_scaling,
        )

    def attend(
        self,
        q: Array,
        k: Array,
        v: Array,
        *,
        mask: Optional[Array] = None,
        is_causal: bool = False,
        need_weights: bool = False,
        dropout_rng: Optional[Array] = None,
    ) -> tuple[Array, Optional[Array]]:
        """Stage 3, the attention: q `[..., T, H, Dh]`, k, v `[..., S, K, Dh]` (positioned) ->
        (out `[..., T, H, Dh]`, weights `[..., H, T, S]`, None unless `need_weights`).

        Softmax attention (`config.attention_kind='softmax'`) is `config.attention_fn`, any
        function with `jax.nn.dot_product_attention`'s signature, called with `mask`,
        `is_causal` and the scale 1 / (sqrt(Dh) tau), tau = `config.temperature`:

            out_t = sum_s p_ts v_s,   p_ts = softmax_s(q_t . k_s / (sqrt(Dh) tau)) over visible s,

        query head h reading key/value head h // (H / K); `return_weights=True` is added
        only when `need_weights`, `dropout_rate=`, `dropout_rng=` only with a `dropout_rng`.
        Linear attention is `attnjax.linear_attention` with the layer's feature map on
        q / tau and k (weights: `attnjax.linear_attention_weights`).

        Args:
          mask: boolean (or 0/1), broadcastable to `[..., H, T, S]`, True = attend. The
            layer's sliding window (`config.window`) is not added here: `__call__` adds it
            to the mask, `decode` to the visible cache slots.
          is_causal: apply the causal mask (query t sees keys s <= t).
          need_weights: also compute the weights (raises for an `attention_fn` that
            returns none, e.g. jax.nn's, when called through `__call__`).
          dropout_rng: a key for dropout on the weights at `config.dropout_rate`
            (softmax), or None: no dropout.
        """
        if self.config.attention_kind == "softmax":
            scale = default_scale(self.head_dim) / self.config.temperature
            kwargs = dict(mask=mask, is_causal=is_causal, scale=scale)
            if need_weights:
                kwargs["return_weights"] = True
            if dropout_rng is not None:
                kwargs.update(dropout_rate=self.config.dropout_rate, dropout_rng=dropout_rng)
            result = self.config.attention_fn(q, k, v, **kwargs)
            return result if need_weights else (result, None)
        phi = self._feature_map()
        q = q / jnp.asarray(self.config.temperature, q.dtype)
        out = linear_lib.linear_attention(q, k, v, feature_map=phi, is_causal=is_causal, mask=mask)
        weights = None
        if need_weights:
            weights = linear_lib.linear_attention_weights(
                q, k, feature_map=phi, is_causal=is_causal, mask=mask
            )
        return out, weights

    def window(self):
        """The layer's sliding window W: `config.window` (an int or None), or in a `Transformer`
        with `layer_windows` this layer's entry, an int32 array (0: none)."""
        window = getattr(self, "layer_window", None)
        return self.config.window if window is None else window[...]

    def merge(self, heads: Array) -> Array:
        """Stage 4, the output projection: heads `[..., T, H, Dh]` -> `[..., T, out_features]`,
        y_t = concat_h(o^h_t) W_o + b_o."""
        return _linear_general(self.out, heads, 2, (self.out.out_features,))

    # ------------------------------------------------------------- decoding

    def init_cache(self, batch_size: int, max_len: int, dtype: Optional[Any] = None) -> None:
        """Empty decoding cache (`nnx.Cache` variables) for `batch_size` sequences of up to `max_len` positions.

        Softmax attention: `cached_key`, `cached_value` `[B, max_len, K, Dh]`
        (only the K = num_kv_heads key/value heads). Linear attention: the
        recurrent state `cached_kv` `[B, K, M, Dh]` and `cached_normalizer`
        `[B, K, M]` (at least float32), in units of 2^`cached_log2_scale` `[B, K]`
        (int32; `attnjax.linear.LinearAttentionState`). Both: `cache_index`, the number of
        positions written so far (int32 scalar). `dtype` defaults to the
        module's computation dtype, else its parameter dtype.
        """
        checks.positive_int("batch_size", batch_size)
        checks.positive_int("max_len", max_len)
        dtype = jnp.dtype(dtype or self.dtype or self.param_dtype)
        if not jnp.issubdtype(dtype, jnp.floating):
            raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
        if self.config.attention_kind == "softmax":
            shape = (batch_size, max_len, self.num_kv_heads, self.head_dim)
            self.cached_key = nnx.Cache(jnp.zeros(shape, dtype))
            self.cached_value = nnx.Cache(jnp.zeros(shape, dtype))
        else:
            num_features = features_lib.num_features(self._feature_map(), self.head_dim)
            state = linear_lib.init_state(
                (batch_size,),
                self.num_kv_heads,
                num_features,
                self.head_dim,
                jnp.promote_types(dtype, jnp.float32),
            )
            self.cached_kv = nnx.Cache(state.kv)
            self.cached_normalizer = nnx.Cache(state.normalizer)
            self.cached_log2_scale = nnx.Cache(state.log2_scale)
        self.cache_index = nnx.Cache(jnp.zeros((), jnp.int32))
        self.cache_shape = (batch_size, max_len)

    def check_decode(self, batch: int, chunk: int, shape: tuple[int, ...]) -> None:
        """The cache exists, has this batch size and room for `chunk` more positions.

        Room is checked exactly when the cache index is concrete (eager calls);
        under a trace only `chunk <= max_len` can be, and an overflowing chunk
        gives NaN outputs instead of silently wrong ones.
        """
        if getattr(self, "cache_index", None) is None:
            raise ValueError(
                f"decode=True needs a cache: call init_cache(batch_size, max_len) first "
                f"(inputs of shape {shape})"
            )
        batch_size, max_len = self.cache_shape
        if batch != batch_size:
            raise ValueError(
                f"decode: inputs of shape {shape} have batch size {batch}, "
                f"the cache was initialised with batch_size={batch_size}"
            )
        index = self.cache_index[...]
        filled = None if isinstance(index, jax.core.Tracer) else int(np.max(index))
        if chunk + (filled or 0) > max_len:
            raise ValueError(
                f"decode: a chunk of {chunk} positions (inputs of shape {shape}) does not fit "
                f"in the cache of max_len={max_len} with {filled or 0} positions filled"
            )

    def _decode_linear(self, q: Array, k: Array, v: Array) -> Array:
        """The recurrent form, one position of the chunk at a time: heads `[B, C, H, Dh]`."""
        phi = self._feature_map()
        q = q / jnp.asarray(self.config.temperature, q.dtype)
        step = functools.partial(linear_lib.linear_attention_step, feature_map=phi)
        state = linear_lib.LinearAttentionState(
            self.cached_kv[...], self.cached_normalizer[...], self.cached_log2_scale[...]
        )
        inputs = (_time_major(q), _time_major(k), _time_major(v))
        state, out = jax.lax.scan(lambda s, qkv_t: step(s, *qkv_t), state, inputs)
        self.cached_kv[...], self.cached_normalizer[...], self.cached_log2_scale[...] = state
        return jnp.moveaxis(out, 0, -3)

    def decode(
        self,
        q: Array,
        k: Array,
        v: Array,
        *,
        mask: Optional[Array] = None,
        need_weights: bool = False,
        dropout_rng: Optional[Array] = None,
        attend: Optional[Callable] = None,
    ) -> tuple[Array, Optional[Array]]:
        """The decoding stage, in place of `position` and `attend` (after `init_cache`): the
        projections q `[B, C, H, Dh]`, k, v `[B, C, K, Dh]` of the next C positions ->
        (out `[B, C, H, Dh]`, weights `[B, H, C, max_len]` or None).

        With i = `cache_index`, the chunk is at positions i, ..., i+C-1: q and k are
        positioned there (`position`). Softmax attention writes k, v into cache slots
        i..i+C-1 and attends (`attend(q, keys, values, mask=, is_causal=False,
        need_weights=, dropout_rng=)`, default `self.attend`) to the whole cache with query
        i+c seeing the slots s <= i+c (and s > i+c-W with a sliding window W), combined with
        `mask` (broadcastable to `[B, H, C, max_len]`). Linear attention runs its recurrent
        state one position at a time (no mask, no weights). The index then advances by C.
        A chunk that does not fit gives NaN outputs (`check_decode` raises first when the
        index is concrete).

        Args:
          attend: a callable with `attend`'s signature that replaces it (softmax), e.g. one
            layer's edited attention (`attnjax.nn.edits.attend_fn`).
        """
        index, chunk, max_len = self.cache_index[...], q.shape[-3], self.cache_shape[1]
        q = self.position(q, index + jnp.arange(chunk))
        k = self.position(k, index + jnp.arange(k.shape[-3]))
        if self.config.attention_kind == "linear":
            out, weights = self._decode_linear(q, k, v), None
        else:
            zero = jnp.zeros((), index.dtype)
            start = (zero, index, zero, zero)
            keys = jax.lax.dynamic_update_slice(
                self.cached_key[...], k.astype(self.cached_key.dtype), start
            )
            values = jax.lax.dynamic_update_slice(
                self.cached_value[...], v.astype(self.cached_value.dtype), start
            )
            self.cached_key[...], self.cached_value[...] = keys, values
            visible = _visible_keys(index, chunk, max_len, q.ndim, self.window())
            mask = (
                visible
                if mask is None
                else masks_lib.combine_masks(jnp.asarray(mask) != 0, visible)
            )
            out, weights = (attend or self.attend)(
                q,
                keys.astype(k.dtype),
                values.astype(v.dtype),
                mask=mask,
                is_causal=False,
                need_weights=need_weights,
                dropout_rng=dropout_rng,
            )
        self.cache_index[...] = index + chunk
        return jnp.where(index + chunk <= max_len, out, jnp.nan), weights

    def __call__(
        self,
        x: Array,
        context: Optional[Array] = None,
        *,
        mask: Optional[Array] = None,
        is_causal: bool = False,
        sow_weights: bool = False,
        return_weights: bool = False,
        decode: bool = False,
        deterministic: Optional[bool] = None,
        rngs=None,
        core: Optional[Callable] = None,
        sites: Optional[Callable] = None,
    ):
        """Attend from `x` `[..., T, F]` to `context` `[..., S, F]` (default: `x`).

        The stages in turn: `project`, the sliding window added to `mask`, `position` (q at
        0..T-1, k at 0..S-1), `attend`, `merge`; when decoding `project`, `decode`, `merge`.

        Args:
          mask: boolean (or 0/1), broadcastable to `[..., H, T, S]`, True = attend.
          is_causal: apply the causal mask.
          sow_weights: store the weights `[..., H, T, S]` as an
            `nnx.Intermediate` named 'attention_weights' (collect them with
            `nnx.capture(fn, nnx.Intermediate)`).
          return_weights: return `(out, weights)` instead of `out`.
          decode: `x` `[B, C, F]` is the next chunk of C positions of the
            sequences in the cache (`init_cache`): its keys and values are
            written at the cache index, its queries attend to every cached
            position up to their own (causal whatever `is_causal`; `mask`, if
            given, broadcasts to `[B, H, C, max_len]`, and for linear
            attention must be None), and the index advances by C. Weights
            (softmax only) are `[B, H, C, max_len]`. Self-attention only.
          deterministic: True turns dropout off; None uses the constructor's.
          rngs: randomness for dropout (`nnx.Rngs`, `nnx.RngStream` or a key);
            None uses the stream forked at construction.
          core: replaces the stages between `project` and `merge` (`position` and
            `attend`, or `decode`): called as `core(module, q, k, v, *, mask, is_causal,
            decode, need_weights, dropout_rng)` with `project`'s q `[..., T, H, Dh]`, k, v
            `[..., S, K, Dh]` and the mask with the window added (full passes; a core whose
            attribute `handles_window` is True gets the mask as given and applies the
            layer's `window()` itself, as the sink cache does over cache positions), it returns
            (heads `[..., T, H, Dh]`, extra); `extra` is returned and sown in place of the
            weights (e.g. statistics), unchecked. Built from the public stages:
            `attnjax.nn.edits.core`, `attnjax.nn.statistics.core`, `attnjax.nn.sink_cache.core`.
          sites: an `attnjax.nn.sites.Sites` (full passes): called at the sites q, k, v
            (positioned), logits and weights (when it wants them), head_out and attn_out, which it
            captures or edits (`_attend_at_sites`).

        Returns:
          `[..., T, out_features]`, or `(out, weights)`.
        """
        need_weights = (
            sow_weights or return_weights or (sites is not None and sites.wants("weights"))
        )
        self._check_call(
            x, context, mask, need_weights and core is None, decode, deterministic, rngs
        )
        stage = dict(need_weights=need_weights, dropout_rng=self._dropout_rng(deterministic, rngs))
        q, k, v = self.project(x, context)
        if not (decode or getattr(core, "handles_window", False)):
            # the sliding window as a [T, S] band in the mask (decoding: in `decode`)
            mask = masks_lib.with_window(mask, self.window(), q.shape[-3], k.shape[-3], is_causal)
        if sites is not None and not decode:
            heads, weights = _attend_at_sites(
                self, sites, q, k, v, mask=mask, is_causal=is_causal, core=core, **stage
            )
        elif core is not None:
            heads, weights = core(
                self, q, k, v, mask=mask, is_causal=is_causal, decode=decode, **stage
            )
        elif decode:
            heads, weights = self.decode(q, k, v, mask=mask, **stage)
        else:
            q, k = self.position(q), self.position(k)
            heads, weights = self.attend(q, k, v, mask=mask, is_causal=is_causal, **stage)
        if sow_weights:
            self.sow(nnx.Intermediate, "attention_weights", weights)
        out = self.merge(heads)
        if sites is not None and not decode:
            out = sites("attn_out", out)
        return (out, weights) if return_weights else out

    def _check_call(self, x, context, mask, need_weights, decode, deterministic, rngs) -> None:
        """All of `__call__`'s checks (shapes and options only), before any compute."""
        if x.ndim < 2 or x.shape[-1] != self.in_features:
            raise ValueError(f"x must have shape [..., T, {self.in_features}], got {x.shape}")
        if context is not None and (
            context.ndim != x.ndim or context.shape[-1] != self.in_features
        ):
            raise ValueError(
                f"context must have shape [..., S, {self.in_features}] like x {x.shape}, got {context.shape}"
            )
        checks.boolean("decode", decode)
        checks.boolean("deterministic", deterministic, optional=True)
        checks.rngs(rngs)
        if need_weights:
            check_weights_available(self.config)
        if decode:
            self._check_decode_inputs(x, context, mask, need_weights)

    def _check_decode_inputs(self, x, context, mask, need_weights) -> None:
        if context is not None:
            raise ValueError(
                f"decode=True is self-attention only; got a context of shape {context.shape}"
            )
        if x.ndim != 3:
            raise ValueError(
                f"decode=True needs x of shape [B, C, {self.in_features}], got {x.shape}"
            )
        if self.config.attention_kind == "linear" and (mask is not None or need_weights):
            raise ValueError(
                "decoding linear attention takes no mask and gives no weights "
                f"(got mask={None if mask is None else tuple(jnp.shape(mask))}, "
                f"weights requested={need_weights})"
            )
        self.check_decode(x.shape[0], x.shape[1], x.shape)


def _attend_at_sites(module, sites, q, k, v, *, mask, is_causal, core, need_weights, dropout_rng):
    """A full pass's stages between `project` and `merge`, through the sites q, k, v (positioned),
    logits and weights (only when `sites` wants them) and head_out -> (heads `[..., T, H, Dh]`, weights).

    Without a `core`, the edited q, k and v are what `attend` reads; with one (attention edits), the
    core positions q and k itself, so q, k and v can be captured but not edited.
    """
    stage = dict(mask=mask, is_causal=is_causal, need_weights=need_weights, dropout_rng=dropout_rng)
    positioned = (module.position(q), module.position(k))
    if core is None:
        q, k, v = sites("q", positioned[0]), sites("k", positioned[1]), sites("v", v)
        positioned = (q, k)
        heads, weights = module.attend(q, k, v, **stage)
    else:
        if sites.edits_any(("q", "k", "v")):
            raise ValueError(
                "editing the sites q, k or v does not combine with attention edits (ablate_head, "
                "scale_head, remove_keys, replace_pattern): edit head_out instead"
            )
        for name, x in zip(("q", "k", "v"), (*positioned, v)):
            sites(name, x)
        heads, weights = core(module, q, k, v, decode=False, **stage)
    if sites.wants("logits"):
        scale = default_scale(module.head_dim) / module.config.temperature
        sites("logits", grouped_logits(*positioned, scale=scale))
    if sites.wants("weights"):
        sites("weights", weights)
    return sites("head_out", heads), weights
