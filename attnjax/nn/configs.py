"""The configs of the `attnjax.nn` modules, each field declared and validated once.

* `AttentionConfig`: the options of one attention layer (`MultiHeadAttention`).
* `BlockConfig`: one transformer layer (`Block`): its width, heads, the
  switches depth studies need (`skip`, `mlp`, `norm`, `residual_scale`), the
  MLP, norms, biases, residual dropout, dtypes, and its `attention`.
* `TransformerConfig`: the model-level fields (depth, vocabulary, positions,
  embeddings, head, causality) and the `block` every layer is built from.
  `TransformerConfig.create(**flat)` sorts flat keywords into the three.

All are frozen dataclasses validated on construction (`dataclasses.replace`
validates again), so a bad value raises before any parameter is drawn.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Optional, Union

import jax
import jax.numpy as jnp

from attnjax import checks
from attnjax import features as features_lib
from attnjax import rope as rope_lib
from attnjax.attention import dot_product_attention
from attnjax.nn.attention_fn import require_keywords
from attnjax.nn.initializers import DEFAULT_BIAS_INIT, DEFAULT_KERNEL_INIT, DEFAULT_POSITION_INIT

NORM_CHOICES = ("pre", "post", "sandwich", None)
QK_NORM_CHOICES = (None, "layernorm", "rmsnorm", "cosine")
POSITION_CHOICES = ("learned", "sinusoidal", None)
NORM_KINDS = ("layernorm", "rmsnorm")
HEAD_CHOICES = ("linear", "tied", None)
MLP_ACTIVATIONS = {
    "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),  # the default; GPT-2's
    "gelu": functools.partial(jax.nn.gelu, approximate=False),  # exact x Phi(x); BERT's
    "relu": jax.nn.relu,
    "swiglu": jax.nn.silu,  # gated: W_down (silu(W_gate x) * W_up x), Shazeer 2020; llama's
    "geglu": functools.partial(jax.nn.gelu, approximate=True),  # gated, tanh GELU; Gemma's
}
GATED_ACTIVATIONS = ("swiglu", "geglu")  # act(W_gate x) * W_up x, then W_down
ATTENTION_KINDS = ("softmax", "linear")
FIXED_FEATURE_MAPS = {"elu_plus_one": features_lib.elu_plus_one, "relu": features_lib.relu}
RANDOM_FEATURE_MAPS = {
    "favor_plus": features_lib.favor_plus,
    "relu_random": features_lib.relu_random,
    "trig_random": features_lib.trig_random,
}
INV_SQRT_DEPTH = "inv_sqrt_depth"  # residual_scale = 1/sqrt(L), resolved by the model that knows L


def _normalize_qk_mode(normalize_qk) -> Optional[str]:
    if normalize_qk is True:
        return "layernorm"
    if normalize_qk is False:
        return None
    if normalize_qk not in QK_NORM_CHOICES:
        raise ValueError(
            f"normalize_qk must be one of {QK_NORM_CHOICES} or a bool, got {normalize_qk!r}"
        )
    return normalize_qk


def _check_type(name: str, value, cls) -> None:
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be an {cls.__name__}, got {type(value).__name__}")


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """The options of one attention layer (`MultiHeadAttention`); validated on construction.

    Given whole to `MultiHeadAttention(config=...)` and `BlockConfig(attention=...)`
    (every layer of a model); the keyword arguments of `MultiHeadAttention`
    override single fields. The checks that need the layer's head count run
    in `check_heads`.

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
        with `normalize_qk=True`), 'rmsnorm' (an RMSNorm over Dh with a learned
        scale, one for q and one for k, before RoPE: Gemma 3's q_norm and
        k_norm) or 'cosine' (q and k rescaled to norm sqrt(Dh), so logits are
        sqrt(Dh) cos(q, k)); True is stored as 'layernorm', False as None.
      qk_norm_eps: the epsilon (> 0) of the 'layernorm' and 'rmsnorm' QK-norms.
      head_dim: Dh, the width of each head; None: D / H. A layer may be
        wider or narrower than D / H (Gemma 3 270M: D 640, H 4, Dh 256): the
        projections are `[D, H Dh]`, `[D, K Dh]` and W_o `[H Dh, D]`.
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
      rope_scaling: None, ('linear', factor) or ('llama3', factor,
        low_freq_factor, high_freq_factor, original_max_len): the rotary
        frequencies scaled as `attnjax.rope.inverse_frequencies` says
        (Hugging Face's `rope_scaling` types of the same names).
      window: None, or W >= 1: sliding-window attention, query t sees keys
        t - W < s (Mistral's `sliding_window`), and s < t + W when the
        attention is not causal; also when decoding from the cache.
      qkv_bias: biases on the query, key and value projections (Qwen2's);
        None: as the layer's `use_bias` (the output projection always
        follows `use_bias`).
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
    qk_norm_eps: float = 1e-6
    head_dim: Optional[int] = None
    attention_kind: str = "softmax"
    attention_fn: Callable[..., Any] = dot_product_attention
    feature_map: str = "favor_plus"
    num_features: int = 64
    rope: Optional[str] = None
    rope_base: float = 10000.0
    rope_scaling: Optional[tuple] = None
    window: Optional[int] = None
    qkv_bias: Optional[bool] = None
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
        checks.positive_number("qk_norm_eps", self.qk_norm_eps)
        checks.finite("qk_norm_eps", self.qk_norm_eps)
        if self.head_dim is not None:
            checks.positive_int("head_dim", self.head_dim)
        checks.choice("attention_kind", self.attention_kind, ATTENTION_KINDS)
        checks.choice(
            "feature_map", self.feature_map, tuple(FIXED_FEATURE_MAPS) + tuple(RANDOM_FEATURE_MAPS)
        )
        checks.positive_int("num_features", self.num_features)
        rope_lib.check_rope(self.rope, self.rope_base, self.rope_scaling)
        if self.rope_scaling is not None and self.rope is None:
            raise ValueError(
                f"rope_scaling={self.rope_scaling!r} needs rope='half' or 'interleaved', got rope=None"
            )
        if self.window is not None:
            checks.positive_int("window", self.window)
            if self.attention_kind != "softmax":
                raise ValueError(
                    f"window={self.window} needs attention_kind='softmax', got {self.attention_kind!r}"
                )
        checks.boolean("qkv_bias", self.qkv_bias, optional=True)
        self._check_attention_fn()
        for name in ("kernel_init", "bias_init"):
            checks.function(name, getattr(self, name))
        checks.function("out_kernel_init", self.out_kernel_init, optional=True)

    def _check_attention_fn(self) -> None:
        """attention_fn, and dropout on the attention weights, which only softmax attention has."""
        checks.function("attention_fn", self.attention_fn)
        checks.rate("dropout_rate", self.dropout_rate)
        if self.attention_kind == "softmax":
            require_keywords(self.attention_fn, ("mask", "is_causal", "scale"), "attention is")
            if self.dropout_rate > 0:
                require_keywords(
                    self.attention_fn, ("dropout_rate", "dropout_rng"), "attention dropout is"
                )
        elif self.dropout_rate > 0:
            raise ValueError(
                f"dropout on the attention weights needs attention_kind='softmax', "
                f"got attention_kind={self.attention_kind!r} with dropout_rate={self.dropout_rate}"
            )

    def check_heads(self, num_heads: int, head_dim: int) -> None:
        """The checks that need the layer's shape: K divides H, and rope needs an even head dim Dh."""
        if self.num_kv_heads is not None:
            checks.divisible("num_heads", num_heads, "num_kv_heads", self.num_kv_heads)
        if self.rope is not None and head_dim % 2:
            raise ValueError(
                f"rope needs an even head dim, got head dim {head_dim} (num_heads={num_heads})"
            )

    def kv_heads(self, num_heads: int) -> int:
        """K, the number of key/value heads of a layer with `num_heads` query heads."""
        return num_heads if self.num_kv_heads is None else self.num_kv_heads


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """One transformer layer (`Block(config)`); validated on construction.

    Attributes:
      features: D, the hidden width, divisible by `num_heads` unless
        `attention.head_dim` sets the head width.
      num_heads: H attention heads (head dim D / H, or `attention.head_dim`).
      attention: the options of the attention sub-layer (`AttentionConfig`:
        key/value heads, temperature, attention kind and function, RoPE,
        dropout on the attention weights, ...); its `num_kv_heads` divides
        H, and `rope` needs an even D / H.
      skip: residual connections around both sub-layers.
      mlp: an MLP sub-layer after the attention.
      norm: 'pre', 'post', 'sandwich' (a norm before and after each
        sub-layer, Gemma 3's) or None (see `Block`).
      residual_scale: a > 0 (finite), the scale of each residual branch (e.g. 1/sqrt(L),
        Noci et al. 2022); the string 'inv_sqrt_depth' is 1/sqrt(L), which
        `TransformerConfig.layer` resolves with its depth L.
      mlp_features: hidden width of the MLP (None: 4 D).
      mlp_activation: see `Mlp` ('gelu_tanh', 'gelu', 'relu', 'swiglu', 'geglu').
      norm_kind: 'layernorm' or 'rmsnorm', for every norm of the model
        (blocks, and a `Transformer`'s embedding and final norms); norm_eps
        its epsilon (> 0, finite).
      use_bias: biases in the attention projections and the MLP.
      residual_dropout_rate: dropout on each sub-layer's output, before the
        residual add (`nnx.Dropout`), in [0, 1); 0 (default) is off. (Dropout
        on the attention weights is `attention.dropout_rate`.)
      deterministic: default for the call's `deterministic` (True: no dropout).
      dtype, param_dtype: computation and parameter dtypes (of the whole
        model in a `Transformer`): floating-point, in any spelling
        `jnp.dtype` resolves (`jnp.bfloat16`, 'float32', `np.float16`);
        dtype None computes in the parameters' dtype.
      attention_module: the class the block builds its attention with: None
        (`MultiHeadAttention`) or a subclass of it, built with the same
        arguments, that overrides its public stages (`project`, `position`,
        `attend`, `merge`) and may hold parameters of its own, one set per
        layer (docs/examples/learned_attention.py).
    """

    features: int = 64
    num_heads: int = 4
    attention: AttentionConfig = AttentionConfig()
    skip: bool = True
    mlp: bool = True
    norm: Optional[str] = "pre"
    residual_scale: Union[float, str] = 1.0
    mlp_features: Optional[int] = None
    mlp_activation: str = "gelu_tanh"
    norm_kind: str = "layernorm"
    norm_eps: float = 1e-6
    use_bias: bool = True
    residual_dropout_rate: float = 0.0
    deterministic: bool = False
    dtype: Any = None
    param_dtype: Any = jnp.float32
    attention_module: Optional[type] = None

    def __post_init__(self):
        checks.positive_int("features", self.features)
        checks.positive_int("num_heads", self.num_heads)
        _check_type("attention", self.attention, AttentionConfig)
        if self.attention.head_dim is None:
            checks.divisible("features", self.features, "num_heads", self.num_heads)
        self.attention.check_heads(self.num_heads, self.head_dim)
        for name in ("skip", "mlp", "use_bias", "deterministic"):
            checks.boolean(name, getattr(self, name))
        checks.choice("norm", self.norm, NORM_CHOICES)
        if isinstance(self.residual_scale, str):
            if self.residual_scale != INV_SQRT_DEPTH:
                raise ValueError(
                    f"residual_scale must be a number or {INV_SQRT_DEPTH!r}, "
                    f"got {self.residual_scale!r}"
                )
        else:
            checks.positive_number("residual_scale", self.residual_scale)
            checks.finite("residual_scale", self.residual_scale)
        if self.mlp_features is not None:
            checks.positive_int("mlp_features", self.mlp_features)
        checks.choice("mlp_activation", self.mlp_activation, MLP_ACTIVATIONS)
        checks.choice("norm_kind", self.norm_kind, NORM_KINDS)
        checks.positive_number("norm_eps", self.norm_eps)
        checks.finite("norm_eps", self.norm_eps)
        checks.rate("residual_dropout_rate", self.residual_dropout_rate)
        checks.floating_dtype("dtype", self.dtype, optional=True)
        checks.floating_dtype("param_dtype", self.param_dtype)
        self._check_attention_module()

    def _check_attention_module(self) -> None:
        module = self.attention_module
        if module is None:
            return
        from attnjax.nn.attention import MultiHeadAttention  # attention.py imports this module

        if not (isinstance(module, type) and issubclass(module, MultiHeadAttention)):
            raise TypeError(
                f"attention_module must be None or a subclass of MultiHeadAttention, got {module!r}"
            )

    @property
    def head_dim(self) -> int:
        """Dh: `attention.head_dim`, else D / H."""
        return self.attention.head_dim or self.features // self.num_heads

    def branch_scale(self, num_layers: Optional[int] = None) -> float:
        """The numeric residual scale a (1/sqrt(num_layers) for 'inv_sqrt_depth')."""
        if self.residual_scale != INV_SQRT_DEPTH:
            return float(self.residual_scale)
        if num_layers is None:
            raise ValueError(
                f"residual_scale={INV_SQRT_DEPTH!r} needs the depth; a Block built alone "
                "takes a number (TransformerConfig resolves it with num_layers)"
            )
        return 1.0 / math.sqrt(num_layers)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Everything that defines a `Transformer`: the model-level fields and the `block` of every layer.

    Attributes:
      num_layers: L >= 1.
      block: the `BlockConfig` of every layer (width, heads, switches, MLP,
        norms, attention, dtypes).
      vocab_size: token vocabulary V >= 1 (integer inputs `[B, T]`), or None for
        real-valued inputs `[B, T, input_features]` with a linear input projection.
      input_features: width (>= 1) of real-valued inputs (when `vocab_size` is None).
      output_features: width (>= 1) of the output head (default `vocab_size`, else D).
      max_len: longest sequence (learned positions need it).
      positions: 'learned', 'sinusoidal' or None (e.g. with `attention.rope`).
      type_vocab_size: number of token types (BERT's segment embeddings,
        added to the token embedding); None: no token types.
      embedding_norm: a norm after embedding + positions + types (BERT).
      final_norm: a norm before the head.
      head: 'linear' (default, a Linear to `out_features`), 'tied' (logits
        x E^T with the token embedding E) or None (the model returns hidden
        states `[B, T, D]`, as an encoder).
      head_bias: a bias in the 'linear' head (False: logits = h W, as
        llama's untied `lm_head`).
      causal: causal self-attention.
      embedding_init: initialiser of the token embedding `[vocab_size, D]`
        (or of the input projection kernel `[input_features, D]`); None: the
        layer's default (`nnx.Embed`'s, or `nnx.Linear`'s).
      position_init: initialiser of the learned position table `[max_len, D]`.
      embedding_scale: None, or c > 0: the token embedding is multiplied by c
        (Gemma's sqrt(D)); a tied head reads the unscaled embedding.
      layer_windows: None, or one entry per layer: a sliding window W >= 1 or
        None (full attention) for that layer (Gemma 3: five local layers of
        W = 512, then one global). Needs softmax attention and no
        `attention.window`. Held by each layer's attention as a
        `LayerSetting` (`MultiHeadAttention.layer_window`).
      layer_rope_bases: None, or one rotary base > 0 per layer (Gemma 3: 10^4
        on local layers, 10^6 on global ones), in place of `attention.rope_base`;
        needs `attention.rope` and no `rope_scaling`. Held as a `LayerSetting`
        (`MultiHeadAttention.layer_rope_base`).
    """

    num_layers: int = 2
    block: BlockConfig = BlockConfig()
    vocab_size: Optional[int] = None
    input_features: Optional[int] = None
    output_features: Optional[int] = None
    max_len: int = 512
    positions: Optional[str] = "learned"
    type_vocab_size: Optional[int] = None
    embedding_norm: bool = False
    final_norm: bool = True
    head: Optional[str] = "linear"
    head_bias: bool = True
    causal: bool = False
    embedding_init: Optional[Callable] = None
    position_init: Callable = DEFAULT_POSITION_INIT
    embedding_scale: Optional[float] = None
    layer_windows: Optional[tuple] = None
    layer_rope_bases: Optional[tuple] = None

    def __post_init__(self):
        checks.positive_int("num_layers", self.num_layers)
        checks.positive_int("max_len", self.max_len)
        _check_type("block", self.block, BlockConfig)
        if (self.vocab_size is None) == (self.input_features is None):
            raise ValueError(
                "give exactly one of vocab_size (token inputs) or input_features (real-valued inputs), "
                f"got vocab_size={self.vocab_size}, input_features={self.input_features}"
            )
        for name in ("vocab_size", "input_features", "output_features"):
            if getattr(self, name) is not None:
                checks.positive_int(name, getattr(self, name))
        checks.choice("positions", self.positions, POSITION_CHOICES)
        for name in ("embedding_norm", "final_norm", "causal", "head_bias"):
            checks.boolean(name, getattr(self, name))
        self._check_embedding_and_head()
        checks.function("embedding_init", self.embedding_init, optional=True)
        checks.function("position_init", self.position_init)
        if self.embedding_scale is not None:
            checks.positive_number("embedding_scale", self.embedding_scale)
            checks.finite("embedding_scale", self.embedding_scale)
        self._check_layer_settings()

    def _per_layer(self, name: str) -> Optional[tuple]:
        """The field `name` as a tuple of one entry per layer (stored so), or None."""
        values = getattr(self, name)
        if values is None:
            return None
        if not isinstance(values, (tuple, list)) or len(values) != self.num_layers:
            raise ValueError(
                f"{name} must hold one entry per layer (num_layers={self.num_layers}), got {values!r}"
            )
        object.__setattr__(self, name, tuple(values))
        return tuple(values)

    def _check_layer_settings(self) -> None:
        attention = self.block.attention
        windows = self._per_layer("layer_windows")
        if windows is not None:
            for i, window in enumerate(windows):
                if window is not None:
                    checks.positive_int(f"layer_windows[{i}]", window)
            if attention.window is not None or attention.attention_kind != "softmax":
                raise ValueError(
                    "layer_windows needs softmax attention and no attention.window, got "
                    f"attention_kind={attention.attention_kind!r}, window={attention.window}"
                )
        bases = self._per_layer("layer_rope_bases")
        if bases is not None:
            for i, base in enumerate(bases):
                checks.positive_number(f"layer_rope_bases[{i}]", base)
                checks.finite(f"layer_rope_bases[{i}]", base)
            if attention.rope is None or attention.rope_scaling is not None:
                raise ValueError(
                    "layer_rope_bases needs a rotary embedding without rope_scaling, got "
                    f"rope={attention.rope!r}, rope_scaling={attention.rope_scaling!r}"
                )

    def _check_embedding_and_head(self) -> None:
        if self.type_vocab_size is not None:
            checks.positive_int("type_vocab_size", self.type_vocab_size)
        checks.choice("head", self.head, HEAD_CHOICES)
        if self.head == "tied" and (
            self.vocab_size is None or self.output_features not in (None, self.vocab_size)
        ):
            raise ValueError(
                f"head='tied' needs token inputs and output_features=vocab_size, got "
                f"vocab_size={self.vocab_size}, output_features={self.output_features}"
            )
        if self.head is None and self.output_features not in (None, self.block.features):
            raise ValueError(
                f"head=None returns hidden states of width features={self.block.features}, "
                f"got output_features={self.output_features}"
            )

    @classmethod
    def create(cls, **options) -> "TransformerConfig":
        """A config from flat keywords, each sorted into the config that declares it.

        `AttentionConfig` fields go to `block.attention`, `BlockConfig` fields
        to `block`, the rest are this config's; `attention=` and `block=`,
        given whole, are the bases the flat fields replace. E.g.

            TransformerConfig.create(num_layers=4, features=32, vocab_size=16, skip=False, temperature=2.0)

        Raises a `TypeError` naming any keyword no config declares.
        """
        unknown = [k for k in options if k not in ATTENTION_OPTIONS + BLOCK_OPTIONS + MODEL_OPTIONS]
        if unknown:
            raise TypeError(
                f"TransformerConfig.create got unknown keyword argument(s) {', '.join(unknown)}; "
                f"valid: the fields of AttentionConfig, BlockConfig and TransformerConfig"
            )

        def take(names):
            return {k: options[k] for k in options if k in names}

        block = options.get("block", BlockConfig())
        _check_type("block", block, BlockConfig)
        attention = options.get("attention", block.attention)
        _check_type("attention", attention, AttentionConfig)
        attention_fields = take(ATTENTION_OPTIONS)
        if attention_fields:
            attention = dataclasses.replace(attention, **attention_fields)
        block_fields = {k: v for k, v in take(BLOCK_OPTIONS).items() if k != "attention"}
        block = dataclasses.replace(block, attention=attention, **block_fields)
        model_fields = {k: v for k, v in take(MODEL_OPTIONS).items() if k != "block"}
        return cls(block=block, **model_fields)

    def layer(self) -> BlockConfig:
        """The `BlockConfig` of each layer, with 'inv_sqrt_depth' resolved to 1/sqrt(L)."""
        return dataclasses.replace(
            self.block, residual_scale=self.block.branch_scale(self.num_layers)
        )

    @property
    def windows(self) -> tuple:
        """Each layer's sliding window W (None: none): `layer_windows`, else the attention's `window`."""
        return self.layer_windows or (self.block.attention.window,) * self.num_layers

    @property
    def out_features(self) -> int:
        """The width of the model's output: hidden states (head None), `output_features`, the vocabulary or D."""
        if self.head is None:
            return self.block.features
        if self.output_features is not None:
            return self.output_features
        return self.vocab_size if self.vocab_size is not None else self.block.features


def _field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


ATTENTION_OPTIONS = _field_names(AttentionConfig)
BLOCK_OPTIONS = _field_names(BlockConfig)
MODEL_OPTIONS = _field_names(TransformerConfig)
