"""Flax NNX modules built from attnjax's pure attention functions.

* `MultiHeadAttention`: Q/K/V projections (separate W_q, W_k, W_v or one fused
  W_qkv, seed 000 §6.1), optional QK normalisation (seed 000 §2.3), an
  attention function, and the output projection W_o. The module owns the
  parameters; the attention itself is the pure function it is given.
* `AttentionConfig`: the options of one attention layer, defined and
  validated once; `MultiHeadAttention(config=...)` (or its keyword
  arguments), `Block(attention=...)` and `TransformerConfig(attention=...)`
  take it whole.
* `Mlp`: two-layer GELU feed-forward network.
* `Block`: attention and MLP sub-layers with the switches that depth studies
  need: `skip`, `mlp`, `norm` in {'pre', 'post', None}, `residual_scale`.
* `Transformer` (+ `TransformerConfig`): embedding, positions, L blocks
  scanned over stacked parameters (compile time independent of depth), final
  norm and output head; optionally returns every layer's hidden states and
  attention weights. `ARCHITECTURES` / `architecture(name)`: presets of the
  block switches that depth studies compare.

Any function with `jax.nn.dot_product_attention`'s signature can do the
attention (`attention_fn`). Autoregressive decoding: `init_cache(batch_size,
max_len)` then calls with `decode=True` on chunks of one or more positions (a
K/V cache for softmax attention, the recurrent state for linear attention);
`Transformer.generate` prefills a prompt and samples. Dropout on the attention
weights and on the residual branches, off by default, with a `deterministic`
switch and explicit `rngs` as in `flax.nnx.Dropout`.

Shapes: tokens `[B, T]` (int) or features `[B, T, F]`; hidden states
`[B, T, D]`; attention weights `[B, H, T, S]`.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from typing import Any, Callable, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import checks
from attnjax import features as features_lib
from attnjax import linear as linear_lib
from attnjax import masks as masks_lib
from attnjax import rope as rope_lib
from attnjax.attention import dot_product_attention

Array = jax.Array
NORM_CHOICES = ("pre", "post", None)
QK_NORM_CHOICES = (None, "layernorm", "cosine")
POSITION_CHOICES = ("learned", "sinusoidal", None)
NORM_KINDS = ("layernorm", "rmsnorm")
HEAD_CHOICES = ("linear", "tied", None)
MLP_ACTIVATIONS = {
    "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),  # the default; GPT-2's
    "gelu": functools.partial(jax.nn.gelu, approximate=False),  # exact x Phi(x); BERT's
    "relu": jax.nn.relu,
    "swiglu": jax.nn.silu,  # gated: W_down (silu(W_gate x) * W_up x), Shazeer 2020; llama's
}
ATTENTION_KINDS = ("softmax", "linear")
FIXED_FEATURE_MAPS = {"elu_plus_one": features_lib.elu_plus_one, "relu": features_lib.relu}
RANDOM_FEATURE_MAPS = {
    "favor_plus": features_lib.favor_plus,
    "relu_random": features_lib.relu_random,
    "trig_random": features_lib.trig_random,
}


# The initialisers `nnx.Linear` and `nnx.Embed` use by default.
DEFAULT_KERNEL_INIT = nnx.nn.linear.default_kernel_init
DEFAULT_BIAS_INIT = nnx.nn.linear.default_bias_init
DEFAULT_EMBED_INIT = nnx.nn.linear.default_embed_init
POSITION_INIT_STD = 0.02  # std of the learned position table at initialisation (GPT-2, BERT)
DEFAULT_POSITION_INIT = nnx.initializers.normal(stddev=POSITION_INIT_STD)


class RandomProjection(nnx.Variable):
    """Non-trainable random feature projection `[M, Dh]` of linear attention."""


def _check_norm(norm_kind, norm_eps) -> None:
    if norm_kind not in NORM_KINDS:
        raise ValueError(f"norm_kind must be one of {NORM_KINDS}, got {norm_kind!r}")
    checks.positive_number("norm_eps", norm_eps)


def make_norm(features: int, *, kind: str = "layernorm", eps: float = 1e-6, dtype=None, param_dtype=jnp.float32,
              rngs: nnx.Rngs) -> nnx.Module:
    """LayerNorm (Ba et al. 2016; scale and bias) or RMSNorm (Zhang & Sennrich 2019; scale only) over `[..., D]`."""
    _check_norm(kind, eps)
    norm = nnx.LayerNorm if kind == "layernorm" else nnx.RMSNorm
    return norm(features, epsilon=eps, dtype=dtype, param_dtype=param_dtype, rngs=rngs)


def _check_rngs(rngs) -> None:
    if not (rngs is None or isinstance(rngs, (jax.Array, nnx.Rngs, nnx.RngStream))):
        raise TypeError(f"rngs must be an nnx.Rngs, an nnx.RngStream, a PRNG key or None, got {type(rngs).__name__}")


def _as_key(rngs) -> Optional[Array]:
    """Per-call randomness (`nnx.Rngs`, `nnx.RngStream`, a PRNG key or None) -> a key or None."""
    _check_rngs(rngs)
    if isinstance(rngs, nnx.Rngs):
        return rngs.dropout()
    if isinstance(rngs, nnx.RngStream):
        return rngs()
    return rngs


# --------------------------------------------------------------------------
# The attention-function contract: jax.nn.dot_product_attention's signature


@functools.lru_cache(maxsize=256)
def _signature_keywords(fn: Callable) -> Optional[frozenset]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume it takes what it is given
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _describe(fn: Callable) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    module = "jax.nn" if getattr(jax.nn, name, None) is fn else getattr(fn, "__module__", "?")
    return f"{name} from {module}"


def _require_keywords(fn: Callable, names: tuple[str, ...], purpose: str) -> None:
    """Raises unless `fn` takes keyword arguments `names` (its signature is read once per function)."""
    try:
        accepted = _signature_keywords(fn)
    except TypeError:  # an unhashable callable: read it uncached
        accepted = _signature_keywords.__wrapped__(fn)
    missing = [n for n in names if accepted is not None and n not in accepted]
    if missing:
        takes = ", ".join(f"{n}=" for n in missing)
        raise ValueError(
            f"{purpose} unavailable with attention_fn={_describe(fn)}: it takes no {takes}; "
            f"use attnjax.dot_product_attention (or any function that takes {takes})"
        )


def _check_weights_available(config: AttentionConfig) -> None:
    if config.attention_kind == "softmax":
        _require_keywords(config.attention_fn, ("return_weights",),
                          "attention weights (sow_weights / return_weights / return_intermediates) are")


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


def _visible_keys(index: Array, chunk: int, max_len: int, rank: int) -> Array:
    """Causal mask of a chunk at the end of the cache, `[1, ..., 1, C, max_len]` (rank `rank`).

    Query i of the chunk sits at absolute position index + i and sees cache
    slots s <= index + i: earlier positions and the chunk up to itself, never
    the unfilled slots s >= index + C.
    """
    rows = index + jnp.arange(chunk, dtype=index.dtype)[:, None]
    cols = jnp.arange(max_len, dtype=index.dtype)[None, :]
    return jnp.reshape(cols <= rows, (1,) * (rank - 2) + (chunk, max_len))


def _linear_general(layer: nnx.Linear, x: Array, num_in: int, out_shape: tuple[int, ...], *,
                    kernel: Optional[Array] = None, bias: Optional[Array] = None) -> Array:
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
    kernel = jnp.reshape(kernel, x.shape[x.ndim - num_in:] + tuple(out_shape))
    contract = (tuple(range(x.ndim - num_in, x.ndim)), tuple(range(num_in)))
    kwargs = {} if layer.preferred_element_type is None else {"preferred_element_type": layer.preferred_element_type}
    y = layer.dot_general(x, kernel, (contract, ((), ())), precision=layer.precision, **kwargs)
    if bias is not None:
        y = y + jnp.reshape(bias, (1,) * (y.ndim - len(out_shape)) + tuple(out_shape))
    return y


def _time_major(x: Array) -> Array:
    """`[B, C, h, d]` -> `[C, B, h, d]`, for scanning over positions."""
    return jnp.moveaxis(x, -3, 0)


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """The options of one attention layer (`MultiHeadAttention`); validated on construction.

    Given whole to `MultiHeadAttention(config=...)`, `Block(attention=...)` and
    `TransformerConfig(attention=...)` (every layer of the model); the keyword
    arguments of `MultiHeadAttention` override single fields. The checks that
    need the layer's head count run in `check_heads`.

    The attention is `attention_fn`, any function with the signature of
    `jax.nn.dot_product_attention` on q `[B, T, H, Dh]`, k, v `[B, S, K, Dh]`.
    The module calls

        attention_fn(q, k, v, mask=mask, is_causal=is_causal, scale=1 / (sqrt(Dh) * temperature))

    (the temperature is folded into the scale, so jax.nn's function runs
    unchanged), adding `return_weights=True` only when the weights are asked
    for (`sow_weights`, `return_weights`) and `dropout_rate=, dropout_rng=`
    only when attention dropout is active; a function that does not take
    those keywords raises a `ValueError` saying so.

    Attributes:
      num_kv_heads: K key/value heads, dividing the H query heads
        (grouped-query attention); None: K = H.
      fused_qkv: one W_qkv `[F, (H + 2K) Dh]` instead of three matrices
        (self-attention only).
      temperature: softmax temperature (> 0), folded into the scale given to
        `attention_fn`. For linear attention it divides the queries before
        the feature map, which for FAVOR+ is exactly the softmax temperature.
      normalize_qk: None, 'layernorm' (QK-norm, as `flax.nnx.MultiHeadAttention`
        with `normalize_qk=True`) or 'cosine' (q and k rescaled to norm
        sqrt(Dh), so logits are sqrt(Dh) cos(q, k)); True is stored as
        'layernorm', False as None.
      attention_kind: 'softmax' (exact, through `attention_fn`) or 'linear'
        (`attnjax.linear_attention`; weights from `linear_attention_weights`).
      attention_fn: see above; default `attnjax.dot_product_attention`. Used
        when `attention_kind='softmax'`.
      feature_map: for linear attention: 'favor_plus', 'relu_random',
        'trig_random' (random features, projection `[num_features, Dh]`
        held in a non-trainable `RandomProjection`; `redraw(key)` draws a
        new one), 'elu_plus_one' or 'relu'.
      num_features: M, the number of random features.
      rope: rotary position embedding of q and k (`attnjax.rope`): None
        (default), 'half' or 'interleaved' (needs an even Dh); positions
        count from 0, or from the cache index when decoding.
      rope_base: the rotary base (10000 in RoFormer; 1e5 in SmolLM2).
      dropout_rate: dropout on the attention weights, in [0, 1) (softmax
        attention; done by `attention_fn`). 0 (default) is off.
      kernel_init, bias_init: initialisers `fn(key, shape, dtype)` of the
        Q/K/V (or fused QKV) kernels `[F, width]` and of every bias (default:
        those of `nnx.Linear`).
      out_kernel_init: initialiser of W_o `[H Dh, out_features]` (None:
        `kernel_init`).
    """

    num_kv_heads: Optional[int] = None
    fused_qkv: bool = False
    temperature: float = 1.0
    normalize_qk: Union[bool, str, None] = None
    attention_kind: str = "softmax"
    attention_fn: Callable[..., Any] = dot_product_attention
    feature_map: str = "favor_plus"
    num_features: int = 64
    rope: Optional[str] = None
    rope_base: float = 10000.0
    dropout_rate: float = 0.0
    kernel_init: Callable = DEFAULT_KERNEL_INIT
    bias_init: Callable = DEFAULT_BIAS_INIT
    out_kernel_init: Optional[Callable] = None

    def __post_init__(self):
        if self.num_kv_heads is not None:
            checks.positive_int("num_kv_heads", self.num_kv_heads)
        checks.boolean("fused_qkv", self.fused_qkv)
        checks.positive_number("temperature", self.temperature)
        object.__setattr__(self, "normalize_qk", _normalize_qk_mode(self.normalize_qk))
        if self.attention_kind not in ATTENTION_KINDS:
            raise ValueError(f"attention_kind must be one of {ATTENTION_KINDS}, got {self.attention_kind!r}")
        names = tuple(FIXED_FEATURE_MAPS) + tuple(RANDOM_FEATURE_MAPS)
        if self.feature_map not in names:
            raise ValueError(f"feature_map must be one of {names}, got {self.feature_map!r}")
        checks.positive_int("num_features", self.num_features)
        rope_lib.check_rope(self.rope, self.rope_base)
        self._check_attention_fn()
        for name in ("kernel_init", "bias_init"):
            checks.function(name, getattr(self, name))
        checks.function("out_kernel_init", self.out_kernel_init, optional=True)

    def _check_attention_fn(self) -> None:
        """attention_fn, and dropout on the attention weights, which only softmax attention has."""
        checks.function("attention_fn", self.attention_fn)
        checks.rate("dropout_rate", self.dropout_rate)
        if self.attention_kind == "softmax":
            _require_keywords(self.attention_fn, ("mask", "is_causal", "scale"), "attention is")
            if self.dropout_rate > 0:
                _require_keywords(self.attention_fn, ("dropout_rate", "dropout_rng"), "attention dropout is")
        elif self.dropout_rate > 0:
            raise ValueError(f"dropout on the attention weights needs attention_kind='softmax', "
                             f"got attention_kind={self.attention_kind!r} with dropout_rate={self.dropout_rate}")

    def check_heads(self, num_heads: int, head_dim: int) -> None:
        """The checks that need the layer's shape: K divides H, and rope needs an even head dim Dh."""
        if self.num_kv_heads is not None:
            checks.divisible("num_heads", num_heads, "num_kv_heads", self.num_kv_heads)
        if self.rope is not None and head_dim % 2:
            raise ValueError(f"rope needs an even head dim, got head dim {head_dim} (num_heads={num_heads})")

    def kv_heads(self, num_heads: int) -> int:
        """K, the number of key/value heads of a layer with `num_heads` query heads."""
        return num_heads if self.num_kv_heads is None else self.num_kv_heads


