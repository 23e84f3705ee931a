"""Exact (softmax) scaled dot-product attention.

    Attention(Q, K, V) = softmax((Q K^T * scale + bias) / temperature) V

with scale = 1/sqrt(D) by default (Vaswani et al. 2017) and a softmax
temperature as in seed 000 §3.3: temperature -> 0 gives a one-hot (hard max)
row, temperature -> inf a uniform row. Each row of the weight matrix is a
probability distribution over keys, so the weights form a row-stochastic
(Markov) matrix, which is what `attnjax.analysis` studies.

Layout follows `jax.nn.dot_product_attention`: query `[..., T, H, D]`, key
`[..., S, K, D]`, value `[..., S, K, Dv]`, output `[..., T, H, Dv]`, weights
`[..., H, T, S]`. K must divide H (grouped-query attention; K = 1 is
multi-query attention): query head h reads key/value head h // (H // K).

The implementation is a single-head core (`_attend_one_head`, `[T, D]`
against `[S, D]`) lifted over heads and batch dims with `jnp.vectorize`, which
is built on `jax.vmap`.

Numerics: logits and softmax run in at least float32 (bf16/fp16 inputs are
promoted), outputs come back in the input dtype. Masked entries get exactly
zero weight; a query row with every key masked gets zero weights and a zero
output (not the NaN of `0/0`, nor the uniform average a large negative fill
gives), with zero gradients. Logits are clipped to +-finfo.max/4 so that
extreme temperatures or logits cannot overflow to inf and produce inf - inf.
"""
from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import masks as masks_lib

Array = jax.Array
Scalar = Union[float, Array]


# --------------------------------------------------------------------------
# Softmax with temperature


def softmax_with_temperature(
    logits: Array, temperature: Scalar = 1.0, *, mask: Optional[Array] = None
) -> Array:
    """Masked softmax over the last axis: softmax(logits / temperature).

    Args:
      logits: `[..., S]` scores; computed in at least float32.
      temperature: positive scalar (seed 000 §3.3).
      mask: optional boolean array broadcastable to `logits`, True = keep.

    Returns:
      `[..., S]` probabilities in `promote_types(logits.dtype, float32)`. Masked
      entries are exactly 0; rows with nothing unmasked are all zeros. Never NaN
      for finite inputs, however large the logits or small the temperature.
    """
    dtype = jnp.promote_types(logits.dtype, jnp.float32)
    logits = logits.astype(dtype) / jnp.asarray(temperature, dtype)
    bound = jnp.finfo(dtype).max / 4
    logits = jnp.clip(logits, -bound, bound)
    if mask is not None:
        logits = jnp.where(mask, logits, -jnp.inf)
    row_max = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    row_max = jnp.where(jnp.isfinite(row_max), row_max, jnp.zeros_like(row_max))
    unnormalised = jnp.exp(logits - row_max)
    total = jnp.sum(unnormalised, axis=-1, keepdims=True)
    return unnormalised / jnp.where(total > 0, total, jnp.ones_like(total))


# --------------------------------------------------------------------------
# Input checks (all static: shapes and dtypes only, before any compute)


def _shape_error(message: str, **arrays) -> ValueError:
    shapes = ", ".join(f"{name}.shape={tuple(a.shape)}" for name, a in arrays.items())
    return ValueError(f"{message} (got {shapes})")


def _check_qkv(query: Array, key: Array, value: Array) -> None:
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be an array, got {type(x).__name__}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{name} must be a floating-point array, got dtype {x.dtype}")
        if x.ndim < 3:
            raise _shape_error(f"{name} must have layout [..., T, H, D] (rank >= 3)", **{name: x})
    if not query.ndim == key.ndim == value.ndim:
        raise _shape_error("query, key and value must have the same rank", query=query, key=key, value=value)
    if key.shape[:-1] != value.shape[:-1]:
        raise _shape_error("key and value must agree on [..., S, K]", key=key, value=value)
    if query.shape[:-3] != key.shape[:-3]:
        raise _shape_error("query and key must have the same batch dims", query=query, key=key)
    if query.shape[-1] != key.shape[-1]:
        raise _shape_error("query and key must have the same head dim D", query=query, key=key)
    num_heads, num_kv_heads = query.shape[-2], key.shape[-2]
    if num_heads % num_kv_heads:
        raise _shape_error(
            f"key heads ({num_kv_heads}) must divide query heads ({num_heads})", query=query, key=key
        )


def _logits_shape(query: Array, key: Array) -> tuple[int, ...]:
    return query.shape[:-3] + (query.shape[-2], query.shape[-3], key.shape[-3])


