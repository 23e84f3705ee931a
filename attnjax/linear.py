"""Linear (kernelized) attention: parallel, causal chunked, and recurrent forms.

With a feature map phi: R^D -> R^M (`attnjax.features`) the softmax
similarity is replaced by sim(q, k) = phi(q) . phi(k) (Katharopoulos et al.
2020, "Transformers are RNNs"), and by associativity

    out_t = sum_s phi(q_t).phi(k_s) v_s / sum_s phi(q_t).phi(k_s)
          = phi(q_t)^T S / phi(q_t)^T z,   S = sum_s phi(k_s) v_s^T  [M, Dv],
                                           z = sum_s phi(k_s)        [M].

Non-causal, the sums run over every valid key: O(T M Dv) time, no [T, S]
matrix. Causal, they run over s <= t; `linear_attention` computes them in
chunks of C positions: inside a chunk the masked quadratic form
(phi(Q_c) phi(K_c)^T ⊙ tril) V_c, across chunks the state (S, z) of all
earlier chunks, carried by a `lax.scan` over chunks in float32. Time
O(T (C M + C Dv + M Dv)); memory O(T (M + C)) per head, plus one [M, Dv]
state per chunk (not per position) saved for the backward pass.
`linear_attention_step` is the same recurrence one position at a time (the
RNN form, for decoding).

Layout and heads follow `attnjax.dot_product_attention`: query `[..., T, H, D]`,
key `[..., S, K, D]`, value `[..., S, K, Dv]`, output `[..., T, H, Dv]`; K
divides H and query head h reads key/value head h // (H // K).

Masks: only key padding can be expressed in linear form (a key is in or out of
the sums for every query); a general [T, S] mask cannot. `mask` is therefore a
boolean key mask broadcastable to `[..., H, T, S]` whose H and T axes have size
1, e.g. `attnjax.masks.key_padding_mask(...)` `[..., 1, 1, S]`, or a plain
`[S]` vector. Masked keys (and their values) are zeroed before any compute, so
they add nothing to S or z, whatever they hold. Use `is_causal` for causality;
with T != S, query t sees keys s <= t (top-left alignment, as `masks.causal_mask`).

Numerics: features, S, z, numerator and normaliser are computed in at least
float32 (bf16/fp16 inputs are promoted); the output comes back in value's
dtype. The normaliser is den + eps (eps = 0 by default: no bias). Positive
feature maps (`elu_plus_one`, `relu`, `relu_random`, `favor_plus`) keep
den >= 0 and the weights a probability distribution; `trig_random` does not
(its den may vanish or be negative).

Floating-point range. The output is unchanged when phi(q_t) is multiplied by
any c_t > 0 (it cancels between row t's numerator and normaliser), and when
every key feature query t sees is multiplied by one common b_t > 0. So
features are carried as f * 2^n, n an integer per query and per key and f
with its largest |entry| in [1/2, 1), and keys are summed in units of the
largest key exponent among those summed: over all keys (non-causal); in the
causal form, across chunks that of every earlier key (the carried state is
rescaled when a larger key arrives) and inside a chunk, per query t, that of
the keys s <= t (a running maximum, so no later key changes an earlier row);
in the recurrent form the state's, which it carries
(`LinearAttentionState.log2_scale`). Powers of two multiply exactly, so the
rescaling changes no bit of a result that does not under- or overflow:
features at any scale the dtype holds give the output of unit scale (relu at
1e-30 or 1e30 in float32, whose products 1e-60 and 1e60 it does not hold).
The division is differentiated as d(num / den) = (d num - out d den) / den, so
gradients stay finite where den^2 would underflow. Maps that give their
logarithm (`elu_plus_one`, `favor_plus`; see `attnjax.features`) are rescaled
in log space, before exp, so features that would all underflow (elu + 1 at
x = -1e4, FAVOR+ keys 100x the queries) still give their attention. eps keeps
its meaning: it is added to the normaliser in the caller's units (rescaled
with it), so with eps > 0 the output does depend on the features' scale.

What remains: a key whose features are below 2^-126 (float32; 2^-1022 in
float64: XLA on CPU flushes subnormals) times the largest key feature it is
summed with counts as 0. A query that sees only such keys, or no key at all
(masked, or before the first key), or whose features are all 0 (a relu query
with no positive coordinate, a map that underflows inside), or whose features
meet no visible key's (phi(q).phi(k) = 0 for each), has normaliser 0 (with
eps = 0): it attends to nothing. Its output is 0, NaN-free and with gradient
0, and its row of `linear_attention_weights` sums to 0 instead of 1, which is
how such rows are told apart from an average.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import einops
import jax
import jax.numpy as jnp
import numpy as np

from attnjax import checks
from attnjax import features as features_lib
from attnjax import masks as masks_lib
from attnjax.result_repr import compact_repr

Array = jax.Array

DEFAULT_CHUNK_SIZE = 64


# --------------------------------------------------------------------------
# Input checks (static: shapes and dtypes only, before any compute)


def _check_options(feature_map: Callable, eps: float, chunk_size: Optional[int] = None) -> None:
    if not callable(feature_map):
        raise TypeError(f"feature_map must be callable, got {type(feature_map).__name__}")
    if (
        not isinstance(eps, (int, float, np.floating, np.integer))
        or isinstance(eps, bool)
        or not math.isfinite(eps)
        or eps < 0
    ):
        raise ValueError(f"eps must be a non-negative finite float, got {eps}")
    if chunk_size is not None:
        if not isinstance(chunk_size, (int, np.integer)) or isinstance(chunk_size, bool):
            raise TypeError(f"chunk_size must be an int, got {type(chunk_size).__name__}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")


def _key_valid(mask: Optional[Array], query: Array, key: Array) -> Optional[Array]:
    """Key mask broadcastable to `[..., H, T, S]` with H = T = 1 -> valid keys `[*batch, S]`."""
    if mask is None:
        return None
    target = checks.logits_shape(query, key)
    mask = checks.broadcastable("mask", mask, target)
    if mask.dtype != jnp.bool_:
        raise TypeError(f"mask must be boolean (True = attend), got dtype {mask.dtype}")
    if any(d != 1 for d in mask.shape[-3:-1]):
        raise ValueError(
            f"linear attention supports key masks only: mask must broadcast to [..., H, T, S] "
            f"with size 1 along H and T, e.g. key_padding_mask(...) [..., 1, 1, S] "
            f"(got mask.shape={tuple(mask.shape)}); a general [T, S] mask has no linear "
            f"form (use is_causal=True for causal masking)"
        )
    valid = mask if mask.ndim == 1 else jnp.reshape(mask, mask.shape[:-3] + mask.shape[-1:])
    batch = query.shape[:-3]
    valid = jnp.reshape(valid, (1,) * (len(batch) + 1 - valid.ndim) + valid.shape)
    return jnp.broadcast_to(valid, batch + (key.shape[-3],))


def _prepare(query, key, value, mask, feature_map, eps, chunk_size=None):
    checks.qkv(query, key, value)
    _check_options(feature_map, eps, chunk_size)
    return _key_valid(mask, query, key)


def _compute_dtype(*arrays: Array):
    dtype = jnp.result_type(*(x.dtype for x in arrays))
    return jnp.promote_types(dtype, jnp.float32)


# --------------------------------------------------------------------------
# Shared pieces


def _cast_and_mask(query, key, value, valid):
    """q, k, v in the compute dtype, masked keys and values set to 0 (so nothing leaks from them)."""
    dtype = _compute_dtype(query, key, value)
    q, k, v = query.astype(dtype), key.astype(dtype), value.astype(dtype)
    if valid is not None:
        keep = valid[..., None, None]
        k = jnp.where(keep, k, jnp.zeros_like(k))
        v = jnp.where(keep, v, jnp.zeros_like(v))
    return q, k, v


# --------------------------------------------------------------------------
# Features as f * 2^n (module doc, "Floating-point range")
#
# n is an int32 per row (query or key); _NO_KEYS stands for the exponent of an
# all-zero row and of a set with no key: below every real exponent (those are
# clipped to +-_MAX_EXPONENT), so it never wins a maximum, and far enough from
# the int32 limits that sums and differences of two exponents cannot overflow.

_MAX_EXPONENT = 2**16
_NO_KEYS = -(2**29)
# ln 2 = _LN2_HI + _LN2_LO, _LN2_HI with 7 significant bits, so n * _LN2_HI is
# exact for |n| <= 2^16 in float32 (Cody and Waite's argument reduction).
_LN2_HI = 89.0 / 128.0
_LN2_LO = math.log(2.0) - _LN2_HI


def _pow2(k: Array, dtype) -> Array:
    """2^k, exactly, for int k clipped to the dtype's normal exponents (its bits, built directly)."""
    info = jnp.finfo(dtype)
    bits = {4: jnp.int32, 8: jnp.int64}[jnp.dtype(dtype).itemsize]
    k = jnp.clip(k, info.minexp, info.maxexp - 1).astype(bits)
    return jax.lax.bitcast_convert_type((k - info.minexp + 1) << info.nmant, dtype)


