"""The eigenvalues of causal attention maps, exactly, without the `[T, T]` matrix.

A causal attention map A (query i sees keys j <= i) is lower triangular, so
its eigenvalues are its diagonal:

    lambda_i = a_ii = exp(x_ii - lse_i),   x_ii = clip((q_i . k_i * scale + b_ii) / temperature),

with lse_i the row's log-sum-exp (`attention_statistics(...).lse`, or
`dot_product_attention(..., return_residual=True)`). a_00 = 1 (the first
query sees only itself), so the Perron eigenvalue is 1 and the second-largest
modulus |lambda_2| = max_(i >= 1) a_ii (`analysis.triangular_slem` on the
dense map). One dot product per query: O(T D) work, `[..., H, T]` memory.
"""

from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp

from attnjax import attention as attention_lib
from attnjax import checks
from attnjax.softmax import clip_logits

Array = jax.Array


def causal_eigenvalues(
    query: Array,
    key: Array,
    lse: Array,
    *,
    scale: Optional[float] = None,
    temperature: Union[float, Array] = 1.0,
    bias_diagonal: Optional[Array] = None,
    key_padding: Optional[Array] = None,
) -> Array:
    """The eigenvalues a_ii of causal self-attention maps, `[..., H, T]` (query i's weight on itself).

    Args:
      query: `[..., T, H, D]`.
      key: `[..., T, K, D]`, the same T (self-attention, top-left aligned as `is_causal`), K dividing H
        (query head h reads key head h // (H / K)).
      lse: `[..., H, T]`, the log-sum-exp of each row of the same logits over its visible keys: the
        `lse` field of `attention_statistics` (`return_residual=True`'s lse is `[..., T, H]`: swap its
        last two axes); a fully masked row's `MASKED_LSE` gives 0.
      scale: logits scale, a finite number; default 1/sqrt(D).
      temperature: positive scalar dividing the scaled, biased logits.
      bias_diagonal: `[..., H, T]` (broadcastable), the additive bias b_ii of the diagonal, if the
        logits had one.
      key_padding: `[..., T]` bool, True for real keys, as given to `attention_statistics`: a
        padded key i is masked in its own row, so a_ii = 0 there.

    Returns:
      `[..., H, T]` in `promote_types(query.dtype, float32)`: exp(x_ii - lse_i), each in [0, 1].

    Raises:
      ValueError: for ranks, heads, lengths or an lse shape that do not match, naming them.
    """
    query, key = checks.as_arrays(query, key)
    if query.ndim < 3 or key.ndim != query.ndim:
        raise ValueError(
            f"query must be [..., T, H, D] and key [..., T, K, D] of the same rank, "
            f"got query.shape={tuple(query.shape)}, key.shape={tuple(key.shape)}"
        )
    *batch, t, heads, dim = query.shape
    if key.shape[-3] != t or key.shape[-1] != dim or heads % key.shape[-2]:
        raise ValueError(
            "a causal map's key must be [..., T, K, D] with query's T and D and K dividing H, "
            f"got query.shape={tuple(query.shape)}, key.shape={tuple(key.shape)}"
        )
    lse = jnp.asarray(lse)
    if lse.shape != (*batch, heads, t):
        raise ValueError(
            f"lse must be [..., H, T] = {(*batch, heads, t)}, got lse.shape={tuple(lse.shape)}"
        )
    checks.scale(scale)
    checks.temperature(temperature)
    scale = attention_lib.default_scale(dim) if scale is None else scale
    groups = heads // key.shape[-2]
    dtype = jnp.promote_types(query.dtype, jnp.float32)
    q = jnp.reshape(query, (*batch, t, key.shape[-2], groups, dim)).astype(dtype)
    diagonal = jnp.einsum("...tkgd,...tkd->...kgt", q, key.astype(dtype))  # [..., K, G, T]
    x = jnp.reshape(diagonal, (*batch, heads, t)) * jnp.asarray(scale, dtype)
    if bias_diagonal is not None:
        x = x + jnp.asarray(bias_diagonal, dtype)
    x = clip_logits(x / jnp.asarray(temperature, dtype))
    eigenvalues = jnp.exp(x - lse.astype(dtype))
    if key_padding is None:
        return eigenvalues
    key_padding = jnp.asarray(key_padding)
    if key_padding.shape != (*batch, t):
        raise ValueError(
            f"key_padding must be [..., T] = {(*batch, t)}, got shape {tuple(key_padding.shape)}"
        )
    return jnp.where(key_padding[..., None, :], eigenvalues, 0)


def causal_slem(eigenvalues: Array) -> Array:
    """|lambda_2| of causal maps from their eigenvalues `[..., T]` (`causal_eigenvalues`): the
    second-largest, as `analysis.triangular_slem` reads it off a dense map's diagonal -> `[...]` (0 for
    T = 1; the largest, a_00 = 1, is the Perron eigenvalue)."""
    eigenvalues = jnp.asarray(eigenvalues)
    if eigenvalues.shape[-1] < 2:
        return jnp.zeros(eigenvalues.shape[:-1], eigenvalues.dtype)
    return jnp.sort(eigenvalues, axis=-1)[..., -2]
