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
dtype. The normaliser is den + eps (eps = 0 by default: no bias); a row whose
normaliser is exactly 0 (no visible key, or every kernel value 0) gives a zero
output and zero weights, not NaN. Positive feature maps (`elu_plus_one`,
`relu`, `relu_random`, `favor_plus`) keep den >= 0 and the weights a
probability distribution; `trig_random` does not (its den may vanish or be
negative).
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


def _features(q, k, feature_map, keep=None):
    """phi(q) `[..., M]`, phi(k) `[..., M]`; key features zeroed where `keep` (broadcastable) is False."""
    phi_q = features_lib.call_feature_map(feature_map, q, is_query=True).astype(q.dtype)
    phi_k = features_lib.call_feature_map(feature_map, k, is_query=False).astype(k.dtype)
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise ValueError(
            f"feature_map gives {phi_q.shape[-1]} query features but {phi_k.shape[-1]} key features"
        )
    if keep is not None:
        phi_k = jnp.where(keep, phi_k, jnp.zeros_like(phi_k))
    return phi_q, phi_k


def _group_queries(x: Array, num_kv_heads: int) -> Array:
    """`[..., H, X]` -> `[..., K, G, X]` (query head h = k * G + g)."""
    return einops.rearrange(x, "... (k g) x -> ... k g x", k=num_kv_heads)


def _normalise(num: Array, den: Array, eps: float) -> Array:
    """num `[..., Dv]` / (den + eps) `[...]`; 0 where that is exactly 0."""
    den = den + jnp.asarray(eps, den.dtype)
    safe = jnp.where(den != 0, den, jnp.ones_like(den))
    return num / safe[..., None]


def _expand(x: Array, rank: int) -> Array:
    """Adds leading size-1 axes up to `rank` (explicit, for strict rank promotion)."""
    return jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape)


# --------------------------------------------------------------------------
# Non-causal: one pass over the keys


def _linear_noncausal(q, k, v, feature_map, eps, valid):
    """q `[..., T, H, D]`, k `[..., S, K, D]`, v `[..., S, K, Dv]` -> `[..., T, H, Dv]`."""
    keep = None if valid is None else valid[..., None, None]
    phi_q, phi_k = _features(q, k, feature_map, keep)
    kv = jnp.einsum("...skm,...ske->...kme", phi_k, v)  # S [..., K, M, Dv]
    z = jnp.sum(phi_k, axis=-3)  # [..., K, M]
    phi_q = _group_queries(phi_q, k.shape[-2])  # [..., T, K, G, M]
    num = jnp.einsum("...tkgm,...kme->...tkge", phi_q, kv)
    den = jnp.einsum("...tkgm,...km->...tkg", phi_q, z)
    out = _normalise(num, den, eps)  # [..., T, K, G, Dv]
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