def _ldexp(x: Array, k: Array) -> Array:
    """x * 2^k for int k (broadcast against x), as two exact power-of-two factors.

    Exact unless the result under- or overflows; k beyond twice the dtype's
    exponent range is clipped there, which still gives 0 (or inf) for x <= 1
    (or >= 1), as the unclipped product would.
    """
    info = jnp.finfo(x.dtype)
    k = jnp.clip(k, 2 * info.minexp, 2 * (info.maxexp - 1))
    half = k >> 1
    return x * _pow2(half, x.dtype) * _pow2(k - half, x.dtype)


def _down(k: Array, dtype) -> Array:
    """2^k for int k <= 0, exactly; 0 where k is below the dtype's smallest normal exponent
    (-126 in float32): a term that far below the ones it is summed with, the floor the
    module doc names."""
    small = k < jnp.finfo(dtype).minexp
    return jnp.where(small, jnp.zeros((), dtype), _pow2(k, dtype))


def _shrink(x: Array, k: Array) -> Array:
    """x * 2^k for int k <= 0 (broadcast against x): one exact factor, `_down`."""
    return x * _down(k, x.dtype)


def _scaled_features(feature_map: Callable, x: Array, *, is_query: bool) -> tuple[Array, Array]:
    """phi(x) = f * 2^n: f `[..., M]` in x's dtype, largest |f| per row in [1/2, 1) (or all 0),
    n `[...]` int32 (_NO_KEYS for all-zero rows). n is held out of the gradient.

    Maps with `log` (`features.call_log_feature_map`) are reduced in log space:
    f = exp(log phi - n ln 2), so no row underflows before it is rescaled.
    """
    log_phi = features_lib.call_log_feature_map(feature_map, x, is_query=is_query)
    if log_phi is None:
        phi = features_lib.call_feature_map(feature_map, x, is_query=is_query).astype(x.dtype)
        top = jax.lax.stop_gradient(jnp.max(jnp.abs(phi), axis=-1))
        _, n = jnp.frexp(top)
        f = _ldexp(phi, -n[..., None])
        return f, jnp.where(top == 0, _NO_KEYS, n)
    log_phi = log_phi.astype(x.dtype)
    largest = jax.lax.stop_gradient(jnp.max(log_phi, axis=-1))
    top = jnp.where(jnp.isfinite(largest), largest, jnp.zeros_like(largest))
    n = jnp.clip(jnp.floor(top * math.log2(math.e)) + 1, -_MAX_EXPONENT, _MAX_EXPONENT)
    rest = (top - n * _LN2_HI) - n * _LN2_LO  # top - n ln 2, in [-ln 2, 0) up to rounding
    f = jnp.exp((log_phi - top[..., None]) + rest[..., None])  # log_phi - top: exact near top
    return f, jnp.where(largest == -jnp.inf, _NO_KEYS, n.astype(jnp.int32))