ATTENTION_OPTIONS = tuple(f.name for f in dataclasses.fields(AttentionConfig))


def _attention_config(config: Optional[AttentionConfig], options: dict) -> AttentionConfig:
    """`config` (default `AttentionConfig()`) with the fields in `options` replaced."""
    if config is None:
        config = AttentionConfig()
    elif not isinstance(config, AttentionConfig):
        raise TypeError(f"config must be an AttentionConfig, got {type(config).__name__}")
    unknown = [name for name in options if name not in ATTENTION_OPTIONS]
    if unknown:
        raise TypeError(f"MultiHeadAttention got unknown keyword argument(s) {', '.join(unknown)}; "
                        f"valid: the AttentionConfig fields {', '.join(ATTENTION_OPTIONS)}")
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
        qkv_features = in_features if qkv_features is None else qkv_features
        out_features = in_features if out_features is None else out_features
        for name, value in (("in_features", in_features), ("num_heads", num_heads),
                            ("qkv_features", qkv_features), ("out_features", out_features)):
            checks.positive_int(name, value)
        checks.divisible("qkv_features", qkv_features, "num_heads", num_heads)
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
            self.projection = RandomProjection(self._draw_projection(rngs.params(), config.num_features))
        linear = lambda i, o, init=config.kernel_init: nnx.Linear(  # noqa: E731
            i, o, use_bias=use_bias, kernel_init=init, bias_init=config.bias_init,
            dtype=dtype, param_dtype=param_dtype, rngs=rngs,
        )
        q_width, kv_width = num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        if config.fused_qkv:
            self.qkv = linear(in_features, q_width + 2 * kv_width)
        else:
            self.query = linear(in_features, q_width)
            self.key = linear(in_features, kv_width)
            self.value = linear(in_features, kv_width)
        if config.normalize_qk == "layernorm":
            norm = lambda: nnx.LayerNorm(  # noqa: E731
                self.head_dim, use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs
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
            raise ValueError(f"redraw needs random features; this module uses {self.config.attention_kind!r} "
                             f"attention with feature_map={self.config.feature_map!r}")
        self.projection[...] = self._draw_projection(key, self.projection.shape[-2])

    def _feature_map(self) -> Callable:
        if self.config.feature_map in FIXED_FEATURE_MAPS:
            return FIXED_FEATURE_MAPS[self.config.feature_map]
        return RANDOM_FEATURE_MAPS[self.config.feature_map](self.projection[...])

    # ------------------------------------------------------------ attention

    def _dropout_rng(self, deterministic: Optional[bool], rngs) -> Optional[Array]:
        """The key for attention dropout, or None when it is off (rate 0 or deterministic)."""
        deterministic = self.deterministic if deterministic is None else deterministic
        if self.config.dropout_rate == 0 or deterministic:
            return None
        key = _as_key(rngs)
        return self.rngs() if key is None else key

    def _attend(self, q, k, v, mask, is_causal, need_weights, dropout_rng=None):
        """Heads `[..., T, H, Dh]` -> (out `[..., T, H, Dh]`, weights `[..., H, T, S]` or None)."""
        if self.config.attention_kind == "softmax":
            scale = 1.0 / (math.sqrt(self.head_dim) * self.config.temperature)
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
            weights = linear_lib.linear_attention_weights(q, k, feature_map=phi, is_causal=is_causal, mask=mask)
        return out, weights

    def _project(self, x: Array, context: Optional[Array]) -> tuple[Array, Array, Array]:
        """x `[..., T, F]`, context `[..., S, F]` -> q `[..., T, H, Dh]`, k, v `[..., S, K, Dh]`.

        Self-attention computes q, k and v as one product with the three
        kernels side by side (`[F, (H + 2K) Dh]`; the parameters stay
        separate): one larger matmul and one input gradient instead of three
        of each, which trains faster (an AdamW step of the rank-collapse
        model, L=8 B=64 T=33, went from 1.02x to 0.89x flax's time).
        """
        heads = lambda layer, y, n, **kw: _linear_general(layer, y, 1, (n, self.head_dim), **kw)  # noqa: E731
        split = (self.num_heads, self.num_heads + self.num_kv_heads)
        if self.config.fused_qkv:
            if context is not None:
                raise ValueError("fused_qkv=True supports self-attention only; got a context")
            q, k, v = jnp.split(heads(self.qkv, x, self.num_heads + 2 * self.num_kv_heads), split, axis=-2)
        elif context is None:
            layers = (self.query, self.key, self.value)
            kernel = jnp.concatenate([layer.kernel[...] for layer in layers], axis=-1)
            bias = None if self.query.bias is None else jnp.concatenate([layer.bias[...] for layer in layers])
            qkv = heads(self.query, x, self.num_heads + 2 * self.num_kv_heads, kernel=kernel, bias=bias)
            q, k, v = jnp.split(qkv, split, axis=-2)
        else:
            q = heads(self.query, x, self.num_heads)
            k, v = heads(self.key, context, self.num_kv_heads), heads(self.value, context, self.num_kv_heads)
        if self.config.normalize_qk == "layernorm":
            q, k = self.query_ln(q), self.key_ln(k)
        elif self.config.normalize_qk == "cosine":
            q, k = cosine_normalize(q), cosine_normalize(k)
        return q, k, v

    def _rotate(self, q: Array, k: Array, offset) -> tuple[Array, Array]:
        """Rotary embedding of q `[..., T, H, Dh]` at offset..offset+T-1 and k `[..., S, K, Dh]` at
        offset..offset+S-1."""
        if self.config.rope is None:
            return q, k
        rotate = functools.partial(rope_lib.rotary_embedding, base=self.config.rope_base, layout=self.config.rope)
        return (rotate(q, offset + jnp.arange(q.shape[-3])), rotate(k, offset + jnp.arange(k.shape[-3])))

    # ------------------------------------------------------------- decoding

    def init_cache(self, batch_size: int, max_len: int, dtype: Optional[Any] = None) -> None:
        """Empty decoding cache (`nnx.Cache` variables) for `batch_size` sequences of up to `max_len` positions.

        Softmax attention: `cached_key`, `cached_value` `[B, max_len, K, Dh]`
        (only the K = num_kv_heads key/value heads). Linear attention: the
        recurrent state `cached_kv` `[B, K, M, Dh]` and `cached_normalizer`
        `[B, K, M]` (at least float32). Both: `cache_index`, the number of
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
            state = linear_lib.init_state((batch_size,), self.num_kv_heads, num_features, self.head_dim,
                                          jnp.promote_types(dtype, jnp.float32))
            self.cached_kv = nnx.Cache(state.kv)
            self.cached_normalizer = nnx.Cache(state.normalizer)
        self.cache_index = nnx.Cache(jnp.zeros((), jnp.int32))
        self.cache_shape = (batch_size, max_len)

    def _check_decode(self, batch: int, chunk: int, shape: tuple[int, ...]) -> None:
        """The cache exists, has this batch size and room for `chunk` more positions.

        Room is checked exactly when the cache index is concrete (eager calls);
        under a trace only `chunk <= max_len` can be, and an overflowing chunk
        gives NaN outputs instead of silently wrong ones.
        """
        if getattr(self, "cache_index", None) is None:
            raise ValueError(f"decode=True needs a cache: call init_cache(batch_size, max_len) first "
                             f"(inputs of shape {shape})")
        batch_size, max_len = self.cache_shape
        if batch != batch_size:
            raise ValueError(f"decode: inputs of shape {shape} have batch size {batch}, "
                             f"the cache was initialised with batch_size={batch_size}")
        index = self.cache_index[...]
        filled = None if isinstance(index, jax.core.Tracer) else int(np.max(index))
        if chunk + (filled or 0) > max_len:
            raise ValueError(f"decode: a chunk of {chunk} positions (inputs of shape {shape}) does not fit "
                             f"in the cache of max_len={max_len} with {filled or 0} positions filled")

    def _decode_linear(self, q: Array, k: Array, v: Array) -> Array:
        """The recurrent form, one position of the chunk at a time: heads `[B, C, H, Dh]`."""
        phi = self._feature_map()
        q = q / jnp.asarray(self.config.temperature, q.dtype)
        step = functools.partial(linear_lib.linear_attention_step, feature_map=phi)
        state = linear_lib.LinearAttentionState(self.cached_kv[...], self.cached_normalizer[...])
        inputs = (_time_major(q), _time_major(k), _time_major(v))
        state, out = jax.lax.scan(lambda s, qkv_t: step(s, *qkv_t), state, inputs)
        self.cached_kv[...], self.cached_normalizer[...] = state
        return jnp.moveaxis(out, 0, -3)

    def _decode(self, q, k, v, mask, need_weights, dropout_rng):
        """Write the chunk's k, v at the cache index, attend to the cache, advance the index."""
        index, chunk, max_len = self.cache_index[...], q.shape[-3], self.cache_shape[1]
        if self.config.attention_kind == "linear":
            out, weights = self._decode_linear(q, k, v), None
        else:
            zero = jnp.zeros((), index.dtype)
            start = (zero, index, zero, zero)
            keys = jax.lax.dynamic_update_slice(self.cached_key[...], k.astype(self.cached_key.dtype), start)
            values = jax.lax.dynamic_update_slice(self.cached_value[...], v.astype(self.cached_value.dtype), start)
            self.cached_key[...], self.cached_value[...] = keys, values
            visible = _visible_keys(index, chunk, max_len, q.ndim)
            mask = visible if mask is None else masks_lib.combine_masks(jnp.asarray(mask) != 0, visible)
            out, weights = self._attend(q, keys.astype(k.dtype), values.astype(v.dtype), mask, False,
                                        need_weights, dropout_rng)
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
    ):
        """Attend from `x` `[..., T, F]` to `context` `[..., S, F]` (default: `x`).

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

        Returns:
          `[..., T, out_features]`, or `(out, weights)`.
        """
        need_weights = sow_weights or return_weights
        self._check_call(x, context, mask, need_weights, decode, deterministic, rngs)
        dropout_rng = self._dropout_rng(deterministic, rngs)
        q, k, v = self._project(x, context)
        q, k = self._rotate(q, k, self.cache_index[...] if decode else 0)
        if decode:
            heads_out, weights = self._decode(q, k, v, mask, need_weights, dropout_rng)
        else:
            heads_out, weights = self._attend(q, k, v, mask, is_causal, need_weights, dropout_rng)
        if sow_weights:
            self.sow(nnx.Intermediate, "attention_weights", weights)
        out = _linear_general(self.out, heads_out, 2, (self.out.out_features,))
        return (out, weights) if return_weights else out

    def _check_call(self, x, context, mask, need_weights, decode, deterministic, rngs) -> None:
        """All of `__call__`'s checks (shapes and options only), before any compute."""
        if x.ndim < 2 or x.shape[-1] != self.in_features:
            raise ValueError(f"x must have shape [..., T, {self.in_features}], got {x.shape}")
        if context is not None and (context.ndim != x.ndim or context.shape[-1] != self.in_features):
            raise ValueError(
                f"context must have shape [..., S, {self.in_features}] like x {x.shape}, got {context.shape}"
            )
        checks.boolean("decode", decode)
        checks.boolean("deterministic", deterministic, optional=True)
        _check_rngs(rngs)
        if need_weights:
            _check_weights_available(self.config)
        if decode:
            self._check_decode_inputs(x, context, mask, need_weights)

    def _check_decode_inputs(self, x, context, mask, need_weights) -> None:
        if context is not None:
            raise ValueError(f"decode=True is self-attention only; got a context of shape {context.shape}")
        if x.ndim != 3:
            raise ValueError(f"decode=True needs x of shape [B, C, {self.in_features}], got {x.shape}")
        if self.config.attention_kind == "linear" and (mask is not None or need_weights):
            raise ValueError("decoding linear attention takes no mask and gives no weights "
                             f"(got mask={None if mask is None else tuple(jnp.shape(mask))}, "
                             f"weights requested={need_weights})")
        self._check_decode(x.shape[0], x.shape[1], x.shape)


