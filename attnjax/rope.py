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

Frequency scaling for long contexts (`scaling`, as Hugging Face's
`rope_scaling`), a tuple:
* ('linear', factor): every frequency divided by `factor` (position
  interpolation, Chen et al. 2023);
* ('llama3', factor, low_freq_factor, high_freq_factor, original_max_len):
  Llama 3.1's: wavelengths above original_max_len / low_freq_factor are
  divided by `factor`, those below original_max_len / high_freq_factor are
  kept, and the band between is interpolated smoothly.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from attnjax import checks

LAYOUTS = ("half", "interleaved")
# Scaling type -> its parameters after the type.
SCALINGS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_len"),
}


def check_rope(layout, base, scaling=None) -> None:
    """`layout` in LAYOUTS (or None: no rotary embedding), a positive `base`, `scaling` None or as `SCALINGS`.

    A `base` given as an array (a `Transformer`'s per-layer base, traced in its scan) was
    checked where it was set (`TransformerConfig.layer_rope_bases`).
    """
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"rope must be one of {LAYOUTS} or None, got {layout!r}")
    if not isinstance(base, jax.Array):
        checks.positive_number("rope_base", base)
    if scaling is None:
        return
    if not isinstance(scaling, tuple) or not scaling or scaling[0] not in SCALINGS:
        raise ValueError(
            f"rope_scaling must be None or a tuple (type, *parameters) with type one of "
            f"{tuple(SCALINGS)}, got {scaling!r}"
        )
    names = SCALINGS[scaling[0]]
    if len(scaling) != 1 + len(names):
        raise ValueError(f"rope_scaling {scaling!r}: type {scaling[0]!r} takes parameters {names}")
    for name, value in zip(names, scaling[1:]):
        checks.positive_number(f"rope_scaling {name}", value)
    if scaling[0] == "llama3" and scaling[3] <= scaling[2]:
        raise ValueError(f"rope_scaling {scaling!r}: high_freq_factor must exceed low_freq_factor")


def inverse_frequencies(dim: int, base: float, scaling=None, dtype=jnp.float32) -> jax.Array:
    """The rotation rates `[D/2]`: base^(-2i / D), scaled as `scaling` says (see the module docstring)."""
    inv_freq = base ** (-jnp.arange(0, dim, 2, dtype=dtype) / dim)
    if scaling is None:
        return inv_freq
    if scaling[0] == "linear":
        return inv_freq / scaling[1]
    factor, low, high, original = scaling[1:]
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    return jnp.where(
        wavelength > original / low,
        inv_freq / factor,
        jnp.where(wavelength < original / high, inv_freq, smoothed),
    )


def rotary_embedding(
    x: jax.Array, positions: jax.Array, *, base: float = 10000.0, layout: str = "half", scaling=None
) -> jax.Array:
    """Rotate heads `x` `[..., T, H, D]` (D even) at integer `positions` `[T]`; `scaling`: see `SCALINGS`.

    Angles are computed in at least float32; the result has x's dtype.
    """
    check_rope(layout, base, scaling)
    dim = x.shape[-1]
    if dim % 2:
        raise ValueError(f"rotary embedding needs an even head dim, got x.shape={tuple(x.shape)}")
    if positions.shape != (x.shape[-3],):
        raise ValueError(
            f"positions must have shape [T] = ({x.shape[-3]},), got {tuple(positions.shape)}"
        )
    out_dtype, dtype = x.dtype, jnp.promote_types(x.dtype, jnp.float32)
    inv_freq = inverse_frequencies(dim, base, scaling, dtype)  # [D/2]
    angle = positions.astype(dtype)[:, None, None] * inv_freq[None, None, :]  # [T, 1, D/2]
    angle = jnp.reshape(angle, (1,) * (x.ndim - 3) + angle.shape)
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x = x.astype(dtype)
    if layout == "half":
        a, b = x[..., : dim // 2], x[..., dim // 2 :]
        out = jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    else:
        a, b = x[..., 0::2], x[..., 1::2]
        out = jnp.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(x.shape)
    return out.astype(out_dtype)