def _features(q, k, feature_map, keep=None):
    """(f_q `[..., M]`, n_q `[...]`), (f_k, n_k): `_scaled_features` of q and k; keys where
    `keep` (broadcastable to f_k) is False get f = 0 and n = _NO_KEYS."""
    f_q, n_q = _scaled_features(feature_map, q, is_query=True)
    f_k, n_k = _scaled_features(feature_map, k, is_query=False)
    if f_q.shape[-1] != f_k.shape[-1]:
        raise ValueError(
            f"feature_map gives {f_q.shape[-1]} query features but {f_k.shape[-1]} key features"
        )
    if keep is not None:
        f_k = jnp.where(keep, f_k, jnp.zeros_like(f_k))
        n_k = jnp.where(keep[..., 0], n_k, _NO_KEYS)
    return (f_q, n_q), (f_k, n_k)


def _set_scale(n_k: Array, axis: int) -> Array:
    """The exponent of a set of keys: the largest n over `axis` (_NO_KEYS if none)."""
    return jnp.max(n_k, axis=axis)


def _key_sums(f_k: Array, n_k: Array, v: Array, scale: Array) -> tuple[Array, Array]:
    """S = sum_s phi(k_s) v_s^T `[..., M, Dv]` and z = sum_s phi(k_s) `[..., M]` in units of
    2^scale (scale `[...]` >= every n_k): f_k `[..., S, M]`, n_k `[..., S]`, v `[..., S, Dv]`.
    Each key's factor 2^(n_k - scale) <= 1 goes on its value row and into z's weights, not
    on its M features."""
    weight = _down(n_k - scale[..., None], f_k.dtype)  # [..., S]
    kv = jnp.einsum("...sm,...se->...me", f_k, v * weight[..., None])
    z = jnp.einsum("...s,...sm->...m", weight, f_k)
    return kv, z


