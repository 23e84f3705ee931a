"""Exact (softmax) scaled dot-product attention.

    Attention(Q, K, V) = softmax((Q K^T * scale + bias) / temperature) V

with scale = 1/sqrt(D) by default (scaled dot-product attention, Vaswani et
al. 2017, "Attention is all you need", §3.2.1) and a softmax temperature
dividing the scaled logits, a further factor on Vaswani et al.'s 1/sqrt(D):
temperature -> 0 gives a one-hot (hard max) row, temperature -> inf a uniform
row. Each row of the weight matrix is a
probability distribution over keys, so the weights form a row-stochastic
(Markov) matrix, which is what `attnjax.analysis` studies.

Layout follows `jax.nn.dot_product_attention`: query `[..., T, H, D]`, key
`[..., S, K, D]`, value `[..., S, K, Dv]`, output `[..., T, H, Dv]`, weights
`[..., H, T, S]`. K must divide H (grouped-query attention; K = 1 is
multi-query attention): query head h reads key/value head h // (H // K).

The core (`_attention`) computes all heads at once: queries grouped as
`[..., K, G, T, D]` (G = H // K), two einsums over `[..., K, G, T, S]`, and
the masked softmax of `attnjax.softmax` (its own JVPs; its numerics: no NaN
for fully masked rows, extreme temperatures or large logits). Inputs are
checked by `attnjax.checks` before any compute.

Numerics: logits and softmax run in at least float32 (bf16/fp16 inputs are
promoted), outputs come back in the input dtype. Masked entries get exactly
zero weight; a query row with every key masked gets zero weights and a zero
output, with zero gradients. A -inf in the bias masks its entry
(`bias_mask`): a row of -inf is a fully masked row.

Masked means masked: a key that every query row reading it masks (padding,
`key_value_seq_lengths`, a masked column of the mask or the bias, keys past
the causal or local-window reach) cannot affect the output, the lse or any
gradient, whatever its key and value hold, NaN and inf included: its zero
weight would still meet them in `weights @ V` (and in q's gradient through
the logits) as 0 x NaN, so they are zeroed first (`without_unread_keys`, a
`where` on key and value only where such a key can exist). A key that some
row attends to is read by the product of every row, so a NaN or inf there
reaches the rows that mask it too (a dense product cannot skip single
entries); keep padding masked for every row (e.g. with
`key_value_seq_lengths`) when it may hold garbage.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import einops
import jax
import jax.numpy as jnp
import numpy as np

from attnjax import causal_blocks, checks
from attnjax import masks as masks_lib
from attnjax.softmax import clip_logits, softmax_with_temperature

Array = jax.Array
Scalar = Union[float, Array]


# --------------------------------------------------------------------------
# Inputs: checks (attnjax.checks), the keyword masks, the default scale


def _prepare(query, key, value, mask, bias, temperature):
    """Validates all inputs (shapes and dtypes only); returns mask (boolean) and bias as arrays.

    A -inf entry of the bias masks its (query, key) pair: it joins the mask
    (`bias_mask`), so a row of -inf is a fully masked row.
    """
    checks.qkv(query, key, value)
    checks.temperature(temperature)
    target = checks.logits_shape(query, key)
    mask = checks.bool_mask(checks.broadcastable("mask", mask, target))
    bias = checks.broadcastable("bias", bias, target)
    return masks_lib.combine_masks(mask, bias_mask(bias)), bias


def bias_mask(bias: Optional[Array]) -> Optional[Array]:
    """The pairs an additive bias masks: `bias != -inf` (boolean, bias's shape), None for no bias.

    softmax(x + b) gives exactly 0 weight where b = -inf, whatever the other
    entries of the row, and a row of -inf alone has no distribution: both are
    masked entries, so a row of -inf is a fully masked row (zero weights and
    output), not the uniform row clipping -inf would make. NaN stays unmasked.
    """
    if bias is None:
        return None
    return jnp.logical_not(jnp.isneginf(bias))


def without_unread_keys(
    key: Array,
    value: Optional[Array],
    mask: Optional[Array] = None,
    *,
    reachable: Optional[int] = None,
) -> tuple[Array, Optional[Array]]:
    """key `[..., S, K, D]` and value `[..., S, K, Dv]` (or None) with zeros at the keys that no query reads.

    Key s of key head k is unread when every query row of every query head
    reading k (heads k G .. k G + G - 1, G = H / K) masks it: `mask` (boolean,
    broadcastable to `[..., H, T, S]`, True = attend; None for none) is False
    at (h, t, s) for all such h and all t, or s >= `reachable` (the bound of
    the causal and local-window masks, `masks.reachable_keys`; None for S).
    Its weight is exactly 0 in every row, yet a NaN or inf in its key or value
    would enter the products as 0 x NaN (the output, and q's gradient through
    the logits); zeroed by a `where`, it cannot, and its gradients are 0, as
    they are mathematically. Returns the inputs themselves when no key can be
    unread (no mask, and every key reachable), so that path costs nothing.
    """
    num_kv, kv_len = key.shape[-2], key.shape[-3]
    read = None
    if reachable is not None and reachable < kv_len:
        read = jnp.asarray(np.arange(kv_len)[:, None] < reachable)  # [S, 1]
    if mask is not None:
        mask = jnp.reshape(mask, (1,) * (key.ndim - mask.ndim) + mask.shape)
        by_head = jnp.any(mask, axis=-2)  # [..., H|1, S|1]
        if by_head.shape[-2] > 1:  # [..., K, G, S|1]: a key head is read if one of its group reads
            grouped = (num_kv, by_head.shape[-2] // num_kv, by_head.shape[-1])
            by_head = jnp.any(jnp.reshape(by_head, by_head.shape[:-2] + grouped), axis=-2)
        by_key = jnp.swapaxes(by_head, -1, -2)  # [..., S|1, K|1]
        read = by_key if read is None else by_key & _lift(read, by_key.ndim)
    if read is None:
        return key, value
    read = _lift(read, key.ndim - 1)[..., None]
    key = jnp.where(read, key, jnp.zeros((), key.dtype))
    return key, None if value is None else jnp.where(read, value, jnp.zeros((), value.dtype))


def _lift(x: Array, rank: int) -> Array:
    return jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape)


def _keyword_masks(query, key, is_causal, query_seq_lengths, key_value_seq_lengths, window):
    """jax.nn's mask keywords as boolean masks broadcastable to `[..., H, T, S]` (None where unused)."""
    q_len, kv_len = query.shape[-3], key.shape[-3]
    causal = masks_lib.causal_mask(q_len, kv_len) if is_causal else None
    local = (
        None
        if window is None
        else masks_lib.local_window_mask(q_len, kv_len, left=window[0], right=window[1])
    )
    kv_valid = None
    if key_value_seq_lengths is not None:
        kv_valid = masks_lib.key_padding_mask(lengths=key_value_seq_lengths, kv_len=kv_len)
    q_valid = None
    if query_seq_lengths is not None:
        q_valid = jnp.swapaxes(
            masks_lib.key_padding_mask(lengths=query_seq_lengths, kv_len=q_len), -1, -2
        )
    return causal, local, kv_valid, q_valid


def default_scale(head_dim: int) -> float:
    """The default logits scale `1/sqrt(D)` for queries and keys of width `head_dim` = D.

    Vaswani et al. 2017, "Attention is all you need", §3.2.1: for q, k with
    independent unit-variance entries, `q . k` has variance D, so the scaled
    logits have unit variance. Every attention in attnjax (exact, fused
    kernels, the NNX module, the streaming statistics, the flax adapters)
    that is given no scale uses this one; the random feature maps of
    `attnjax.features`, which sit below this module, apply its square root
    `D^(-1/4)` to each of q and k.
    """
    return 1.0 / math.sqrt(head_dim)


# --------------------------------------------------------------------------
# The core: all heads at once, in the layout [..., K, G, T, S]


def grouped_logits(query: Array, key: Array, *, scale: Scalar) -> Array:
    """Q K^T * scale for all heads: query `[..., T, H, D]`, key `[..., S, K, D]` -> `[..., H, T, S]`.

    In `promote_types(query.dtype, float32)`; query head h reads key head
    h // (H // K) (grouped-query attention), without copying key heads. The
    queries are regrouped as `[..., K, G, T, D]` and the keys as
    `[..., K, S, D]` before the product, so that it writes the logits in
    their `[..., K, G, T, S]` order: contracting the inputs in their own
    layout, XLA's CPU backend wrote them as `[K, S, G T]` inside a loop over
    key chunks, and every elementwise pass over the logits that followed read
    them transposed (the chunked statistics pass at T = 8192, H = 9, K = 3,
    D = 64 took 1.20 s there and 0.79 s in this layout, with the same results).
    """
    group = query.shape[-2] // key.shape[-2]
    dtype = jnp.promote_types(query.dtype, jnp.float32)
    # Swap, then split (and merge, then swap): one 5-D transpose compiles to another program.
    q = einops.rearrange(jnp.swapaxes(query, -3, -2), "... (k g) t d -> ... k g t d", g=group)
    k = einops.rearrange(key, "... s k d -> ... k s d")
    logits = jnp.einsum("...kgtd,...ksd->...kgts", q, k, preferred_element_type=dtype)
    return einops.rearrange(logits, "... k g t s -> ... (k g) t s") * jnp.asarray(scale, dtype)


def _attention(
    query, key, value, mask=None, bias=None, keep=None, *, scale, temperature, dropout_rate=0.0
):
    """Exact attention for all heads: query `[..., T, H, D]`, key `[..., S, K, D]`,
    value `[..., S, K, Dv]` -> out `[..., T, H, Dv]`, weights `[..., H, T, S]`.

        weights = softmax((Q K^T * scale + bias) / temperature),  out = weights V

    Query head h = k * G + g (G = H // K) reads key/value head k: the queries
    are grouped as `[..., K, G, T, D]` and the two products are einsums over
    `[..., K, G, T, S]`, so the K/V heads are never copied per group.
    mask, bias, keep: `None` or broadcastable to `[..., H, T, S]`. `keep`
    (boolean) is the dropout draw: the output uses weights * keep / (1 -
    dropout_rate); the returned weights are the softmax's.
    """
    group = query.shape[-2] // key.shape[-2]
    dtype = jnp.promote_types(query.dtype, jnp.float32)
    logits = grouped_logits(query, key, scale=scale)
    v = einops.rearrange(value, "... s k d -> ... k s d")
    mask, bias, keep = (
        None if x is None else jnp.reshape(x, (1,) * (logits.ndim - x.ndim) + x.shape)
        for x in (mask, bias, keep)
    )
    if bias is not None:
        logits = logits + bias.astype(dtype)
    weights = softmax_with_temperature(logits, temperature, mask=mask)  # [..., H, T, S]
    mixing = weights if keep is None else jnp.where(keep, weights, jnp.zeros_like(weights))
    mixing = einops.rearrange(mixing.astype(v.dtype), "... (k g) t s -> ... k g t s", g=group)
    out = jnp.einsum(
        "...kgts,...ksd->...kgtd", mixing, v, preferred_element_type=dtype
    )  # [..., K, G, T, Dv]
    if keep is not None:
        out = out / jnp.asarray(1.0 - dropout_rate, dtype)  # on [T, Dv], not on the [T, S] weights
    out = einops.rearrange(out, "... k g t e -> ... (k g) t e")
    return jnp.swapaxes(out, -3, -2).astype(value.dtype), weights


# --------------------------------------------------------------------------
# Fast path: cuDNN through jax.nn.dot_product_attention
#
# Which implementation runs, and why (experiments/benchmark/attention.py measures):
# * GPU, bf16/fp16, no weights requested: `jax.nn.dot_product_attention(
#   implementation='cudnn')`, a fused flash-attention kernel that never
#   materialises the [T, S] logits; nothing written in jnp matches it. If cuDNN
#   rejects the shapes (it raises while tracing), the core runs.
# * Everywhere else (CPU, TPU, float32/float64 on GPU, weights requested): the
#   core `_attention` (how it was made fast on a CPU, with the measurements:
#   experiments/benchmark/NOTES.md).


def _can_use_cudnn(query, key, value, temperature) -> bool:
    """cuDNN needs a GPU, bf16/fp16, one dtype, equal key/value shapes and a Python-float scale."""
    return (
        jax.default_backend() == "gpu"
        and query.dtype in (jnp.bfloat16, jnp.float16)
        and query.dtype == key.dtype == value.dtype
        and key.shape == value.shape
        and isinstance(temperature, checks.NUMBERS)
    )


def _to_rank4(x: Optional[Array], batch_shape: tuple[int, ...]) -> Optional[Array]:
    """Mask/bias broadcastable to `[*batch, H, T, S]` -> `[B or 1, H or 1, T, S]`."""
    if x is None:
        return None
    x = jnp.reshape(x, (1,) * (len(batch_shape) + 3 - x.ndim) + x.shape)
    if all(d == 1 for d in x.shape[:-3]):
        return jnp.reshape(x, (1,) + x.shape[-3:])
    x = jnp.broadcast_to(x, batch_shape + x.shape[-3:])
    return jnp.reshape(x, (-1,) + x.shape[-3:])


def _jax_nn_attention(query, key, value, mask, bias, is_causal, scale, temperature, implementation):
    """`jax.nn.dot_product_attention` with attnjax semantics (any batch dims,
    temperature, zero output for fully masked rows)."""
    batch_shape = query.shape[:-3]

    def flat(x):
        return jnp.reshape(x, (-1,) + x.shape[-3:])

    q, k, v = flat(query), flat(key), flat(value)
    scale = float(scale) / float(temperature)
    if bias is not None:
        bias = _to_rank4(bias, batch_shape).astype(jnp.promote_types(query.dtype, jnp.float32))
        bias = bias / float(temperature)
    mask4 = _to_rank4(mask, batch_shape)
    out = jax.nn.dot_product_attention(
        q, k, v, bias, mask4, scale=scale, is_causal=is_causal, implementation=implementation
    )
    if mask4 is not None:
        # jax.nn gives a fully masked row the uniform average of values; we give 0.
        if is_causal:
            mask4 = masks_lib.combine_masks(mask4, masks_lib.causal_mask(q.shape[-3], k.shape[-3]))
        row_valid = jnp.any(mask4, axis=-1)  # [B, H|1, T]
        out = out * jnp.swapaxes(row_valid, -1, -2)[..., None].astype(out.dtype)
    return jnp.reshape(out, batch_shape + out.shape[-3:])


# --------------------------------------------------------------------------
# Log-sum-exp per query row (return_residual; attnjax.analysis.streaming)


MASKED_LSE = -0.7 * float(np.finfo(np.float32).max)
"""The lse of a fully masked row: jax.nn's (its masked-logit fill, -0.7 x float32 max; + log S rounds away)."""


def _log_sum_exp(query, key, mask, bias, *, scale, temperature) -> Array:
    """lse_ti = log sum_s exp(x_tis) over unmasked s, x = clip((Q K^T * scale + bias) / temperature).

    Shapes as `dot_product_attention`; returns `[..., T, H]` (jax.nn's layout).
    Its gradient in the logits is the softmax (the max is a stop-gradient
    shift); a fully masked row gets `MASKED_LSE` and a zero gradient.
    """
    x = grouped_logits(query, key, scale=scale)
    if bias is not None:
        x = x + jnp.reshape(bias, (1,) * (x.ndim - bias.ndim) + bias.shape).astype(x.dtype)
    x = clip_logits(x / jnp.asarray(temperature, x.dtype))
    if mask is not None:
        mask = jnp.reshape(mask, (1,) * (x.ndim - mask.ndim) + mask.shape)
        x = jnp.where(mask, x, jnp.asarray(-jnp.finfo(x.dtype).max / 2, x.dtype))
    top = jax.lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    lse = top[..., 0] + jnp.log(jnp.sum(jnp.exp(x - top), axis=-1))
    if mask is not None:
        lse = jnp.where(jnp.any(mask, axis=-1), lse, jnp.asarray(MASKED_LSE, x.dtype))
    return jnp.swapaxes(lse, -1, -2)


# --------------------------------------------------------------------------
# Public functions


IMPLEMENTATIONS = (None, "xla", "cudnn")


def dot_product_attention(
    query: Array,
    key: Array,
    value: Array,
    bias: Optional[Array] = None,
    mask: Optional[Array] = None,
    *,
    scale: Optional[float] = None,
    is_causal: bool = False,
    query_seq_lengths: Optional[Array] = None,
    key_value_seq_lengths: Optional[Array] = None,
    local_window_size: Union[int, tuple[int, int], None] = None,
    implementation: Optional[str] = None,
    temperature: Scalar = 1.0,
    return_weights: bool = False,
    dropout_rate: float = 0.0,
    dropout_rng: Optional[Array] = None,
    return_residual: bool = False,
):
    """Scaled dot-product attention, softmax((Q K^T * scale + bias) / temperature) V.

    A drop-in for `jax.nn.dot_product_attention` (same positional order
    `(query, key, value, bias, mask)` and keywords), plus `temperature`,
    `return_weights` and dropout on the weights; `return_residual` as jax.nn.
    Called outside `jit`, `vmap` and `grad` with a number (or no) scale and
    temperature, it runs as one compiled program per shapes and options,
    reused by later calls (as jax.nn's functions are jitted); otherwise it
    is traced into the caller's program.

    Args:
      query: `[..., T, H, D]`.
      key: `[..., S, K, D]`, K dividing H (grouped-query attention).
      value: `[..., S, K, Dv]`.
      bias: additive logits bias, broadcastable to `[..., H, T, S]`; -inf
        entries are masked entries (an additive 0 / -inf mask goes here), a
        row of -inf is a fully masked row.
      mask: broadcastable to `[..., H, T, S]`; boolean (True = attend) or
        numeric 0/1 (nonzero = attend). Extra leading size-1 axes are allowed
        (an unbatched query with a `[1, H, T, S]` mask). A concrete float mask
        holding anything but 0 and 1 (an additive mask) raises, pointing to
        `bias=`; a traced one is read as nonzero = attend, unchecked.
      scale: logits scale, any finite number (0 gives uniform weights, a
        negative one ranks keys in reverse); default 1/sqrt(D). NaN or inf
        raise when concrete; a traced scale is unchecked.
      is_causal: also apply the causal mask (query t attends to keys s <= t,
        top-left aligned as in jax.nn). A bool (as are `return_weights` and
        `return_residual`; anything else raises a TypeError).
      query_seq_lengths: integer `[...]` (jax.nn: `[B]`): queries t >= length
        are padding; their rows are fully masked (zero output).
      key_value_seq_lengths: integer `[...]`: keys s >= length are masked.
      local_window_size: w or (left, right): query t attends to keys
        t - left <= s <= t + right.
      implementation: None (cuDNN on a GPU for bf16/fp16 when no weights or
        dropout are asked for and it accepts the shapes, else the XLA core),
        'xla' (always the core) or 'cudnn' (cuDNN or an error).
      temperature: positive scalar dividing the scaled, biased logits (a
        number > 0, +inf the uniform limit, or a scalar array; 0, negative
        or NaN raise when concrete, a traced one is unchecked).
      return_weights: also return the attention weights.
      dropout_rate: in [0, 1); when > 0, each weight is dropped with this
        probability (needs `dropout_rng`) and kept ones are scaled by
        1 / (1 - rate) in the output (inverted dropout).
      dropout_rng: PRNG key for the dropout draw.
      return_residual: also return lse, the log-sum-exp over keys of the
        scaled, biased, temperature-divided, masked logits, `[..., T, H]`
        (jax.nn's layout and value; feed it to
        `attnjax.analysis.attention_statistics`). Unlike jax.nn's it has a
        gradient (the softmax) and is in `promote_types(dtype, float32)`. A
        fully masked row gets jax.nn's finite value `MASKED_LSE` (-0.7 x
        float32 max) and zero gradient. It costs a second Q K^T product.

    Returns:
      `out` `[..., T, H, Dv]` in value's dtype, or `(out, weights)` with weights
      `[..., H, T, S]` in `promote_types(dtype, float32)`; rows sum to 1, or to 0
      for fully masked rows (whose output is 0). The weights are the softmax's,
      before dropout (the row-stochastic matrix the analysis reads). With
      `return_residual`, lse comes last: `(out, lse)` or `(out, weights, lse)`.

    Raises:
      ValueError: naming the argument and shapes, for inputs of the wrong rank,
        mismatched heads or dims, a head dim D = 0, masks/biases/lengths that do
        not broadcast, an additive float mask, or bad options and scalars;
        raised while tracing, before any compute.
      TypeError: likewise, for an argument of the wrong type or dtype.
    """
    query, key, value = checks.as_arrays(query, key, value)
    mask, bias = _prepare(query, key, value, mask, bias, temperature)
    checks.scale(scale)
    for name, flag in (
        ("is_causal", is_causal),
        ("return_weights", return_weights),
        ("return_residual", return_residual),
    ):
        checks.boolean(name, flag)
    batch_shape = query.shape[:-3]
    query_seq_lengths = checks.lengths("query_seq_lengths", query_seq_lengths, batch_shape)
    key_value_seq_lengths = checks.lengths(
        "key_value_seq_lengths", key_value_seq_lengths, batch_shape
    )
    window = checks.window(local_window_size)
    use_dropout = checks.dropout(dropout_rate, dropout_rng)
    checks.choice("implementation", implementation, IMPLEMENTATIONS)
    options = dict(
        is_causal=is_causal,
        window=window,
        implementation=implementation,
        scale=default_scale(query.shape[-1]) if scale is None else scale,
        temperature=temperature,
        return_weights=return_weights,
        return_residual=return_residual,
        dropout_rate=dropout_rate if use_dropout else 0.0,
    )
    arrays = (query, key, value, mask, bias, query_seq_lengths, key_value_seq_lengths, dropout_rng)
    compute = _compiled_compute if _compiles_once(arrays, options) else _compute
    return compute(*arrays, **options)


def _compiles_once(arrays, options) -> bool:
    """Whether a call runs as one compiled program (`_compiled_compute`): when it is made outside any
    transformation (no argument is a tracer) and its scale and temperature are numbers (static arguments,
    as jax.nn's scale). Run op by op, an eager causal call compiles some thirty programs per new shape and
    dispatches them all at every call: on a 2-core CPU (B = 2, H = 4, D = 8, T = 5..24) 0.92 s per new
    shape and 2.2 ms per repeated call, against 0.17 s and 0.1 ms as one program (jax.nn's: 0.63 s and
    3 ms). Inside `jit`, `vmap` or `grad` the caller's program holds the computation, which then runs as
    before."""
    numbers = all(isinstance(options[name], checks.NUMBERS) for name in ("scale", "temperature"))
    return numbers and all(checks.concrete(x) for x in arrays if x is not None)


def _compute(
    query,
    key,
    value,
    mask,
    bias,
    query_seq_lengths,
    key_value_seq_lengths,
    dropout_rng,
    *,
    is_causal,
    window,
    implementation,
    scale,
    temperature,
    return_weights,
    return_residual,
    dropout_rate,
):
    """`dot_product_attention` on its checked inputs (mask boolean, with the bias's -inf entries; window
    `(left, right)` or None; scale a value; dropout_rate 0 without dropout)."""
    use_dropout = dropout_rate > 0
    causal, local, kv_valid, q_valid = _keyword_masks(
        query, key, is_causal, query_seq_lengths, key_value_seq_lengths, window
    )
    data_mask = masks_lib.combine_masks(mask, kv_valid, q_valid)
    mask = masks_lib.combine_masks(data_mask, causal, local)
    reachable = masks_lib.reachable_keys(
        query.shape[-3], key.shape[-3], is_causal=is_causal, window=window
    )
    key, value = without_unread_keys(
        key, value, None if data_mask is None else mask, reachable=reachable
    )
    residual = ()
    if return_residual:
        residual = (_log_sum_exp(query, key, mask, bias, scale=scale, temperature=temperature),)
    if implementation == "cudnn" or (
        implementation is None
        and not (return_weights or use_dropout)
        and _can_use_cudnn(query, key, value, temperature)
    ):
        cudnn_mask = masks_lib.combine_masks(data_mask, local)
        try:
            out = _jax_nn_attention(
                query, key, value, cudnn_mask, bias, is_causal, scale, temperature, "cudnn"
            )
            return (out, *residual) if residual else out
        except (ValueError, NotImplementedError, RuntimeError, TypeError):
            if implementation == "cudnn":
                raise
            # cuDNN does not support these shapes/mask on this GPU: use the core.
    keep = None
    if use_dropout:
        keep = jax.random.bernoulli(
            dropout_rng, 1.0 - dropout_rate, checks.logits_shape(query, key)
        )
    if causal_blocks.applies(
        query, key, is_causal=is_causal, window=window, keep=keep, return_weights=return_weights
    ):
        out = causal_blocks.attend(
            _attention, query, key, value, mask, bias, scale=scale, temperature=temperature
        )
        weights = None
    else:
        out, weights = _attention(
            query,
            key,
            value,
            mask,
            bias,
            keep,
            scale=scale,
            temperature=temperature,
            dropout_rate=dropout_rate,
        )
    extras = ((weights,) if return_weights else ()) + residual
    return (out, *extras) if extras else out


_compiled_compute = jax.jit(
    _compute,
    static_argnames=(
        "is_causal",
        "window",
        "implementation",
        "scale",
        "temperature",
        "return_weights",
        "return_residual",
        "dropout_rate",
    ),
)


def attention_weights(
    query: Array, key: Array, bias: Optional[Array] = None, mask: Optional[Array] = None, **options
) -> Array:
    """The attention matrix softmax((Q K^T * scale + bias) / temperature) alone.

    Args as `dot_product_attention` (no value needed; `options` are its
    keywords). Returns `[..., H, T, S]`, row-stochastic (rows of fully masked
    queries are zero).
    """
    value = jnp.zeros(key.shape[:-1] + (1,), key.dtype) if hasattr(key, "shape") else key
    _, weights = dot_product_attention(
        query, key, value, bias, mask, **{**options, "return_weights": True}
    )
    return weights