class Mlp(nnx.Module):
    """Feed-forward network `[..., D] -> [..., D]`.

    activation 'gelu_tanh' (default), 'gelu' (exact) or 'relu':
        W_2 act(W_1 x + b_1) + b_2                       (params fc1, fc2)
    activation 'swiglu' (Shazeer 2020, "GLU variants improve transformer"):
        W_down (silu(W_gate x) * W_up x)                 (params gate, up, down)
    `use_bias=False` drops every bias.
    """

    def __init__(self, features: int, hidden_features: int, *, activation: str = "gelu_tanh", use_bias: bool = True,
                 dtype=None, param_dtype=jnp.float32, rngs: nnx.Rngs):
        checks.positive_int("features", features)
        checks.positive_int("hidden_features", hidden_features)
        if activation not in MLP_ACTIVATIONS:
            raise ValueError(f"mlp_activation must be one of {tuple(MLP_ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        linear = lambda i, o: nnx.Linear(i, o, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype,  # noqa: E731
                                         rngs=rngs)
        if activation == "swiglu":
            self.gate, self.up = linear(features, hidden_features), linear(features, hidden_features)
            self.down = linear(hidden_features, features)
        else:
            self.fc1, self.fc2 = linear(features, hidden_features), linear(hidden_features, features)

    def __call__(self, x: Array) -> Array:
        act = MLP_ACTIVATIONS[self.activation]
        if self.activation == "swiglu":
            return self.down(act(self.gate(x)) * self.up(x))
        return self.fc2(act(self.fc1(x)))