def _group_queries(x: Array, num_kv_heads: int) -> Array:
    """`[..., H, X]` -> `[..., K, G, X]` (query head h = k * G + g)."""
    return einops.rearrange(x, "... (k g) x -> ... k g x", k=num_kv_heads)


def _divide(num: Array, den: Array) -> Array:
    """num `[..., X]` / den `[...]`, 0 where den is 0."""
    nonzero = (den != 0)[..., None]
    safe = jnp.where(nonzero, den[..., None], jnp.ones_like(den[..., None]))
    return jnp.where(nonzero, num / safe, jnp.zeros_like(num))


@jax.custom_jvp
def _ratio(num: Array, den: Array) -> Array:
    """`_divide`, differentiated as d(num / den) = (d num - out d den) / den: no den^2, which
    underflows (float32: den < 1e-19) long before den does."""
    return _divide(num, den)


@_ratio.defjvp
def _ratio_jvp(primals, tangents):
    num, den = primals
    d_num, d_den = tangents
    out = _divide(num, den)
    return out, _divide(d_num - out * d_den[..., None], den)


def _normalise(num: Array, den: Array, eps: float, log2_units: Array) -> Array:
    """num `[..., Dv]` / (den + eps) `[...]`, num and den given in units of 2^log2_units `[...]`
    (so eps, in the caller's units, is eps * 2^-log2_units here); 0 where that is 0."""
    if eps:
        den = den + _ldexp(jnp.asarray(eps, den.dtype), -log2_units)
    return _ratio(num, den)


def _expand(x: Array, rank: int) -> Array:
    """Adds leading size-1 axes up to `rank` (explicit, for strict rank promotion)."""
    return jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape)


# --------------------------------------------------------------------------
# Non-causal: one pass over the keys


def _linear_noncausal(q, k, v, feature_map, eps, valid):
    """q `[..., T, H, D]`, k `[..., S, K, D]`, v `[..., S, K, Dv]` -> `[..., T, H, Dv]`."""
    keep = None if valid is None else valid[..., None, None]
    (f_q, n_q), (f_k, n_k) = _features(q, k, feature_map, keep)
    scale = _set_scale(n_k, axis=-2)  # [..., K]: one set of keys per head
    kv, z = _key_sums(  # S [..., K, M, Dv], z [..., K, M]
        jnp.swapaxes(f_k, -3, -2), jnp.swapaxes(n_k, -2, -1), jnp.swapaxes(v, -3, -2), scale
    )
    f_q = _group_queries(f_q, k.shape[-2])  # [..., T, K, G, M]
    num = jnp.einsum("...tkgm,...kme->...tkge", f_q, kv)
    den = jnp.einsum("...tkgm,...km->...tkg", f_q, z)
    units = _group_queries(n_q[..., None], k.shape[-2])[..., 0] + scale[..., None, :, None]
    out = _normalise(num, den, eps, units)  # [..., T, K, G, Dv]
    return einops.rearrange(out, "... k g e -> ... (k g) e")


# --------------------------------------------------------------------------
# Causal: chunks, quadratic inside, a scanned state across
#
# Layout: chunk axis first (it is scanned), then batch, heads, positions in
# the chunk, features: every matmul is a plain batched [rows, M] x [M, cols].
# The G query heads sharing a key/value head are stacked as G*C rows.


def _to_chunks(x: Array, chunk: int) -> Array:
    """`[..., T, h, X]` -> `[N, ..., h, C, X]`, zero-padding T up to N * C."""
    padding = -x.shape[-3] % chunk
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + [(0, padding), (0, 0), (0, 0)])
    return einops.rearrange(x, "... (n c) h x -> n ... h c x", c=chunk)