def _check_broadcastable(name: str, x: Optional[Array], target: tuple[int, ...]) -> Optional[Array]:
    """`x` must broadcast to exactly `target` (it may not enlarge the logits)."""
    if x is None:
        return None
    x = jnp.asarray(x)
    try:
        fits = x.ndim <= len(target) and np.broadcast_shapes(x.shape, target) == target
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} of shape {tuple(x.shape)} does not broadcast to the logits shape "
            f"[..., H, T, S] = {target}"
        )
    return x


def _check_temperature(temperature: Scalar) -> None:
    if isinstance(temperature, (int, float, np.number)):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
    elif jnp.ndim(temperature) != 0:
        raise ValueError(f"temperature must be a scalar, got shape {jnp.shape(temperature)}")


def _prepare(query, key, value, mask, bias, temperature):
    """Validates all inputs (shapes and dtypes only); returns mask and bias as arrays."""
    _check_qkv(query, key, value)
    _check_temperature(temperature)
    target = _logits_shape(query, key)
    mask = _check_broadcastable("mask", mask, target)
    bias = _check_broadcastable("bias", bias, target)
    if mask is not None and mask.dtype != jnp.bool_:
        raise TypeError(f"mask must be boolean (True = attend), got dtype {mask.dtype}")
    return mask, bias


def _default_scale(query: Array, scale: Optional[float]) -> Scalar:
    return 1.0 / np.sqrt(query.shape[-1]) if scale is None else scale


# --------------------------------------------------------------------------
# Single-head core, lifted over heads and batch


def _attend_one_head(q, k, v, mask=None, bias=None, *, scale, temperature):
    """One head: q `[T, D]`, k `[S, D]`, v `[S, Dv]` -> out `[T, Dv]`, weights `[T, S]`."""
    logits_dtype = jnp.promote_types(q.dtype, jnp.float32)
    logits = jnp.einsum("td,sd->ts", q, k, preferred_element_type=logits_dtype)
    logits = logits * jnp.asarray(scale, logits_dtype)
    if bias is not None:
        logits = logits + bias.astype(logits_dtype)
    weights = softmax_with_temperature(logits, temperature, mask=mask)
    out = jnp.einsum("ts,sd->td", weights.astype(v.dtype), v, preferred_element_type=logits_dtype)
    return out.astype(v.dtype), weights