class Block(nnx.Module):
    """One transformer layer with switchable skip connections, MLP and norm placement.

    For each sub-layer f (attention, then the MLP if `mlp`), with d = dropout:
      norm='pre':  x <- x + a d(f(LN(x)))   (skip)   or  d(f(LN(x)))   (no skip)
      norm='post': x <- LN(x + a d(f(x)))   (skip)   or  LN(d(f(x)))   (no skip)
      norm=None:   x <- x + a d(f(x))       (skip)   or  d(f(x))       (no skip)
    with a = `residual_scale` (e.g. 1/sqrt(L), Noci et al. 2022, "Signal
    propagation in transformers"). Attention only without skip (`skip=False,
    mlp=False, norm=None`) is the pure-attention network of Dong et al. 2021,
    whose token representations collapse to rank one with depth.

    Args:
      features: D, the hidden width.
      num_heads: attention heads.
      attention: the options of the attention sub-layer (`AttentionConfig`:
        key/value heads, temperature, attention kind and function, RoPE,
        dropout on the attention weights, ...).
      mlp_features: hidden width of the MLP (default 4 D).
      mlp_activation: see `Mlp` ('gelu_tanh', 'gelu', 'relu', 'swiglu').
      norm_kind: 'layernorm' or 'rmsnorm' (the LN above); norm_eps its epsilon.
      use_bias: biases in the attention projections and the MLP.
      dropout_rate: dropout d on each sub-layer's output, before the residual
        add (`nnx.Dropout`), in [0, 1); 0 (default) is off. (Dropout on the
        attention weights is `attention.dropout_rate`.)
      deterministic: default for the call's `deterministic` (True: no dropout).
      rngs: `nnx.Rngs`; with dropout, 'dropout' (or default) streams are forked from it.
    """

    def __init__(
        self,
        features: int,
        num_heads: int,
        *,
        attention: AttentionConfig = AttentionConfig(),
        skip: bool = True,
        mlp: bool = True,
        norm: Optional[str] = "pre",
        residual_scale: float = 1.0,
        mlp_features: Optional[int] = None,
        mlp_activation: str = "gelu_tanh",
        norm_kind: str = "layernorm",
        norm_eps: float = 1e-6,
        use_bias: bool = True,
        dropout_rate: float = 0.0,
        deterministic: bool = False,
        dtype=None,
        param_dtype=jnp.float32,
        rngs: nnx.Rngs,
    ):
        if norm not in NORM_CHOICES:
            raise ValueError(f"norm must be one of {NORM_CHOICES}, got {norm!r}")
        _check_norm(norm_kind, norm_eps)
        checks.rate("dropout_rate", dropout_rate)
        if not isinstance(attention, AttentionConfig):
            raise TypeError(f"attention must be an AttentionConfig, got {type(attention).__name__}")
        self.skip, self.use_mlp, self.norm, self.residual_scale = skip, mlp, norm, residual_scale
        self.attention = MultiHeadAttention(
            features, num_heads, config=attention, deterministic=deterministic, use_bias=use_bias,
            dtype=dtype, param_dtype=param_dtype, rngs=rngs,
        )
        layer_norm = functools.partial(make_norm, features, kind=norm_kind, eps=norm_eps, dtype=dtype,
                                       param_dtype=param_dtype, rngs=rngs)
        if norm is not None:
            self.attention_norm = layer_norm()
        if mlp:
            self.mlp = Mlp(features, mlp_features or 4 * features, activation=mlp_activation, use_bias=use_bias,
                           dtype=dtype, param_dtype=param_dtype, rngs=rngs)
            if norm is not None:
                self.mlp_norm = layer_norm()
        self.dropout = nnx.Dropout(dropout_rate, deterministic=deterministic, rngs=rngs) if dropout_rate > 0 else None

    def _sublayer(self, x: Array, branch: Callable[[Array], Array], layer_norm, deterministic, key) -> Array:
        def dropped(h):
            y = branch(h)
            return y if self.dropout is None else self.dropout(y, deterministic=deterministic, rngs=key)

        if self.norm == "pre":
            y = dropped(layer_norm(x))
            return x + self.residual_scale * y if self.skip else y
        y = dropped(x)
        y = x + self.residual_scale * y if self.skip else y
        return layer_norm(y) if self.norm == "post" else y

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
    ):
        """x `[..., T, D]` -> (x `[..., T, D]`, weights `[..., H, T, S]` or None).

        Weights are computed only when `return_weights` is set, so the default
        keeps the fast attention path. `decode`, `deterministic`, `rngs`: see
        `MultiHeadAttention.__call__` (one key from `rngs` is split between
        the attention and the two residual dropouts).
        """
        key = _as_key(rngs)
        keys = [None] * 3 if key is None else [jax.random.fold_in(key, i) for i in range(3)]
        weights = []

        def attend(h):
            out = self.attention(h, mask=mask, is_causal=is_causal, return_weights=return_weights,
                                 decode=decode, deterministic=deterministic, rngs=keys[0])
            if return_weights:
                out, w = out
                weights.append(w)
            return out

        x = self._sublayer(x, attend, getattr(self, "attention_norm", None), deterministic, keys[1])
        if self.use_mlp:
            x = self._sublayer(x, self.mlp, getattr(self, "mlp_norm", None), deterministic, keys[2])
        return x, (weights[0] if return_weights else None)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Everything that defines a `Transformer`; validated on construction.

    Attributes:
      num_layers: L >= 1.
      features: hidden width D, divisible by `num_heads`.
      num_heads: H attention heads.
      vocab_size: token vocabulary (integer inputs `[B, T]`), or None for
        real-valued inputs `[B, T, input_features]` with a linear input projection.
      input_features: width of real-valued inputs (when `vocab_size` is None).
      output_features: width of the output head (default `vocab_size`, else D).
      max_len: longest sequence (learned positions need it).
      positions: 'learned', 'sinusoidal' or None (e.g. with `attention.rope`).
      type_vocab_size: number of token types (BERT's segment embeddings,
        added to the token embedding); None: no token types.
      embedding_norm: a norm after embedding + positions + types (BERT).
      skip, mlp, norm, residual_scale: see `Block`; residual_scale may be
        the string 'inv_sqrt_depth' for 1/sqrt(L).
      norm_kind, norm_eps: 'layernorm' or 'rmsnorm' and its epsilon, for
        every norm of the model (blocks, embedding, final).
      final_norm: a norm before the head.
      head: 'linear' (default, a Linear to `out_features`), 'tied' (logits
        x E^T with the token embedding E) or None (the model returns hidden
        states `[B, T, D]`, as an encoder).
      causal: causal self-attention.
      attention: the options of every attention layer (`AttentionConfig`;
        its `num_kv_heads` divides `num_heads`, and `rope` needs an even
        head dim D / H).
      use_bias: biases in the attention projections and MLPs.
      dropout_rate, deterministic: see `Block`.
      embedding_init: initialiser of the token embedding `[vocab_size, D]`
        (or of the input projection kernel `[input_features, D]`); None: the
        layer's default (`nnx.Embed`'s, or `nnx.Linear`'s).
      position_init: initialiser of the learned position table `[max_len, D]`.
      mlp_features: MLP hidden width (default 4 D).
      mlp_activation: see `Mlp`.
      dtype, param_dtype: computation and parameter dtypes.
    """

    num_layers: int = 2
    features: int = 64
    num_heads: int = 4
    vocab_size: Optional[int] = None
    input_features: Optional[int] = None
    output_features: Optional[int] = None
    max_len: int = 512
    positions: Optional[str] = "learned"
    type_vocab_size: Optional[int] = None
    embedding_norm: bool = False
    skip: bool = True
    mlp: bool = True
    norm: Optional[str] = "pre"
    residual_scale: Union[float, str] = 1.0
    norm_kind: str = "layernorm"
    norm_eps: float = 1e-6
    final_norm: bool = True
    head: Optional[str] = "linear"
    causal: bool = False
    attention: AttentionConfig = AttentionConfig()
    use_bias: bool = True
    dropout_rate: float = 0.0
    deterministic: bool = False
    embedding_init: Optional[Callable] = None
    position_init: Callable = DEFAULT_POSITION_INIT
    mlp_features: Optional[int] = None
    mlp_activation: str = "gelu_tanh"
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def __post_init__(self):
        for name in ("num_layers", "features", "num_heads", "max_len"):
            checks.positive_int(name, getattr(self, name))
        checks.divisible("features", self.features, "num_heads", self.num_heads)
        if not isinstance(self.attention, AttentionConfig):
            raise TypeError(f"attention must be an AttentionConfig, got {type(self.attention).__name__}")
        self.attention.check_heads(self.num_heads, self.features // self.num_heads)
        if (self.vocab_size is None) == (self.input_features is None):
            raise ValueError(
                "give exactly one of vocab_size (token inputs) or input_features (real-valued inputs), "
                f"got vocab_size={self.vocab_size}, input_features={self.input_features}"
            )
        if self.norm not in NORM_CHOICES:
            raise ValueError(f"norm must be one of {NORM_CHOICES}, got {self.norm!r}")
        if self.positions not in POSITION_CHOICES:
            raise ValueError(f"positions must be one of {POSITION_CHOICES}, got {self.positions!r}")
        self._check_embedding_and_head()
        _check_norm(self.norm_kind, self.norm_eps)
        if self.mlp_activation not in MLP_ACTIVATIONS:
            raise ValueError(f"mlp_activation must be one of {tuple(MLP_ACTIVATIONS)}, got {self.mlp_activation!r}")
        checks.rate("dropout_rate", self.dropout_rate)
        checks.boolean("deterministic", self.deterministic)
        checks.function("embedding_init", self.embedding_init, optional=True)
        checks.function("position_init", self.position_init)
        if isinstance(self.residual_scale, str) and self.residual_scale != "inv_sqrt_depth":
            raise ValueError(f"residual_scale must be a number or 'inv_sqrt_depth', got {self.residual_scale!r}")

    def _check_embedding_and_head(self) -> None:
        if self.type_vocab_size is not None:
            checks.positive_int("type_vocab_size", self.type_vocab_size)
        if self.head not in HEAD_CHOICES:
            raise ValueError(f"head must be one of {HEAD_CHOICES}, got {self.head!r}")
        if self.head == "tied" and (self.vocab_size is None or self.output_features not in (None, self.vocab_size)):
            raise ValueError(f"head='tied' needs token inputs and output_features=vocab_size, got "
                             f"vocab_size={self.vocab_size}, output_features={self.output_features}")
        if self.head is None and self.output_features not in (None, self.features):
            raise ValueError(f"head=None returns hidden states of width features={self.features}, "
                             f"got output_features={self.output_features}")

    @property
    def branch_scale(self) -> float:
        """The numeric residual scale a (1/sqrt(L) for 'inv_sqrt_depth')."""
        if self.residual_scale == "inv_sqrt_depth":
            return 1.0 / math.sqrt(self.num_layers)
        return float(self.residual_scale)

    @property
    def out_features(self) -> int:
        if self.head is None:
            return self.features
        if self.output_features is not None:
            return self.output_features
        return self.vocab_size if self.vocab_size is not None else self.features


# Presets of the skip / MLP / norm switches (`Block`) that depth studies compare.
ARCHITECTURES = {
    "attention_only": dict(skip=False, mlp=False, norm=None),  # Dong et al. 2021: collapses to rank one
    "attention_mlp": dict(skip=False, mlp=True, norm=None),
    "skip": dict(skip=True, mlp=False, norm=None),
    "skip_mlp": dict(skip=True, mlp=True, norm="pre"),
    "post_ln": dict(skip=True, mlp=True, norm="post"),
    # The `skip` network with its residual branch scaled by 1/sqrt(L) (Noci et al.
    # 2022). Without MLP and norm, so that the comparison with `skip` isolates
    # the scaling (a GELU MLP adds the same vector to every token at
    # initialisation, which lowers the residual whatever attention does).
    "skip_scaled": dict(skip=True, mlp=False, norm=None, residual_scale="inv_sqrt_depth"),
}


def architecture(name: str) -> dict:
    """The `TransformerConfig` keyword arguments of the preset `name` (a key of `ARCHITECTURES`)."""
    if name not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {tuple(ARCHITECTURES)}, got {name!r}")
    return dict(ARCHITECTURES[name])


def has_skip(name: str) -> bool:
    """Whether the preset `name` has skip connections."""
    return architecture(name)["skip"]


def sinusoidal_positions(length: int, features: int, offset: Union[int, Array] = 0, dtype=jnp.float32) -> Array:
    """Sinusoidal position table `[length, features]` of positions offset..offset+length-1
    (Vaswani et al. 2017, §3.5), computed in `dtype`; `offset` may be traced (decoding)."""
    position = (jnp.arange(length) + offset).astype(dtype)[:, None]
    half = features // 2
    rates = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=dtype) / max(half, 1))[None, :]
    table = jnp.concatenate([jnp.sin(position * rates), jnp.cos(position * rates)], axis=-1)
    return jnp.pad(table, ((0, 0), (0, features - 2 * half)))


def _make_block(config: TransformerConfig, rngs: nnx.Rngs) -> Block:
    return Block(
        config.features,
        config.num_heads,
        attention=config.attention,
        skip=config.skip,
        mlp=config.mlp,
        norm=config.norm,
        residual_scale=config.branch_scale,
        mlp_features=config.mlp_features,
        mlp_activation=config.mlp_activation,
        norm_kind=config.norm_kind,
        norm_eps=config.norm_eps,
        use_bias=config.use_bias,
        dropout_rate=config.dropout_rate,
        deterministic=config.deterministic,
        dtype=config.dtype,
        param_dtype=config.param_dtype,
        rngs=rngs,
    )


# Depths up to this run the layer scan unrolled (`nnx.scan(..., unroll=True)`).
# On a CPU the rolled scan's backward pass zero-fills, writes and copies
# stacked residuals `[L, B, H, T, S]`, `[L, B, T, 4D]`, ... every step:
# AdamW steps of an L=8, D=64, B=64, T=33 model took 1.3-1.45x the time of
# the unrolled scan (same process, interleaved; profile: ~40% of the step's
# op time in broadcast, dynamic-update-slice and copy ops), and 1.25x at L=4,
# B=8, T=512. Unrolling costs compile time (1.4-1.8x at L=8), so deeper
# models keep the rolled scan, whose compile time does not grow with depth.
UNROLL_MAX_LAYERS = 8


class Transformer(nnx.Module):
    """Embedding -> positions -> L scanned `Block`s -> final norm -> head.

    The L blocks' parameters are stacked on a leading axis and the forward pass
    is an `nnx.scan` over them, so compile time does not grow with depth
    (the scan is unrolled for L <= `UNROLL_MAX_LAYERS`, which trains faster).
    So are the decoding caches (`init_cache`): each layer's cache `[L, ...]`.
    """

    def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
        self.config = config
        kw = dict(dtype=config.dtype, param_dtype=config.param_dtype, rngs=rngs)
        if config.vocab_size is not None:
            init = config.embedding_init or DEFAULT_EMBED_INIT
            self.embed = nnx.Embed(config.vocab_size, config.features, embedding_init=init, **kw)
        else:
            init = config.embedding_init or DEFAULT_KERNEL_INIT
            self.embed = nnx.Linear(config.input_features, config.features, kernel_init=init, **kw)
        if config.positions == "learned":
            shape = (config.max_len, config.features)
            self.position_table = nnx.Param(config.position_init(rngs.params(), shape, config.param_dtype))
        if config.type_vocab_size is not None:
            self.type_embed = nnx.Embed(config.type_vocab_size, config.features, **kw)
        if config.embedding_norm:
            self.embed_norm = make_norm(config.features, kind=config.norm_kind, eps=config.norm_eps, **kw)

        @nnx.split_rngs(splits=config.num_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make_blocks(rngs):
            return _make_block(config, rngs)

        self.blocks = make_blocks(rngs)
        norm = functools.partial(make_norm, config.features, kind=config.norm_kind, eps=config.norm_eps, **kw)
        if config.final_norm:
            self.final_norm = norm()
        if config.head == "linear":
            self.head = nnx.Linear(config.features, config.out_features, **kw)

    def redraw(self, key: Array) -> None:
        """New random feature projections for every layer (linear attention), one key per layer."""
        attention = self.blocks.attention
        if not hasattr(attention, "projection"):
            raise ValueError("redraw needs linear attention with random features "
                             f"(attention_kind={self.config.attention.attention_kind!r}, "
                             f"feature_map={self.config.attention.feature_map!r})")
        keys = jax.random.split(key, self.config.num_layers)
        num_features = attention.projection.shape[-2]
        head_dim = self.config.features // self.config.num_heads
        draw = lambda k: features_lib.orthogonal_random_matrix(k, num_features, head_dim)  # noqa: E731
        attention.projection[...] = jax.vmap(draw)(keys)

    def _check_inputs(self, inputs: Array) -> None:
        config = self.config
        if config.vocab_size is not None:
            if inputs.ndim != 2 or not jnp.issubdtype(inputs.dtype, jnp.integer):
                raise ValueError(f"inputs must be integer tokens [B, T], got {inputs.dtype} {inputs.shape}")
        elif inputs.ndim != 3 or inputs.shape[-1] != config.input_features:
            raise ValueError(f"inputs must have shape [B, T, {config.input_features}], got {inputs.shape}")
        if inputs.shape[1] > config.max_len and config.positions == "learned":
            raise ValueError(f"sequence length {inputs.shape[1]} exceeds max_len {config.max_len}")

    def _check_token_types(self, inputs: Array, token_type_ids: Optional[Array]) -> None:
        if token_type_ids is None:
            return
        if self.config.type_vocab_size is None:
            raise ValueError("token_type_ids given, but the model has no token types "
                             "(TransformerConfig.type_vocab_size)")
        if token_type_ids.shape != inputs.shape[:2] or not jnp.issubdtype(token_type_ids.dtype, jnp.integer):
            raise ValueError(f"token_type_ids must be integers of shape [B, T] = {inputs.shape[:2]}, "
                             f"got {token_type_ids.dtype} {token_type_ids.shape}")

    def _embed(self, inputs: Array, offset: Union[int, Array] = 0, token_type_ids: Optional[Array] = None) -> Array:
        """Embedding plus the positions offset..offset+T-1 (offset: the cache index when decoding),
        plus token types (type 0 when not given), then the embedding norm, if any."""
        config, length = self.config, inputs.shape[1]
        x = self.embed(inputs)
        if config.positions == "learned":
            table = jax.lax.dynamic_slice_in_dim(self.position_table[...], offset, length, axis=0)
            x = x + table[None].astype(x.dtype)
        elif config.positions == "sinusoidal":
            table = sinusoidal_positions(length, config.features, offset, jnp.promote_types(x.dtype, jnp.float32))
            x = x + table[None].astype(x.dtype)
        if config.type_vocab_size is not None:
            types = jnp.zeros(inputs.shape[:2], jnp.int32) if token_type_ids is None else token_type_ids
            x = x + self.type_embed(types)
        return self.embed_norm(x) if config.embedding_norm else x

    def _head(self, h: Array) -> Array:
        """Final norm and output head: `[B, T, D]` -> `[B, T, out_features]`."""
        h = self.final_norm(h) if self.config.final_norm else h
        if self.config.head == "tied":
            return self.embed.attend(h)
        return self.head(h) if self.config.head == "linear" else h

    # ------------------------------------------------------------- decoding

    def init_cache(self, batch_size: int, max_len: int, dtype: Optional[Any] = None) -> None:
        """Empty decoding caches of every layer, stacked `[L, ...]` (see `MultiHeadAttention.init_cache`)."""
        checks.positive_int("max_len", max_len)
        if self.config.positions == "learned" and max_len > self.config.max_len:
            raise ValueError(f"max_len={max_len} exceeds the learned position table's "
                             f"TransformerConfig.max_len={self.config.max_len}")

        @nnx.vmap(in_axes=(0,), out_axes=None)
        def init(block):
            block.attention.init_cache(batch_size, max_len, dtype)

        init(self.blocks)

    def _decode_offset(self, inputs: Array) -> Array:
        """Validates a decoding call; returns the cache index (the chunk's first position)."""
        if not self.config.causal:
            raise ValueError("decode=True needs a causal model (TransformerConfig.causal=True)")
        attention = self.blocks.attention
        attention._check_decode(inputs.shape[0], inputs.shape[1], inputs.shape)
        return attention.cache_index[...][0]

    def __call__(
        self,
        inputs: Array,
        *,
        mask: Optional[Array] = None,
        token_type_ids: Optional[Array] = None,
        return_intermediates: bool = False,
        decode: bool = False,
        deterministic: Optional[bool] = None,
        rngs=None,
    ):
        """Forward pass.

        Args:
          inputs: tokens `[B, T]` (int) or features `[B, T, input_features]`.
          mask: optional boolean attention mask broadcastable to `[B, H, T, T]`
            (combined with the causal mask when `config.causal`; when decoding,
            to `[B, H, T, max_len]`), e.g. `attnjax.key_padding_mask(valid=...)`.
          token_type_ids: integer `[B, T]` token types (models with
            `type_vocab_size`; default all 0).
          return_intermediates: also return a dict with 'hidden' `[L + 1, B, T, D]`
            (index 0 is the input to the first block, index l the output of
            block l) and 'attention' `[L, B, H, T, T]` (`[L, B, H, T, max_len]`
            when decoding).
          decode: `inputs` are the next T positions of the sequences in the
            caches (`init_cache`; causal models only): positions are offset
            by the cache index, every layer attends to its cache and advances.
          deterministic: True turns dropout off; None uses the modules' own.
          rngs: randomness for dropout (`nnx.Rngs`, `nnx.RngStream` or a key,
            split over layers); None uses the streams forked at construction.

        Returns:
          logits `[B, T, out_features]` (hidden states `[B, T, D]` when
          `config.head` is None), or `(logits, intermediates)`.
        """
        self._check_inputs(inputs)
        self._check_token_types(inputs, token_type_ids)
        checks.boolean("decode", decode)
        checks.boolean("deterministic", deterministic, optional=True)
        if return_intermediates:
            _check_weights_available(self.config.attention)
        offset = self._decode_offset(inputs) if decode else 0
        key = _as_key(rngs)
        layer_keys = None if key is None else jax.random.split(key, self.config.num_layers)
        x = self._embed(inputs, offset, token_type_ids)
        causal = self.config.causal

        unroll = self.config.num_layers <= UNROLL_MAX_LAYERS

        @nnx.scan(in_axes=(0, nnx.Carry, None, 0), out_axes=(nnx.Carry, 0), unroll=unroll)
        def run_blocks(block, h, mask, key):
            h, weights = block(h, mask=mask, is_causal=causal, return_weights=return_intermediates,
                               decode=decode, deterministic=deterministic, rngs=key)
            return h, ((h, weights) if return_intermediates else None)

        h, per_layer = run_blocks(self.blocks, x, mask, layer_keys)
        logits = self._head(h)
        if not return_intermediates:
            return logits
        hidden, weights = per_layer
        hidden = jnp.concatenate([x[None], hidden], axis=0)
        return logits, {"hidden": hidden, "attention": weights}

    def generate(
        self, prompt_tokens: Array, max_new_tokens: int, *, key: Optional[Array] = None, temperature: float = 0.0
    ) -> Array:
        """Continue `prompt_tokens` `[B, P]` by `max_new_tokens` tokens -> `[B, P + max_new_tokens]`.

        The prompt is prefilled as one chunk into fresh caches of length
        P + max_new_tokens, then tokens are decoded one at a time in a
        `lax.scan`, all in one jitted program; dropout is off. The model is
        not modified (the caches live in that program). `temperature=0`
        (default) is greedy (argmax); `temperature > 0` samples from
        softmax(logits / temperature) with `key` (token t uses fold_in(key, t)),
        so the same key gives the same tokens.
        """
        self._check_generate(prompt_tokens, max_new_tokens, key, temperature)
        graphdef, state = nnx.split(self)
        return _generate(graphdef, state, prompt_tokens, key, max_new_tokens=max_new_tokens,
                         temperature=float(temperature))

    def _check_generate(self, prompt_tokens, max_new_tokens, key, temperature) -> None:
        config = self.config
        if (config.vocab_size is None or config.head is None or config.out_features != config.vocab_size
                or not config.causal):
            raise ValueError("generate needs a causal token model whose head predicts tokens "
                             f"(causal={config.causal}, vocab_size={config.vocab_size}, "
                             f"output_features={config.out_features})")
        if not hasattr(prompt_tokens, "ndim") or prompt_tokens.ndim != 2 or not jnp.issubdtype(
                prompt_tokens.dtype, jnp.integer):
            raise ValueError(f"prompt_tokens must be integer tokens [B, P], got {type(prompt_tokens).__name__} "
                             f"of dtype {getattr(prompt_tokens, 'dtype', None)}, shape {jnp.shape(prompt_tokens)}")
        checks.positive_int("max_new_tokens", max_new_tokens)
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or temperature < 0:
            raise ValueError(f"temperature must be a number >= 0 (0: greedy), got {temperature!r}")
        if temperature > 0 and not isinstance(key, jax.Array):
            raise ValueError(f"sampling (temperature={temperature}) needs key=, a PRNG key; got {key!r}")
        total = prompt_tokens.shape[1] + max_new_tokens
        if config.positions == "learned" and total > config.max_len:
            raise ValueError(f"prompt_tokens of shape {prompt_tokens.shape} plus max_new_tokens={max_new_tokens} "
                             f"exceed max_len {config.max_len}")


def _next_token(logits: Array, key: Optional[Array], step, temperature: float) -> Array:
    """logits `[B, V]` -> tokens `[B]`: argmax (temperature 0) or a sample with fold_in(key, step)."""
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1)
    return jax.random.categorical(jax.random.fold_in(key, step), logits / temperature, axis=-1)


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "temperature"))
def _generate(graphdef, state, prompt, key, *, max_new_tokens: int, temperature: float) -> Array:
    """`Transformer.generate` as one program: prefill, then a scan over steps carrying the model state."""
    model = nnx.merge(graphdef, state)
    model.init_cache(prompt.shape[0], prompt.shape[1] + max_new_tokens)
    logits = model(prompt, decode=True, deterministic=True)
    first = _next_token(logits[:, -1], key, 0, temperature).astype(prompt.dtype)
    graphdef, state = nnx.split(model)

    def step(carry, t):
        state, token = carry
        model = nnx.merge(graphdef, state)
        logits = model(token[:, None], decode=True, deterministic=True)
        token = _next_token(logits[:, -1], key, t, temperature).astype(prompt.dtype)
        return (nnx.state(model), token), token

    _, tokens = jax.lax.scan(step, (state, first), jnp.arange(1, max_new_tokens))
    return jnp.concatenate([prompt, first[:, None], tokens.T], axis=1)