def _from_chunks(x: Array, length: int) -> Array:
    """`[N, ..., h, C, X]` -> `[..., T, h, X]`, dropping padding beyond `length`."""
    return einops.rearrange(x, "n ... h c x -> ... (n c) h x")[..., :length, :, :]


def _align_causal_keys(k: Array, v: Array, valid: Optional[Array], q_len: int):
    """Top-left causal alignment: keys s >= T are never seen; missing keys are invalid."""
    kv_len = k.shape[-3]
    if valid is None:
        valid = jnp.ones(k.shape[:-3] + (kv_len,), bool)
    if kv_len >= q_len:
        return k[..., :q_len, :, :], v[..., :q_len, :, :], valid[..., :q_len]
    pad = [(0, 0)] * (k.ndim - 3) + [(0, q_len - kv_len), (0, 0), (0, 0)]
    valid = jnp.pad(valid, [(0, 0)] * (valid.ndim - 1) + [(0, q_len - kv_len)])
    return jnp.pad(k, pad), jnp.pad(v, pad), valid


def _carry_state(f_q, f_k, n_k, v):
    """Contributions of all earlier chunks, by a scan over chunks carrying (S, z, exponent).

    f_q `[N, ..., K, R, M]`, f_k `[N, ..., K, C, M]` with exponents n_k `[N, ..., K, C]`,
    v `[N, ..., K, C, Dv]` -> numerator `[N, ..., K, R, Dv]`, normaliser
    `[N, ..., K, R]`, both in units of 2^state_scale, and state_scale `[N, ..., K]`
    (_NO_KEYS before any key), where chunk n reads only S_n = sum over keys of
    chunks j < n of phi(k) v^T. The state is kept at the scale of the largest key
    so far: rescaled (exactly) when a larger one comes.
    """

    def step(state, chunk):
        kv, z, state_scale = state
        q_n, k_n, n_n, v_n = chunk
        num = jnp.einsum("...rm,...me->...re", q_n, kv)
        den = jnp.einsum("...rm,...m->...r", q_n, z)
        new = jnp.maximum(state_scale, _set_scale(n_n, axis=-1))
        old = (state_scale - new)[..., None]
        kv_n, z_n = _key_sums(k_n, n_n, v_n, new)
        kv = _shrink(kv, old[..., None]) + kv_n
        z = _shrink(z, old) + z_n
        return (kv, z, new), (num, den, state_scale)

    kv0 = jnp.zeros(f_k.shape[1:-2] + f_k.shape[-1:] + v.shape[-1:], f_k.dtype)
    z0 = jnp.zeros(f_k.shape[1:-2] + f_k.shape[-1:], f_k.dtype)
    scale0 = jnp.full(n_k.shape[1:-1], _NO_KEYS, n_k.dtype)
    _, (num, den, state_scale) = jax.lax.scan(step, (kv0, z0, scale0), (f_q, f_k, n_k, v))
    return num, den, state_scale


def _linear_causal(q, k, v, feature_map, eps, valid, chunk_size):
    """q `[..., T, H, D]`, k `[..., S, K, D]`, v `[..., S, K, Dv]` -> `[..., T, H, Dv]`."""
    length, num_heads, num_kv_heads = q.shape[-3], q.shape[-2], k.shape[-2]
    group = num_heads // num_kv_heads
    k, v, valid = _align_causal_keys(k, v, valid, length)
    chunk = min(chunk_size, length)
    q = _to_chunks(q, chunk)  # [N, ..., H, C, D]
    q = einops.rearrange(q, "... (k g) c d -> ... k (g c) d", k=num_kv_heads)  # rows (g, c)
    k, v = _to_chunks(k, chunk), _to_chunks(v, chunk)  # [N, ..., K, C, D|Dv]
    keep = _to_chunks(valid[..., None, None], chunk)  # [N, ..., 1, C, 1]; padding is invalid
    (f_q, n_q), (f_k, n_k) = _features(q, k, feature_map, keep)
    # Across chunks: the state, in units of its largest key (_carry_state).
    num_carried, den_carried, carried_scale = _carry_state(f_q, f_k, n_k, v)
    # Row t in units of 2^units_t, the largest key exponent it has seen: the state's and
    # those of the chunk's keys s <= t (a running maximum: no later key changes a row).
    units = jnp.maximum(jax.lax.cummax(n_k, axis=n_k.ndim - 1), carried_scale[..., None])
    units = jnp.tile(units, (1,) * (units.ndim - 1) + (group,))  # [N, ..., K, G*C], rows (g, c)
    # Inside a chunk: the masked quadratic form, each term phi(q_t).phi(k_s) in row t's
    # units (where, not a product, so a non-finite future score cannot leak as 0 * inf).
    seen = _expand(jnp.tile(masks_lib.causal_mask(chunk), (group, 1)), units.ndim + 1)
    shift = jnp.where(seen, n_k[..., None, :] - units[..., :, None], 0)
    scores = jnp.einsum("...rm,...cm->...rc", f_q, f_k)  # [N, ..., K, G*C, C]
    scores = _shrink(jnp.where(seen, scores, jnp.zeros_like(scores)), shift)
    carried = carried_scale[..., None] - units  # <= 0
    num = jnp.einsum("...rc,...ce->...re", scores, v) + _shrink(num_carried, carried[..., None])
    den = jnp.sum(scores, axis=-1) + _shrink(den_carried, carried)
    out = _normalise(num, den, eps, n_q + units)  # [N, ..., K, G*C, Dv]
    return _from_chunks(einops.rearrange(out, "... k (g c) e -> ... (k g) c e", g=group), length)