def _carry_state(phi_q, phi_k, v):
    """Contributions of all earlier chunks, by a scan over chunks carrying (S, z).

    phi_q `[N, ..., K, R, M]`, phi_k `[N, ..., K, C, M]`, v `[N, ..., K, C, Dv]`
    -> numerator `[N, ..., K, R, Dv]` and normaliser `[N, ..., K, R]`, where
    chunk n reads only S_n = sum over keys of chunks j < n of phi(k) v^T.
    """

    def step(state, chunk):
        kv, z = state
        q_n, k_n, v_n = chunk
        num = jnp.einsum("...rm,...me->...re", q_n, kv)
        den = jnp.einsum("...rm,...m->...r", q_n, z)
        kv = kv + jnp.einsum("...cm,...ce->...me", k_n, v_n)
        z = z + jnp.sum(k_n, axis=-2)
        return (kv, z), (num, den)

    kv0 = jnp.zeros(phi_k.shape[1:-2] + phi_k.shape[-1:] + v.shape[-1:], phi_k.dtype)
    z0 = jnp.zeros(phi_k.shape[1:-2] + phi_k.shape[-1:], phi_k.dtype)
    _, (num, den) = jax.lax.scan(step, (kv0, z0), (phi_q, phi_k, v))
    return num, den


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
    phi_q, phi_k = _features(q, k, feature_map, keep)
    # Inside a chunk: the masked quadratic form (where, not a product, so a
    # non-finite future score cannot leak as 0 * inf).
    scores = jnp.einsum("...rm,...cm->...rc", phi_q, phi_k)  # [N, ..., K, G*C, C]
    tril = jnp.tile(masks_lib.causal_mask(chunk), (group, 1))
    scores = jnp.where(_expand(tril, scores.ndim), scores, jnp.zeros_like(scores))
    num_carried, den_carried = _carry_state(phi_q, phi_k, v)
    num = jnp.einsum("...rc,...ce->...re", scores, v) + num_carried
    den = jnp.sum(scores, axis=-1) + den_carried
    out = _normalise(num, den, eps)  # [N, ..., K, G*C, Dv]
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
      eps: added to the normaliser, a finite float >= 0 (default 0: exact
        ratio). Rows whose normaliser is exactly 0 give a zero output.

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
    probability distribution (rows with nothing to attend are 0), so every
    analysis of softmax attention matrices applies. Costs O(T S M): for study,
    not for long sequences. Args as `linear_attention`; computed in at least
    float32 and returned in that dtype.
    """
    value = jnp.zeros(key.shape[:-1] + (1,), key.dtype) if hasattr(key, "shape") else key
    valid = _prepare(query, key, value, mask, feature_map, eps)
    q, k, _ = _cast_and_mask(query, key, value, valid)
    phi_q, phi_k = _features(q, k, feature_map, None if valid is None else valid[..., None, None])
    num_kv_heads = key.shape[-2]
    q = _group_queries(phi_q, num_kv_heads)  # [..., T, K, G, M]
    scores = jnp.einsum("...tkgm,...skm->...kgts", q, phi_k)
    if is_causal:
        causal = _expand(masks_lib.causal_mask(query.shape[-3], key.shape[-3]), scores.ndim)
        scores = jnp.where(causal, scores, jnp.zeros_like(scores))
    weights = _normalise(scores, jnp.sum(scores, axis=-1), eps)  # rows over s
    return einops.rearrange(weights, "... k g t s -> ... (k g) t s")


# --------------------------------------------------------------------------
# Recurrent form


class LinearAttentionState(NamedTuple):
    """Running sums of the recurrent form, one per key/value head.

    kv: S = sum_s phi(k_s) v_s^T, `[..., K, M, Dv]`.
    normalizer: z = sum_s phi(k_s), `[..., K, M]`.
    """

    kv: Array
    normalizer: Array


def init_state(
    batch_shape: tuple[int, ...],
    num_kv_heads: int,
    num_features: int,
    value_dim: int,
    dtype=jnp.float32,
) -> LinearAttentionState:
    """Zero state for `linear_attention_step`.

    Args:
      batch_shape: leading dims `[...]` of the inputs.
      num_kv_heads: K, the number of key/value heads.
      num_features: M (`features.num_features(feature_map, D)`).
      value_dim: Dv.
      dtype: state dtype, float32 by default (keep float32 or wider).
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
    return LinearAttentionState(kv, normalizer)


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
    if state.kv.shape != expected_kv or state.normalizer.shape != state.kv.shape[:-1]:
        raise ValueError(
            f"state does not match the inputs: expected kv [..., K, M, Dv] with [..., K] = "
            f"{k_t.shape[:-1]}, Dv = {v_t.shape[-1]} (got kv.shape={tuple(state.kv.shape)}, "
            f"normalizer.shape={tuple(state.normalizer.shape)})"
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
        out_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps).

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
    phi_q, phi_k = _features(q_t.astype(dtype), k_t.astype(dtype), feature_map)
    if phi_k.shape[-1] != state.kv.shape[-2]:
        raise ValueError(
            f"feature_map gives M={phi_k.shape[-1]} features, state has M={state.kv.shape[-2]}"
        )
    kv = state.kv.astype(dtype) + phi_k[..., :, None] * v_t.astype(dtype)[..., None, :]
    normalizer = state.normalizer.astype(dtype) + phi_k
    q = _group_queries(phi_q, k_t.shape[-2])  # [..., K, G, M]
    num = jnp.einsum("...kgm,...kme->...kge", q, kv)
    den = jnp.einsum("...kgm,...km->...kg", q, normalizer)
    out = einops.rearrange(_normalise(num, den, eps), "... k g e -> ... (k g) e")
    new_state = LinearAttentionState(
        kv.astype(state.kv.dtype), normalizer.astype(state.normalizer.dtype)
    )
    return new_state, out.astype(v_t.dtype)
