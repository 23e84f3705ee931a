"""Boolean attention masks: True means "may attend".

Every mask here broadcasts against attention logits of shape `[..., H, T, S]`
(query length T, key length S):

* `causal_mask(T, S)` and `local_window_mask(T, S, ...)` are `[T, S]`;
* `key_padding_mask(...)` is `[..., 1, 1, S]` (one row per example, shared by
  every head and query);
* `combine_masks(*masks)` takes their logical AND, aligning ranks explicitly
  so it also works under `jax_numpy_rank_promotion='raise'`;
* `with_window(mask, W, ...)` adds a sliding window of W keys to a mask, and
  `window_bounds(W)` gives it as the `(left, right)` of `local_window` arguments.

Query position t and key position s are aligned at the top-left, as in
`jax.nn.dot_product_attention`: with T != S, query t sees keys s <= t.
"""

from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
import numpy as np

Array = jnp.ndarray


def _check_length(name: str, value) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def _positions(q_len: int, kv_len: Optional[int]) -> tuple[Array, Array]:
    """Query positions as a column `[T, 1]` and key positions as a row `[1, S]`."""
    q_len = _check_length("q_len", q_len)
    kv_len = q_len if kv_len is None else _check_length("kv_len", kv_len)
    return jnp.arange(q_len)[:, None], jnp.arange(kv_len)[None, :]


def causal_mask(q_len: int, kv_len: Optional[int] = None) -> Array:
    """Lower-triangular mask `[T, S]`: query t attends to keys s <= t.

    Args:
      q_len: T, the number of queries.
      kv_len: S, the number of keys (default T).
    """
    t, s = _positions(q_len, kv_len)
    return s <= t


def local_window_mask(
    q_len: int,
    kv_len: Optional[int] = None,
    *,
    left: Optional[int] = None,
    right: Optional[int] = None,
) -> Array:
    """Band mask `[T, S]`: query t attends to keys t - left <= s <= t + right.

    `None` leaves that side unbounded, so `right=0` with `left=None` is the
    causal mask and `left=w, right=0` is causal sliding-window attention.
    """
    for name, width in (("left", left), ("right", right)):
        if width is not None and (not isinstance(width, (int, np.integer)) or width < 0):
            raise ValueError(f"{name} must be a non-negative int or None, got {width!r}")
    t, s = _positions(q_len, kv_len)
    mask = jnp.ones((t.shape[0], s.shape[1]), dtype=bool)
    if left is not None:
        mask = mask & (s >= t - left)
    if right is not None:
        mask = mask & (s <= t + right)
    return mask


def window_bounds(window: Optional[int]) -> Optional[tuple[int, int]]:
    """A sliding window of W keys (t - W < s < t + W) as `(left, right)` = (W - 1, W - 1), the
    `local_window` of `dot_product_attention` and the streaming passes; None stays None."""
    return None if window is None else (window - 1, window - 1)


def with_window(mask: Optional[Array], window, q_len: int, kv_len: int, is_causal: bool):
    """`mask` (broadcastable to `[..., T, S]`, or None) and a sliding window of W keys, `[..., T, S]`.

    Query t keeps keys t - W < s (and s < t + W unless `is_causal`, where the
    causal mask bounds the right side); `window=None` returns `mask` as given.
    `window` may be an int32 array (a `Transformer`'s per-layer window, traced
    in its scan), where 0 means no window.
    """
    if window is None:
        return mask
    if isinstance(window, (int, np.integer)):
        band = local_window_mask(
            q_len, kv_len, left=window - 1, right=None if is_causal else window - 1
        )
    else:
        t, s = _positions(q_len, kv_len)
        band = s > t - window
        if not is_causal:
            band = band & (s < t + window)
        band = band | (window == 0)
    return band if mask is None else combine_masks(jnp.asarray(mask) != 0, band)


def reachable_keys(
    q_len: int, kv_len: int, *, is_causal: bool = False, window: Optional[tuple[int, int]] = None
) -> int:
    """How many leading keys some query can see through the causal and local-window masks alone.

    Query t (0 <= t < T) sees keys s <= t when `is_causal` and t - left <= s <= t + right
    within `window` = (left, right), top-left aligned as `causal_mask`: no query sees a key
    s >= T (causal) or s >= T + right (window), and every key before that bound is seen by
    some query. Returns min(S, bound), S = `kv_len` without either mask.
    """
    bound = kv_len
    if is_causal:
        bound = min(bound, q_len)
    if window is not None:
        bound = min(bound, q_len + window[1])
    return bound


def key_padding_mask(
    *, lengths: Optional[Array] = None, valid: Optional[Array] = None, kv_len: Optional[int] = None
) -> Array:
    """Mask out padded keys; returns `[..., 1, 1, S]`.

    Give exactly one of:
      lengths: integer array `[...]`; keys `s < lengths[...]` are valid. Needs
        `kv_len` (S).
      valid: boolean array `[..., S]`, True for real (non-padding) keys.
    """
    if (lengths is None) == (valid is None):
        raise ValueError("key_padding_mask takes exactly one of lengths= or valid=")
    if valid is not None:
        valid = jnp.asarray(valid)
        if valid.dtype != jnp.bool_:
            raise TypeError(f"valid must be a boolean array, got dtype {valid.dtype}")
        if valid.ndim < 1:
            raise ValueError(f"valid must have shape [..., S], got shape {valid.shape}")
    else:
        lengths = jnp.asarray(lengths)
        if not jnp.issubdtype(lengths.dtype, jnp.integer):
            raise TypeError(f"lengths must be an integer array, got dtype {lengths.dtype}")
        if kv_len is None:
            raise ValueError("key_padding_mask(lengths=...) needs kv_len=")
        kv_len = _check_length("kv_len", kv_len)
        positions = jnp.reshape(jnp.arange(kv_len), (1,) * lengths.ndim + (kv_len,))
        valid = positions < lengths[..., None]
    return valid[..., None, None, :]


def _expand_to_rank(mask: Array, rank: int) -> Array:
    return jnp.reshape(mask, (1,) * (rank - mask.ndim) + mask.shape)


def combine_masks(*masks: Optional[Array]) -> Optional[Array]:
    """Logical AND of the given boolean masks, ignoring `None`s.

    Ranks are aligned on the right (size-1 axes are added on the left), then
    the masks broadcast. Returns None if every mask is None.
    """
    present = [jnp.asarray(m) for m in masks if m is not None]
    if not present:
        return None
    for i, m in enumerate(present):
        if m.dtype != jnp.bool_:
            raise TypeError(f"combine_masks: mask {i} must be boolean, got dtype {m.dtype}")
    rank = max(m.ndim for m in present)
    try:
        shape = np.broadcast_shapes(*(m.shape for m in present))
    except ValueError:
        shapes = ", ".join(str(m.shape) for m in present)
        raise ValueError(f"combine_masks: mask shapes {shapes} do not broadcast") from None
    combined = jnp.ones(shape, dtype=bool)
    for m in present:
        combined = combined & _expand_to_rank(m, rank)
    return combined