# --------------------------------------------------------------------------
# Public functions


def linear_attention(
    query: Array,
    key: Array,
    value: Array,
    *,
    feature_map: Callable,
    is_causal: bool = False,
    mask: Optional[Array] = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    eps: float = 0.0,
) -> Array:
    """Kernelized attention out_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps).

    S_t = sum_s phi(k_s) v_s^T and z_t = sum_s phi(k_s) run over the valid
    keys (s <= t if causal). Katharopoulos et al. 2020; with
    `features.favor_plus` it approximates `dot_product_attention` (softmax of
    Q K^T / sqrt(D)) as in Choromanski et al. 2021.

    Args:
      query: `[..., T, H, D]`.
      key: `[..., S, K, D]`, K dividing H (grouped-query attention).
      value: `[..., S, K, Dv]`.
      feature_map: phi, `[..., D]` -> `[..., M]`, called with `is_query=True`
        for queries and `False` for keys (see `attnjax.features`).
      is_causal: query t sees keys s <= t. Computed in chunks of `chunk_size`
        positions (quadratic inside a chunk, a state carried across chunks).
      mask: boolean key-padding mask broadcastable to `[..., H, T, S]` with
        size 1 along H and T (e.g. `masks.key_padding_mask`), True = attend.
      chunk_size: C >= 1 for the causal form (ignored otherwise); any T is
        allowed (the last chunk is padded with masked positions). Larger C
        means more work inside chunks, fewer sequential steps and fewer saved
        states. On CPU at D = 64, M = 256, C from 32 to 128 run alike; on a
        GPU, where each step costs a kernel launch, larger C (e.g. 256) pays.
      eps: added to the normaliser in the caller's units, a finite float
        >= 0 (default 0: exact ratio). Rows whose normaliser is 0 attend to
        nothing and give a zero output (module doc, "What remains").

    Returns:
      `[..., T, H, Dv]` in value's dtype.

    Raises:
      ValueError: naming the argument and shapes, for wrong ranks, mismatched
        heads or dims, non-key masks, chunk_size < 1, eps negative, NaN or
        infinite, or a feature_map whose projection dim is not D; at trace time.
      TypeError: likewise, for a feature_map that is not callable, a non-boolean
        mask or an argument of the wrong type.
    """
    query, key, value = checks.as_arrays(query, key, value)
    valid = _prepare(query, key, value, mask, feature_map, eps, chunk_size)
    q, k, v = _cast_and_mask(query, key, value, valid)
    if is_causal:
        out = _linear_causal(q, k, v, feature_map, eps, valid, chunk_size)
    else:
        out = _linear_noncausal(q, k, v, feature_map, eps, valid)
    return out.astype(value.dtype)


