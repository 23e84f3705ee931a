"""Per-row attention statistics at long context, without the `[T, S]` weight matrix.

With logits x_ij = clip((q_i . k_j * scale + b_ij) / temperature) over the
keys j visible to query i, p_ij = exp(x_ij - lse_i) and lse_i = log sum_j
exp(x_ij), every statistic of a row is a sum over keys:

    entropy        H_i = -sum_j p_ij log p_ij = lse_i - sum_j p_ij x_ij
    max_weight         = exp(max_j x_ij - lse_i)
    sink_mass          = sum_{j in sinks} p_ij
    window_mass        = sum_{|i - j| < window} p_ij
    mean_distance      = sum_j p_ij |i - j|

`attention_statistics` accumulates them over chunks of keys (a
`jax.lax.scan`) with the online rescaling of flash attention (Milakov and
Gimelshein 2018; Dao et al. 2022): with a running reference m (the row max),
running sums A = sum_j exp(x_ij - m) a_ij are multiplied by exp(m - m') when a
chunk raises the max to m'. For the entropy it keeps U = sum_j exp(x_ij - m)
(x_ij - m), which moves to U' = exp(m - m') (U + L (m - m')) (L the running
total), so H_i = log L - U / L has no cancellation at large logits. Given the
lse (e.g. from `jax.nn.dot_product_attention(..., return_residual=True)`),
the reference is fixed at it: one pass, no rescaling, and the sums are still
divided by L (1 up to rounding of the lse), so a bf16 lse costs no accuracy.

Queries go in blocks (`query_chunk_size`, one after another, `jax.lax.map`),
each over the key chunks (a `jax.lax.scan`); a chunk that the positions hide
from the whole block (after a causal block's last query, outside a local
window) is skipped. The logits of one step are `[..., H, Tq, C]`, small
enough for the CPU's caches (at T = 4096 blocks of 128 queries ran ~5x faster
than all T queries per step). At T = 8192, H = 9, K = 3, D = 64, causal, with
a sink and a window, on a 2-core CPU under XLA's memory-ordered scheduler
(`--xla_cpu_enable_concurrency_optimized_scheduler=false`, which the studies
and the benchmark set), blocks of 64 queries over chunks of 512 keys take
0.75-0.82 s, 0.9-1.0x the causal forward pass (0.78-0.84 s); blocks of 32
queries were slower (1.27 s), blocks of 128-256 or chunks of 256-1024 within
noise. That needs the logits written in `[..., H, Tq, C]` order
(`attention.grouped_logits` regroups its inputs for it); written as
`[K, C, G Tq]`, each elementwise pass read them transposed and the pass took
1.20-1.23 s. The entropy term, the window mass and the distance past the
diagonal are summed as contractions (`_row_dot`); as products and sums the
pass took 2.2-2.9 s there (before the layout fix), and 1.24 s instead of
0.78-0.88 s without the causal mask at T = 4096. The window mass is summed
only over the chunks within `window` of some query of the block, and visible
keys are counted before broadcasting over heads. The statistics
themselves are `[..., H, T]`, so memory grows like T, not T x S (the backward
pass recomputes each step, `jax.checkpoint`). The inputs are checked before
any compute, then the pass runs as one compiled program per shapes and options
(called again outside `jax.jit`, at T = 512: 10 ms instead of the 0.6 s of
compiling its scans anew). Positions: query i and key j are indices (top-left
aligned, as jax.nn's `is_causal`). Masks: causal, sliding window
(`local_window`) and key padding (`key_padding [..., S]`) are built per chunk
from positions; a full `mask` or `bias` broadcastable to `[..., H, T, S]` is
accepted but is itself a T x S array, which defeats the purpose at long
context (give `[..., 1, 1, S]`-shaped ones, or the keywords).

A fully masked row gets finite values: lse = `attnjax.attention.MASKED_LSE`
(jax.nn's -0.7 x float32 max), argmax -1, every other statistic 0. As in
`attnjax.dot_product_attention`, a -inf in the bias masks its entry (a row of
-inf is a fully masked row), and a key masked for every query of its key head
by `mask`, `bias` or `key_padding`, or past the causal / local-window reach,
has its key and value zeroed before the pass (`attention.without_unread_keys`:
decided from those arrays and the positions' bounds, without a T x S array),
so NaN or inf there cannot reach a statistic, the output or a gradient.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import attention as attention_lib
from attnjax import checks
from attnjax import masks as masks_lib
from attnjax.result_repr import compact_repr
from attnjax.softmax import clip_logits

Array = jax.Array


class AttentionStatistics(NamedTuple):
    """Per batch, head and query row, `[..., H, T]` each (`attention_statistics`)."""

    lse: Array  # log sum_j exp(x_ij); MASKED_LSE in fully masked rows
    entropy: Array  # -sum_j p_ij log p_ij
    normalized_entropy: Array  # entropy / log(visible keys); 0 where <= 1 key is visible
    max_weight: Array  # max_j p_ij
    argmax: Array  # int32 key position of the max weight (first of ties); -1 in fully masked rows
    sink_mass: Array  # sum over sink_positions of p_ij
    window_mass: Optional[Array]  # sum over |i - j| < window of p_ij; None without a window
    mean_distance: Array  # sum_j p_ij |i - j|

    __repr__ = compact_repr


def _check_key_padding(key_padding, batch_shape, kv_len):
    if key_padding is None:
        return None
    key_padding = jnp.asarray(key_padding)
    if key_padding.dtype != jnp.bool_:
        raise TypeError(
            f"key_padding must be boolean (True = a real key), got dtype {key_padding.dtype}"
        )
    fitted = checks.fit_shape(key_padding, batch_shape + (kv_len,))
    if fitted is None:
        raise ValueError(
            f"key_padding of shape {tuple(key_padding.shape)} does not broadcast to "
            f"[..., S] = {batch_shape + (kv_len,)}"
        )
    return fitted


def _check_sinks(sink_positions, kv_len) -> Array:
    """Sink key positions as an int32 vector; checked against [0, S) when concrete."""
    try:
        concrete = np.asarray(sink_positions)
    except (TypeError, jax.errors.TracerArrayConversionError):
        concrete = None
    if concrete is not None:
        if concrete.size == 0:
            return jnp.zeros((0,), jnp.int32)
        if not np.issubdtype(concrete.dtype, np.integer) or concrete.ndim > 1:
            raise ValueError(
                f"sink_positions must be a sequence of int key positions, got {sink_positions!r}"
            )
        if concrete.min() < 0 or concrete.max() >= kv_len:
            raise ValueError(
                f"sink_positions {concrete.tolist()} out of range for key.shape[-3] = S = {kv_len}"
            )
    return jnp.reshape(jnp.asarray(sink_positions, jnp.int32), (-1,))


def _check_lse(lse, query):
    """A given lse must be `[..., T, H]` (jax.nn's and `dot_product_attention`'s layout)."""
    if lse is None:
        return None
    lse = jnp.asarray(lse)
    if lse.shape != query.shape[:-1]:
        raise ValueError(
            f"lse must have shape [..., T, H] = {tuple(query.shape[:-1])} "
            f"(query.shape={tuple(query.shape)}), got lse.shape={tuple(lse.shape)}"
        )
    if not jnp.issubdtype(lse.dtype, jnp.floating):
        raise TypeError(f"lse must be a floating-point array, got dtype {lse.dtype}")
    return lse


def _check_chunk(name, value, label, array):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(
            f"{name} must be an int >= 1, got {value!r} ({label}.shape={tuple(array.shape)})"
        )


def _check_options(query, key, value, chunk_size, window):
    checks.qkv(query, key, key if value is None else value)
    _check_chunk("chunk_size", chunk_size, "key", key)
    if window is not None:
        checks.positive_int("window", window)


def _pad_last(x: Optional[Array], length: int, axis: int, fill) -> Optional[Array]:
    """`x` padded with `fill` to `length` along `axis`, if that axis is not a broadcast size-1 one."""
    if x is None or x.shape[axis] == 1 or x.shape[axis] == length:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, pad, constant_values=fill)


def _slice_last(x: Optional[Array], start, size: int, axis: int) -> Optional[Array]:
    if x is None or x.shape[axis] == 1:
        return x
    return jax.lax.dynamic_slice_in_dim(x, start, size, axis=axis % x.ndim)


def _map_query_blocks(body, q_len: int, block: int, axis: int):
    """`body(q_start)` for q_start = 0, block, 2 block, ... (a `jax.lax.map`), its outputs joined along their
    query axis `axis` (negative; `block` long in each output) and cut to `q_len`. One call when
    `q_len <= block`."""
    if q_len <= block:
        return body(jnp.zeros((), jnp.int32))
    starts = jnp.arange(-(-q_len // block), dtype=jnp.int32) * block

    def join(x):
        x = jnp.moveaxis(x, 0, x.ndim + axis - 1)  # next to the query axis
        shape = x.shape[: x.ndim + axis - 1] + (-1,) + x.shape[x.ndim + axis + 1 :]
        return jax.lax.slice_in_dim(jnp.reshape(x, shape), 0, q_len, axis=len(shape) + axis)

    return jax.tree_util.tree_map(join, jax.lax.map(body, starts))


def _lift(x: Optional[Array], rank: int) -> Optional[Array]:
    return None if x is None else jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape)


def positions_mask(q_start, q_size, kv_len, start, size, is_causal, local_window):
    """Query and key positions `[Tq, 1]`, `[1, C]` of a block of queries and a chunk of keys, and its positional
    mask `[Tq, C]` (keys past `kv_len`, the causal mask, the local window `(left, right)` or None)."""
    i = q_start + jnp.arange(q_size, dtype=jnp.int32)[:, None]
    j = start + jnp.arange(size, dtype=jnp.int32)[None, :]
    visible = jnp.broadcast_to(j < kv_len, (q_size, size))  # padding keys of the last chunk
    if is_causal:
        visible = visible & (j <= i)
    if local_window is not None:
        visible = visible & (j >= i - local_window[0]) & (j <= i + local_window[1])
    return i, j, visible


def _nearest_distance(i: Array, j: Array) -> Array:
    """min |i - j| over query positions `i [Tq, 1]` and key positions `j [1, C]` (consecutive each)."""
    return jnp.maximum(0, jnp.maximum(j[0, 0] - i[-1, 0], i[0, 0] - j[0, -1]))


def _finish(carry, dtype) -> dict:
    """The statistics from the accumulated sums (safe divisions: finite values in fully masked rows)."""
    ref, top, arg, total, u, count, sink, window, distance = carry
    has = total > 0
    safe = jnp.where(has, total, jnp.ones_like(total))
    lse = jnp.where(has, ref + jnp.log(safe), jnp.asarray(attention_lib.MASKED_LSE, dtype))
    entropy = jnp.where(has, jnp.log(safe) - u / safe, jnp.zeros_like(total))
    log_count = jnp.log(jnp.where(count > 1, count, jnp.full_like(count, 2)))
    zero = jnp.zeros_like(total)
    return dict(
        lse=lse,
        entropy=entropy,
        normalized_entropy=jnp.where(count > 1, entropy / log_count, zero),
        max_weight=jnp.where(has, jnp.exp(top - ref) / safe, zero),
        argmax=jnp.where(has, arg, -1),
        sink_mass=jnp.where(has, sink / safe, zero),
        window_mass=None if window is None else jnp.where(has, window / safe, zero),
        mean_distance=jnp.where(has, distance / safe, zero),
    )


def attention_statistics(
    query: Array,
    key: Array,
    *,
    mask: Optional[Array] = None,
    bias: Optional[Array] = None,
    is_causal: bool = False,
    scale: Optional[float] = None,
    temperature: Union[float, Array] = 1.0,
    key_padding: Optional[Array] = None,
    local_window: Union[int, tuple[int, int], None] = None,
    sink_positions: Sequence[int] = (),
    window: Optional[int] = None,
    lse: Optional[Array] = None,
    chunk_size: int = 512,
    query_chunk_size: int = 64,
    value: Optional[Array] = None,
) -> Union[AttentionStatistics, tuple[AttentionStatistics, Array]]:
    """Per-row statistics of softmax((Q K^T * scale + bias) / temperature), chunked over keys.

    Args:
      query: `[..., T, H, D]`.
      key: `[..., S, K, D]`, K dividing H (grouped-query attention).
      mask: boolean (True = attend) or numeric 0/1, broadcastable to
        `[..., H, T, S]`, as in `attnjax.dot_product_attention`. A full
        `[T, S]` mask is a T x S array: prefer the keywords below.
      bias: additive logits bias broadcastable to `[..., H, T, S]` (a full one
        is a T x S array too); -inf entries are masked entries.
      is_causal: query i attends to keys j <= i.
      scale: logits scale, a finite number; default 1/sqrt(D).
      temperature: positive scalar dividing the scaled, biased logits.
      key_padding: boolean `[..., S]`, True for real keys (built per chunk).
      local_window: w or (left, right): query i attends to keys
        i - left <= j <= i + right (jax.nn's `local_window_size`).
      sink_positions: key positions whose total weight is `sink_mass`.
      window: int >= 1; `window_mass` is the weight on keys with |i - j| < window
        (for causal attention, the last `window` keys).
      lse: optional `[..., T, H]` log-sum-exp of the same logits (jax.nn's
        `return_residual` layout): one pass with p = exp(x - lse) instead of
        online rescaling.
      chunk_size: keys per step (int >= 1; need not divide S).
      query_chunk_size: queries per block (int >= 1; need not divide T): the
        blocks run one after another, each over every key chunk its positions
        do not hide (a causal block skips the chunks after its last query).
      value: optional `[..., S, K, Dv]`: the same pass also accumulates the
        attention output o_i = sum_j p_ij v_j (online, as flash attention),
        returned as `(statistics, output [..., T, H, Dv])` in value's dtype
        (0 in fully masked rows).

    Returns:
      `AttentionStatistics`, each field `[..., H, T]`, float in
      `promote_types(dtype, float32)` (argmax int32); see the module docstring
      for fully masked rows; with `value`, `(statistics, output)`. jit-, vmap-
      and grad-safe.

    Raises:
      ValueError: naming the argument and shapes, before any compute.
      TypeError: likewise, for an argument of the wrong type or dtype.
    """
    _check_options(query, key, value, chunk_size, window)
    _check_chunk("query_chunk_size", query_chunk_size, "query", query)
    checks.temperature(temperature)
    checks.scale(scale)
    checks.boolean("is_causal", is_causal)
    batch_shape, (q_len, num_heads), kv_len = query.shape[:-3], query.shape[-3:-1], key.shape[-3]
    target = batch_shape + (num_heads, q_len, kv_len)
    mask = checks.bool_mask(checks.broadcastable("mask", mask, target))
    bias = checks.broadcastable("bias", bias, target)
    mask = masks_lib.combine_masks(mask, attention_lib.bias_mask(bias))
    key_padding = _check_key_padding(key_padding, batch_shape, kv_len)
    local_window = checks.window(local_window)
    sinks = _check_sinks(sink_positions, kv_len)
    lse = _check_lse(lse, query)
    dtype = jnp.promote_types(query.dtype, jnp.float32)
    scale = attention_lib.default_scale(query.shape[-1]) if scale is None else scale
    statistics, output = _statistics(
        query,
        key,
        value,
        mask,
        bias,
        key_padding,
        lse,
        sinks,
        jnp.asarray(scale, dtype),
        jnp.asarray(temperature, dtype),
        is_causal=is_causal,
        local_window=local_window,
        window=window,
        chunk_size=chunk_size,
        query_chunk_size=query_chunk_size,
    )
    if value is None:
        return statistics
    return statistics, output


@functools.partial(
    jax.jit,
    static_argnames=("is_causal", "local_window", "window", "chunk_size", "query_chunk_size"),
)
def _statistics(
    query,
    key,
    value,
    mask,
    bias,
    key_padding,
    lse,
    sinks,
    scale,
    temperature,
    *,
    is_causal,
    local_window,
    window,
    chunk_size,
    query_chunk_size,
):
    """The pass of `attention_statistics` on its checked inputs (scale and temperature as arrays of the
    compute dtype; `local_window` as `(left, right)` or None): one compiled program per shapes and options,
    so that repeated calls outside `jax.jit` reuse it (a `lax.scan` run eagerly is compiled at every call).
    Returns `(AttentionStatistics, output [..., T, H, Dv] or None)`."""
    batch_shape, (q_len, num_heads), kv_len = query.shape[:-3], query.shape[-3:-1], key.shape[-3]
    target = batch_shape + (num_heads, q_len, kv_len)
    data_mask = masks_lib.combine_masks(
        mask, None if key_padding is None else key_padding[..., None, None, :]
    )
    key, value = attention_lib.without_unread_keys(
        key,
        value,
        data_mask,
        reachable=masks_lib.reachable_keys(q_len, kv_len, is_causal=is_causal, window=local_window),
    )
    dtype = jnp.promote_types(query.dtype, jnp.float32)
    rank = len(target)

    size, block = min(chunk_size, kv_len), min(query_chunk_size, q_len)
    num_chunks = -(-kv_len // size)
    padded, q_padded = num_chunks * size, -(-q_len // block) * block
    key, query = _pad_last(key, padded, -3, 0), _pad_last(query, q_padded, -3, 0)
    value = _pad_last(value, padded, -3, 0)
    mask = _pad_last(_pad_last(_lift(mask, rank), padded, -1, False), q_padded, -2, False)
    bias = _pad_last(_pad_last(_lift(bias, rank), padded, -1, 0), q_padded, -2, 0)
    key_padding = _pad_last(key_padding, padded, -1, False)
    lse = _pad_last(lse, q_padded, -2, 0)
    fill = jnp.asarray(-jnp.finfo(dtype).max / 2, dtype)  # below every clipped logit (>= -max/4)
    online = lse is None
    one_sided = is_causal or (
        local_window is not None and local_window[1] == 0
    )  # no visible key j > i
    starts = jnp.arange(num_chunks, dtype=jnp.int32) * size

    def block_statistics(q_start):
        """The statistics of queries q_start .. q_start + block - 1, `[..., H, block]` each."""
        q = jax.lax.dynamic_slice_in_dim(query, q_start, block, axis=query.ndim - 3)
        block_mask, block_bias = (
            _slice_last(mask, q_start, block, -2),
            _slice_last(bias, q_start, block, -2),
        )

        def accumulate(carry, start, i, j, visible):
            ref, top, arg, total, u, count, sink, win, distance, out = carry
            x = attention_lib.grouped_logits(
                q, jax.lax.dynamic_slice_in_dim(key, start, size, axis=key.ndim - 3), scale=scale
            )  # [..., H, Tq, C]
            chunk_bias = _slice_last(block_bias, start, size, -1)
            if chunk_bias is not None:
                x = x + chunk_bias.astype(dtype)
            x = clip_logits(x / temperature)
            visible = _lift(visible, rank)
            if block_mask is not None:
                visible = visible & _slice_last(block_mask, start, size, -1)
            if key_padding is not None:
                visible = visible & _lift(
                    _slice_last(key_padding, start, size, -1)[..., None, None, :], rank
                )
            # Counted before broadcasting over heads (a positional mask is one [Tq, C] for all).
            chunk_count = jnp.sum(visible, axis=-1, dtype=dtype)
            visible = jnp.broadcast_to(visible, x.shape)
            x = jnp.where(visible, x, fill)
            chunk_top = jnp.max(x, axis=-1)
            # The first key at the chunk's max, as a min-reduction (XLA's CPU argmax is ~10x slower than a max).
            first = jnp.min(jnp.where(x == chunk_top[..., None], j[0], start + size), axis=-1)
            arg = jnp.where(chunk_top > top, first, arg)
            top = jnp.maximum(top, chunk_top)
            new_ref = jax.lax.stop_gradient(jnp.maximum(ref, chunk_top)) if online else ref
            alpha = jnp.exp(ref - new_ref)
            shifted = x - new_ref[..., None]  # <= 0 on visible keys when online
            e = jnp.exp(jnp.where(visible, shifted, fill))  # exactly 0 on masked keys
            chunk_total = jnp.sum(e, axis=-1)
            # Weights of key j alone go through one matmul with e (fast); sum_j e |i - j| is
            # (i - start) L - sum_j e (j - start), + 2 sum_{j > i} e (j - i) unless no key j > i is visible.
            by_key = jnp.stack(
                [jnp.any(j[0][:, None] == sinks[None, :], axis=-1), j[0] - start], axis=-1
            )
            by_key = jnp.matmul(
                e, by_key.astype(dtype), precision=jax.lax.Precision.HIGHEST
            )  # [..., H, Tq, 2]
            chunk_distance = (
                _lift((i[:, 0] - start).astype(dtype), rank - 1) * chunk_total - by_key[..., 1]
            )
            if not one_sided:
                chunk_distance = chunk_distance + 2 * _row_dot(
                    e, _lift(jnp.maximum(j - i, 0).astype(dtype), rank)
                )
            u = (
                alpha * u
                + (alpha * total) * (ref - new_ref)
                + _row_dot(e, jnp.where(visible, shifted, 0))
            )
            total = alpha * total + chunk_total
            count = count + chunk_count
            distance = alpha * distance + chunk_distance
            sink = alpha * sink + by_key[..., 0]
            if window is not None:
                # Summed only where some |i - j| < window: near the diagonal, a few chunks per block.
                win = alpha * win + jax.lax.cond(
                    _nearest_distance(i, j) < window,
                    lambda: _row_dot(e, _lift((jnp.abs(i - j) < window).astype(dtype), rank)),
                    lambda: jnp.zeros_like(chunk_total),
                )
            if value is not None:
                out = alpha[..., None] * out + _weighted_values(
                    e, jax.lax.dynamic_slice_in_dim(value, start, size, axis=value.ndim - 3)
                )
            return new_ref, top, arg, total, u, count, sink, win, distance, out

        def step(carry, start):
            # A chunk that the positions alone hide from the whole block (causal, local window) adds nothing:
            # skipped (under vmap `cond` computes both branches; the result is the same).
            i, j, visible = positions_mask(
                q_start, block, kv_len, start, size, is_causal, local_window
            )
            return jax.lax.cond(
                jnp.any(visible), accumulate, lambda carry, *_: carry, carry, start, i, j, visible
            ), None

        shape = batch_shape + (num_heads, block)
        zeros = jnp.zeros(shape, dtype)
        if online:
            ref = jnp.full(shape, fill, dtype)
        else:
            bound = jnp.finfo(dtype).max / 4
            block_lse = jax.lax.dynamic_slice_in_dim(lse, q_start, block, axis=lse.ndim - 2)
            ref = jax.lax.stop_gradient(
                jnp.clip(jnp.swapaxes(block_lse, -1, -2).astype(dtype), -bound, bound)
            )
        out = None if value is None else jnp.zeros(shape + (value.shape[-1],), dtype)
        init = (
            ref,
            jnp.full(shape, fill, dtype),
            jnp.full(shape, -1, jnp.int32),
            zeros,
            zeros,
            zeros,
            zeros,
            None if window is None else zeros,
            zeros,
            out,
        )
        carry, _ = jax.lax.scan(jax.checkpoint(step), init, starts)
        return _finish(carry[:-1], dtype), _normalized_output(carry[-1], carry[3])

    statistics, output = _map_query_blocks(block_statistics, q_len, block, -1)
    if value is None:
        return AttentionStatistics(**statistics), None
    return AttentionStatistics(**statistics), jnp.moveaxis(output, -1, -3).astype(
        value.dtype
    )  # [..., T, H, Dv]


def _row_dot(a: Array, b: Array) -> Array:
    """sum_j a_ij b_ij over the last axis: a `[..., C]`, b broadcastable to it -> `[...]`.

    As a contraction (`dot_general`), not `jnp.sum(a * b, -1)`: XLA's CPU
    backend gives that product-and-sum to a library reduction that first
    writes the product `[..., H, Tq, C]` out (timings in the module
    docstring); the sums are the same up to their order.
    """
    return jnp.einsum("...c,...c->...", a, b, precision=jax.lax.Precision.HIGHEST)


def _weighted_values(e: Array, value: Array) -> Array:
    """sum_j e_ij v_j per head: e `[..., H, Tq, C]`, value `[..., C, K, Dv]` (head h reads key head h // (H / K))
    -> `[..., H, Tq, Dv]`, in e's dtype."""
    *batch, heads, q_len, size = e.shape
    kv_heads = value.shape[-2]
    grouped = jnp.reshape(e, (*batch, kv_heads, heads // kv_heads, q_len, size))
    out = jnp.einsum(
        "...kgtc,...ckd->...kgtd",
        grouped,
        value.astype(e.dtype),
        precision=jax.lax.Precision.HIGHEST,
    )
    return jnp.reshape(out, (*batch, heads, q_len, value.shape[-1]))


def _normalized_output(out: Optional[Array], total: Array) -> Optional[Array]:
    """o = (sum_j e_ij v_j) / sum_j e_ij, as `[..., H, Dv, Tq]` (query axis last, as the statistics'); 0 in
    fully masked rows; None without values."""
    if out is None:
        return None
    has = (total > 0)[..., None]
    return jnp.swapaxes(jnp.where(has, out / jnp.where(has, total[..., None], 1), 0), -1, -2)
