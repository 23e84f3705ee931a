"""Massive activations (Sun, Chen, Kolter & Liu 2024, "Massive activations in large language models").

An activation a_td of a hidden state X `[T, D]` is massive when

    |a_td| >= minimum (100)   and   |a_td| >= factor (1000) x median_(t', d') |a_t'd'|,

the median over the whole hidden state of that sequence at that layer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

SUN_MINIMUM = 100.0
SUN_FACTOR = 1000.0


def massive_activations(
    hidden, minimum: float = SUN_MINIMUM, factor: float = SUN_FACTOR
) -> jax.Array:
    """Which activations of hidden states are massive (module docstring).

    Args:
      hidden: `[..., T, D]` hidden states (e.g. `[L + 1, B, T, D]`, one median per leading index).
      minimum: the smallest massive |a| (Sun et al.: 100).
      factor: how many times the median |a| a massive |a| is at least (Sun et al.: about 1000).

    Returns:
      `[..., T, D]` bool.
    """
    h = jnp.asarray(hidden)
    if h.ndim < 2 or h.shape[-1] < 1 or h.shape[-2] < 1:
        raise ValueError(f"hidden must be [..., T, D] with T, D >= 1; got shape {h.shape}")
    if not (minimum >= 0 and factor >= 0):
        raise ValueError(f"minimum and factor must be >= 0, got {minimum!r}, {factor!r}")
    a = jnp.abs(h.astype(jnp.promote_types(h.dtype, jnp.float32)))
    median = jnp.median(a.reshape(*a.shape[:-2], -1), axis=-1)[..., None, None]
    return (a >= minimum) & (a >= factor * median)