def linear_attention_weights(
    query: Array,
    key: Array,
    *,
    feature_map: Callable,
    is_causal: bool = False,
    mask: Optional[Array] = None,
    eps: float = 0.0,
) -> Array:
    """The attention matrix implied by linear attention, `[..., H, T, S]`.

    A_ts = phi(q_t).phi(k_s) / (sum_{s'} phi(q_t).phi(k_s') + eps) over the
    valid keys (s <= t if causal), 0 elsewhere, so `A @ V` is exactly
    `linear_attention`'s output. With a positive feature map every row is a
    probability distribution; a row with nothing to attend (see the module
    doc) is 0 and sums to 0. Each row is rescaled on its own (by its largest
    term), so here even keys far below the largest one count. Every analysis
    of softmax attention matrices applies. Costs O(T S M): for study, not for
    long sequences. Args as `linear_attention`; computed in at least float32
    and returned in that dtype.
    """
    value = jnp.zeros(key.shape[:-1] + (1,), key.dtype) if hasattr(key, "shape") else key
    valid = _prepare(query, key, value, mask, feature_map, eps)
    q, k, _ = _cast_and_mask(query, key, value, valid)
    keep = None if valid is None else valid[..., None, None]
    (f_q, n_q), (f_k, n_k) = _features(q, k, feature_map, keep)
    num_kv_heads = key.shape[-2]
    f_q = _group_queries(f_q, num_kv_heads)  # [..., T, K, G, M]
    terms = jnp.einsum("...tkgm,...skm->...kgts", f_q, f_k)  # A_ts / 2^(n_q,t + n_k,s)
    seen = terms != 0
    if is_causal:
        causal = _expand(masks_lib.causal_mask(query.shape[-3], key.shape[-3]), terms.ndim)
        seen = seen & causal
    # Row t in units of 2^(n_q,t + top_t), top_t its largest exponent n_k,s + e_ts
    # (terms = m * 2^e, m in [1/2, 1)): the largest term of each row is in [1/2, 1).
    n_k = einops.rearrange(n_k, "... s k -> ... k 1 1 s")
    _, e = jnp.frexp(jax.lax.stop_gradient(terms))
    top = jnp.max(jnp.where(seen, n_k + e, _NO_KEYS), axis=-1)  # [..., K, G, T]
    shift = jnp.where(seen, n_k - top[..., None], jnp.zeros_like(e))
    terms = _ldexp(jnp.where(seen, terms, jnp.zeros_like(terms)), shift)
    n_q = einops.rearrange(n_q, "... t (k g) -> ... k g t", k=num_kv_heads)
    weights = _normalise(terms, jnp.sum(terms, axis=-1), eps, n_q + top)  # rows over s
    return einops.rearrange(weights, "... k g t s -> ... (k g) t s")


# --------------------------------------------------------------------------
# Recurrent form


class LinearAttentionState(NamedTuple):
    """Running sums of the recurrent form, one per key/value head, in units of 2^log2_scale.

    kv: S / 2^L, S = sum_s phi(k_s) v_s^T, `[..., K, M, Dv]`.
    normalizer: z / 2^L, z = sum_s phi(k_s), `[..., K, M]`.
    log2_scale: L `[..., K]` int32, the exponent of the largest key feature so
      far (a large negative value before any key; see `init_state`). The sums
      are rescaled, exactly, when a larger key arrives, so features of any
      scale the dtype holds neither under- nor overflow them (module doc).
    """

    kv: Array
    normalizer: Array
    log2_scale: Array

    __repr__ = compact_repr


def init_state(
    batch_shape: tuple[int, ...],
    num_kv_heads: int,
    num_features: int,
    value_dim: int,
    dtype=jnp.float32,
) -> LinearAttentionState:
    """Zero state for `linear_attention_step`: kv, normalizer 0, log2_scale "no key yet".

    Args:
      batch_shape: leading dims `[...]` of the inputs.
      num_kv_heads: K, the number of key/value heads.
      num_features: M (`features.num_features(feature_map, D)`).
      value_dim: Dv.
      dtype: dtype of kv and normalizer, float32 by default (keep float32 or
        wider); log2_scale is int32.
    """
    batch_shape = tuple(batch_shape)
    for name, value in (
        ("num_kv_heads", num_kv_heads),
        ("num_features", num_features),
        ("value_dim", value_dim),
    ):
        checks.positive_int(name, value)
    kv = jnp.zeros(batch_shape + (num_kv_heads, num_features, value_dim), dtype)
    normalizer = jnp.zeros(batch_shape + (num_kv_heads, num_features), dtype)
    log2_scale = jnp.full(batch_shape + (num_kv_heads,), _NO_KEYS, jnp.int32)
    return LinearAttentionState(kv, normalizer, log2_scale)