def _group_heads(x: Array, num_kv_heads: int) -> Array:
    """`[..., H, T, S]`-like array (head axis -3) -> `[..., K, G, T, S]`."""
    if x.ndim < 3 or x.shape[-3] == 1:
        x = jnp.reshape(x, (1,) * max(0, 3 - x.ndim) + x.shape)
        return x[..., None, :, :]
    return jnp.reshape(x, x.shape[:-3] + (num_kv_heads, x.shape[-3] // num_kv_heads) + x.shape[-2:])


def _vmapped_attention(query, key, value, mask, bias, scale, temperature):
    """All heads through the single-head core; returns out `[..., T, H, Dv]`, weights `[..., H, T, S]`."""
    num_heads, num_kv_heads = query.shape[-2], key.shape[-2]
    group = num_heads // num_kv_heads
    # [..., T, H, D] -> [..., K, G, T, D]; keys/values [..., K, 1, S, D] are shared by the group.
    q = jnp.swapaxes(query, -3, -2)
    q = jnp.reshape(q, q.shape[:-3] + (num_kv_heads, group) + q.shape[-2:])
    k = jnp.swapaxes(key, -3, -2)[..., None, :, :]
    v = jnp.swapaxes(value, -3, -2)[..., None, :, :]
    operands = [q, k, v]
    signature = ["(t,d)", "(s,d)", "(s,e)"]
    for name, extra in (("mask", mask), ("bias", bias)):
        if extra is not None:
            operands.append(_group_heads(extra, num_kv_heads))
            signature.append("(t,s)")
    has_mask, has_bias = mask is not None, bias is not None

    def core(q, k, v, *extras):
        extras = list(extras)
        m = extras.pop(0) if has_mask else None
        b = extras.pop(0) if has_bias else None
        return _attend_one_head(q, k, v, m, b, scale=scale, temperature=temperature)

    rank = max(x.ndim for x in operands)
    operands = [jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape) for x in operands]
    lifted = jnp.vectorize(core, signature=",".join(signature) + "->(t,e),(t,s)")
    out, weights = lifted(*operands)
    batch = out.shape[:-4]
    out = jnp.reshape(out, batch + (num_heads,) + out.shape[-2:])
    weights = jnp.reshape(weights, batch + (num_heads,) + weights.shape[-2:])
    return jnp.swapaxes(out, -3, -2), weights


# --------------------------------------------------------------------------
# Fast path: cuDNN through jax.nn.dot_product_attention
#
# Which implementation runs, and why (experiments/bench_attention.py measures):
# * GPU, bf16/fp16, no weights requested: `jax.nn.dot_product_attention(
#   implementation='cudnn')`, a fused flash-attention kernel that never
#   materialises the [T, S] logits; nothing written in jnp matches it. If cuDNN
#   rejects the shapes (it raises while tracing), the vmapped core runs.
# * Everywhere else (CPU, TPU, float32/float64 on GPU, weights requested): the
#   vmapped core. On CPU it measured 0.88x the time of jax.nn's XLA
#   implementation at B=2, T=2048, H=8, D=64, causal (jax.nn builds a full
#   [B, H, T, S] mask and fills with a large negative; the core applies one
#   [T, S] mask with -inf); on TPU both lower to the same einsum-softmax-einsum.


def _can_use_cudnn(query, key, value, temperature) -> bool:
    """cuDNN needs a GPU, bf16/fp16, one dtype, equal key/value shapes and a Python-float scale."""
    return (
        jax.default_backend() == "gpu"
        and query.dtype in (jnp.bfloat16, jnp.float16)
        and query.dtype == key.dtype == value.dtype
        and key.shape == value.shape
        and isinstance(temperature, (int, float, np.number))
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
    flat = lambda x: jnp.reshape(x, (-1,) + x.shape[-3:])  # noqa: E731
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
# Public functions


def dot_product_attention(
    query: Array,
    key: Array,
    value: Array,
    *,
    mask: Optional[Array] = None,
    bias: Optional[Array] = None,
    is_causal: bool = False,
    scale: Optional[float] = None,
    temperature: Scalar = 1.0,
    return_weights: bool = False,
):
    """Scaled dot-product attention, softmax((Q K^T * scale + bias) / temperature) V.

    Args:
      query: `[..., T, H, D]`.
      key: `[..., S, K, D]`, K dividing H (grouped-query attention).
      value: `[..., S, K, Dv]`.
      mask: boolean, broadcastable to `[..., H, T, S]`; True = attend.
      bias: additive logits bias, broadcastable to `[..., H, T, S]`.
      is_causal: also apply the causal mask (query t attends to keys s <= t).
      scale: logits scale; default 1/sqrt(D).
      temperature: positive scalar dividing the scaled, biased logits.
      return_weights: also return the attention weights.

    Returns:
      `out` `[..., T, H, Dv]` in value's dtype, or `(out, weights)` with weights
      `[..., H, T, S]` in `promote_types(dtype, float32)`; rows sum to 1, or to 0
      for fully masked rows (whose output is 0).

    Raises:
      ValueError / TypeError, naming the argument and shapes, for inputs of the
      wrong rank, mismatched heads or dims, or masks/biases that do not
      broadcast; raised while tracing, before any compute.
    """
    mask, bias = _prepare(query, key, value, mask, bias, temperature)
    scale = _default_scale(query, scale)
    if not return_weights and _can_use_cudnn(query, key, value, temperature):
        try:
            return _jax_nn_attention(query, key, value, mask, bias, is_causal, scale, temperature, "cudnn")
        except (ValueError, NotImplementedError, RuntimeError, TypeError):
            pass  # cuDNN does not support these shapes/mask on this GPU: use the core.
    if is_causal:
        mask = masks_lib.combine_masks(mask, masks_lib.causal_mask(query.shape[-3], key.shape[-3]))
    out, weights = _vmapped_attention(query, key, value, mask, bias, scale, temperature)
    return (out, weights) if return_weights else out


def attention_weights(
    query: Array,
    key: Array,
    *,
    mask: Optional[Array] = None,
    bias: Optional[Array] = None,
    is_causal: bool = False,
    scale: Optional[float] = None,
    temperature: Scalar = 1.0,
) -> Array:
    """The attention matrix softmax((Q K^T * scale + bias) / temperature) alone.

    Args as `dot_product_attention` (no value needed). Returns `[..., H, T, S]`,
    row-stochastic (rows of fully masked queries are zero).
    """
    value = jnp.zeros(key.shape[:-1] + (1,), key.dtype) if hasattr(key, "shape") else key
    _, weights = dot_product_attention(
        query, key, value, mask=mask, bias=bias, is_causal=is_causal,
        scale=scale, temperature=temperature, return_weights=True,
    )
    return weights
