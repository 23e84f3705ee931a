"""Rotary position embeddings (Su et al. 2021, "RoFormer: Enhanced transformer
with rotary position embedding").

Each pair of a head vector's coordinates is rotated by an angle proportional to
the position, so q_t . k_s depends on the positions only through t - s:

    angle_{t, i} = t * base^(-2i / D),   i = 0 .. D/2 - 1
    (a, b) -> (a cos - b sin, a sin + b cos)

Two layouts pair the coordinates differently:
* 'half' (GPT-NeoX, Hugging Face llama): pair i is (x_i, x_{i + D/2});
* 'interleaved' (the original RoFormer, GPT-J, GGUF files): pair i is
  (x_{2i}, x_{2i+1}).
The same weights give different models under the two layouts (a checkpoint
converter that permutes each head's query/key rows turns one into the other).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from attnjax import checks

LAYOUTS = ("half", "interleaved")


def check_rope(layout, base) -> None:
    """`layout` in LAYOUTS (or None: no rotary embedding) and a positive `base`."""
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"rope must be one of {LAYOUTS} or None, got {layout!r}")
    checks.positive_number("rope_base", base)


def rotary_embedding(x: jax.Array, positions: jax.Array, *, base: float = 10000.0, layout: str = "half") -> jax.Array:
    """Rotate heads `x` `[..., T, H, D]` (D even) at integer `positions` `[T]`.

    Angles are computed in at least float32; the result has x's dtype.
    """
    check_rope(layout, base)
    dim = x.shape[-1]
    if dim % 2:
        raise ValueError(f"rotary embedding needs an even head dim, got x.shape={tuple(x.shape)}")
    if positions.shape != (x.shape[-3],):
        raise ValueError(f"positions must have shape [T] = ({x.shape[-3]},), got {tuple(positions.shape)}")
    out_dtype, dtype = x.dtype, jnp.promote_types(x.dtype, jnp.float32)
    inv_freq = base ** (-jnp.arange(0, dim, 2, dtype=dtype) / dim)  # [D/2]
    angle = positions.astype(dtype)[:, None, None] * inv_freq[None, None, :]  # [T, 1, D/2]
    angle = jnp.reshape(angle, (1,) * (x.ndim - 3) + angle.shape)
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x = x.astype(dtype)
    if layout == "half":
        a, b = x[..., : dim // 2], x[..., dim // 2:]
        out = jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    else:
        a, b = x[..., 0::2], x[..., 1::2]
        out = jnp.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(x.shape)
    return out.astype(out_dtype)