def _check_step(state, q_t, k_t, v_t) -> None:
    if not isinstance(state, LinearAttentionState):
        raise TypeError(
            f"state must be a LinearAttentionState (from init_state), got {type(state).__name__}"
        )
    for name, x in (("q_t", q_t), ("k_t", k_t), ("v_t", v_t)):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be an array, got {type(x).__name__}")
        if x.ndim < 2:
            raise ValueError(
                f"{name} must have layout [..., heads, dim] (rank >= 2), got shape {tuple(x.shape)}"
            )
    # Reuse the sequence checks on a length-1 sequence [..., 1, H, D].
    checks.qkv(q_t[..., None, :, :], k_t[..., None, :, :], v_t[..., None, :, :])
    expected_kv = k_t.shape[:-1] + state.kv.shape[-2:]
    if (
        state.kv.shape != expected_kv
        or state.normalizer.shape != state.kv.shape[:-1]
        or state.log2_scale.shape != state.kv.shape[:-2]
    ):
        raise ValueError(
            f"state does not match the inputs: expected kv [..., K, M, Dv], normalizer "
            f"[..., K, M] and log2_scale [..., K] with [..., K] = {k_t.shape[:-1]}, "
            f"Dv = {v_t.shape[-1]} (got kv.shape={tuple(state.kv.shape)}, "
            f"normalizer.shape={tuple(state.normalizer.shape)}, "
            f"log2_scale.shape={tuple(state.log2_scale.shape)})"
        )
    if state.log2_scale.dtype != jnp.int32:
        raise TypeError(
            f"state.log2_scale must be int32 (from init_state), got {state.log2_scale.dtype}"
        )
    if state.kv.shape[-1] != v_t.shape[-1]:
        raise ValueError(f"state value dim {state.kv.shape[-1]} != v_t.shape[-1]={v_t.shape[-1]}")


def linear_attention_step(
    state: LinearAttentionState,
    q_t: Array,
    k_t: Array,
    v_t: Array,
    *,
    feature_map: Callable,
    eps: float = 0.0,
) -> tuple[LinearAttentionState, Array]:
    """One step of causal linear attention as an RNN (Katharopoulos et al. 2020, §3.4).

        S_t = S_{t-1} + phi(k_t) v_t^T,   z_t = z_{t-1} + phi(k_t),
        out_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps),

    with S and z held in units of 2^log2_scale (`LinearAttentionState`).

    Args:
      state: `LinearAttentionState` from `init_state` or a previous step.
      q_t: `[..., H, D]`; k_t: `[..., K, D]`; v_t: `[..., K, Dv]`; K divides H.
      feature_map: as `linear_attention`.
      eps: as `linear_attention`.

    Returns:
      (new state, out_t `[..., H, Dv]` in v_t's dtype). Scanning this over
      positions gives `linear_attention(..., is_causal=True)`.
    """
    _check_step(state, q_t, k_t, v_t)
    _check_options(feature_map, eps)
    dtype = jnp.promote_types(_compute_dtype(q_t, k_t, v_t), state.kv.dtype)
    (f_q, n_q), (f_k, n_k) = _features(q_t.astype(dtype), k_t.astype(dtype), feature_map)
    if f_k.shape[-1] != state.kv.shape[-2]:
        raise ValueError(
            f"feature_map gives M={f_k.shape[-1]} features, state has M={state.kv.shape[-2]}"
        )
    scale = jnp.maximum(state.log2_scale, n_k)  # [..., K]
    old = (state.log2_scale - scale)[..., None]
    kv_t, z_t = _key_sums(f_k[..., None, :], n_k[..., None], v_t.astype(dtype)[..., None, :], scale)
    kv = _shrink(state.kv.astype(dtype), old[..., None]) + kv_t
    normalizer = _shrink(state.normalizer.astype(dtype), old) + z_t
    q = _group_queries(f_q, k_t.shape[-2])  # [..., K, G, M]
    num = jnp.einsum("...kgm,...kme->...kge", q, kv)
    den = jnp.einsum("...kgm,...km->...kg", q, normalizer)
    units = _group_queries(n_q[..., None], k_t.shape[-2])[..., 0] + scale[..., None]
    out = einops.rearrange(_normalise(num, den, eps, units), "... k g e -> ... (k g) e")
    new_state = LinearAttentionState(
        kv.astype(state.kv.dtype), normalizer.astype(state.normalizer.dtype), scale
    )
    return new_state, out.astype(v_t.dtype)
