"""Argument checks shared by the library's functions, modules and configs.

Each raises a `ValueError` (a bad value) or `TypeError` (a bad type) whose
message names the argument and what it got, before any compute. They read
shapes, dtypes and Python values, so they run while tracing; a few also read
the values of concrete (not traced) arrays where a check needs them (a float
mask, an array scale or temperature), and let traced ones pass unchecked.

Attention's inputs follow `jax.nn.dot_product_attention`: query
`[..., T, H, D]`, key `[..., S, K, D]`, value `[..., S, K, Dv]`, logits (and
masks, biases) `[..., H, T, S]`; `qkv`, `logits_shape`, `broadcastable`,
`bool_mask`, `lengths`, `window` and `dropout` check them.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

_INTS = (int, np.integer)
# Python and NumPy numbers (a bool is an int: refused where it matters).
NUMBERS = (int, float, np.number)


def positive_int(name: str, value) -> None:
    """`value` is an int >= 1 (a bool is not)."""
    if not isinstance(value, _INTS) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def divisible(name: str, value: int, by_name: str, by: int) -> None:
    """`by` divides `value`."""
    if value % by:
        raise ValueError(f"{name} ({value}) must be divisible by {by_name} ({by})")


def positive_number(name: str, value) -> None:
    """`value` is a number > 0 (not a bool, not NaN)."""
    if not isinstance(value, NUMBERS) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def finite(name: str, value) -> None:
    """`value` (a number) is finite: not inf, not NaN."""
    if not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def concrete(value) -> bool:
    """Whether `value` has a value now: not a tracer (inside `jit`, `vmap`, `grad`, its value is unknown)."""
    return not isinstance(value, jax.core.Tracer)


def _real_scalar(name: str, value):
    """`value` as a NumPy scalar if it is a concrete real scalar (number or 0-d array), None if traced.

    A bool, a string or another object: TypeError; an array of rank > 0 or of a
    non-real dtype: ValueError / TypeError naming `name`.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number, got the bool {value!r}")
    if isinstance(value, NUMBERS):
        return value
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise TypeError(
            f"{name} must be a number or a scalar array, got {type(value).__name__} {value!r:.60}"
        )
    if jnp.ndim(value) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {jnp.shape(value)}")
    if not (jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer)):
        raise TypeError(f"{name} must be a real number, got dtype {value.dtype}")
    return np.asarray(value)[()] if concrete(value) else None


def temperature(value) -> None:
    """A softmax temperature: a number > 0 (+inf allowed: the uniform limit; NaN is not), or a scalar array,
    checked alike when concrete; a traced one's value is unchecked (0 or a negative one then gives NaN or
    the inverted softmax)."""
    number = _real_scalar("temperature", value)
    if number is not None:
        positive_number("temperature", number)


def scale(value) -> None:
    """A logits scale (None passes: the default 1/sqrt(D)): a finite number, or a scalar array, checked alike
    when concrete. Any finite value is a scale: 0 gives uniform weights, a negative one ranks keys in
    reverse; NaN and inf raise. A traced one's value is unchecked."""
    if value is None:
        return
    number = _real_scalar("scale", value)
    if number is not None and not np.isfinite(number):
        raise ValueError(f"scale must be a finite number, got {value!r}")


def rate(name: str, value) -> None:
    """A dropout rate: a number in [0, 1)."""
    if not isinstance(value, NUMBERS) or isinstance(value, bool) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")


def boolean(name: str, value, *, optional: bool = False) -> None:
    """`value` is a bool (or None when `optional`)."""
    if not (isinstance(value, bool) or (optional and value is None)):
        raise TypeError(f"{name} must be a bool{' or None' if optional else ''}, got {value!r}")


def function(name: str, value, *, optional: bool = False) -> None:
    """`value` is callable (or None when `optional`)."""
    if not (callable(value) or (optional and value is None)):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {value!r:.60}")


def integer(name: str, value, minimum: int) -> None:
    """`value` is an int (not a bool; TypeError) >= `minimum` (ValueError)."""
    if not isinstance(value, _INTS) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def choice(name: str, value, choices) -> None:
    """`value` is one of `choices` (a tuple, or the keys of a dict)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def floating_dtype(name: str, value, *, optional: bool = False) -> None:
    """`value` is a floating-point dtype in any spelling `jnp.dtype` resolves (`jnp.float32`,
    `'bfloat16'`, `np.float16`, `float`), or None when `optional`; a TypeError otherwise."""
    if optional and value is None:
        return
    try:
        dtype = None if value is None else jnp.dtype(value)
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        got = f"{value!r}" if dtype is None else str(dtype)
        raise TypeError(
            f"{name} must be a floating-point dtype (a dtype or its name: float32, bfloat16, "
            f"float16, float64){' or None' if optional else ''}, got {got}"
        )


def nonempty_lengths(query, key) -> None:
    """`query [..., T, H, D]` and `key [..., S, K, D]` hold at least one position each (T, S >= 1).

    Softmax over zero keys has no value and zero queries no rows to fill, so
    attention is undefined there; this says which length is zero before any compute.
    """
    for name, x, length in (("query", query, "T"), ("key", key, "S")):
        if x.shape[-3] == 0:
            raise ValueError(
                f"{name} must hold at least one position: its length {length} (axis -3) is 0; "
                f"got query.shape={tuple(query.shape)}, key.shape={tuple(key.shape)}"
            )


def rngs(value) -> None:
    """Per-call randomness: an `nnx.Rngs`, an `nnx.RngStream`, a PRNG key or None (TypeError otherwise)."""
    if not (value is None or isinstance(value, (jax.Array, nnx.Rngs, nnx.RngStream))):
        raise TypeError(
            f"rngs must be an nnx.Rngs, an nnx.RngStream, a PRNG key or None, got {type(value).__name__}"
        )


# --------------------------------------------------------------------------
# Attention inputs: query [..., T, H, D], key [..., S, K, D], value [..., S, K, Dv]


def _shape_error(message: str, **arrays) -> ValueError:
    """A ValueError: `message`, then the shapes of the named `arrays`."""
    shapes = ", ".join(f"{name}.shape={tuple(a.shape)}" for name, a in arrays.items())
    return ValueError(f"{message} (got {shapes})")


def qkv(query, key, value) -> None:
    """query `[..., T, H, D]`, key `[..., S, K, D]`, value `[..., S, K, Dv]`: float
    arrays of one rank >= 3, the same batch dims, K dividing H, T, S >= 1."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be an array, got {type(x).__name__}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{name} must be a floating-point array, got dtype {x.dtype}")
        if x.ndim < 3:
            raise _shape_error(f"{name} must have layout [..., T, H, D] (rank >= 3)", **{name: x})
    if not query.ndim == key.ndim == value.ndim:
        raise _shape_error(
            "query, key and value must have the same rank", query=query, key=key, value=value
        )
    if key.shape[:-1] != value.shape[:-1]:
        raise _shape_error("key and value must agree on [..., S, K]", key=key, value=value)
    if query.shape[:-3] != key.shape[:-3]:
        raise _shape_error("query and key must have the same batch dims", query=query, key=key)
    if query.shape[-1] != key.shape[-1]:
        raise _shape_error("query and key must have the same head dim D", query=query, key=key)
    if query.shape[-1] < 1:
        raise _shape_error("query and key must have a head dim D >= 1", query=query, key=key)
    num_heads, num_kv_heads = query.shape[-2], key.shape[-2]
    if num_heads % num_kv_heads:
        raise _shape_error(
            f"key heads ({num_kv_heads}) must divide query heads ({num_heads})",
            query=query,
            key=key,
        )
    nonempty_lengths(query, key)


def logits_shape(query, key) -> tuple[int, ...]:
    """The logits' shape `[..., H, T, S]` for query `[..., T, H, D]` and key `[..., S, K, D]`."""
    return query.shape[:-3] + (query.shape[-2], query.shape[-3], key.shape[-3])


def fit_shape(x, target: tuple[int, ...]):
    """`x` without extra leading size-1 axes if it then broadcasts to exactly `target`, else None."""
    extra = max(x.ndim - len(target), 0)
    try:
        fits = (
            all(d == 1 for d in x.shape[:extra])
            and np.broadcast_shapes(x.shape[extra:], target) == target
        )
    except ValueError:
        fits = False
    return jnp.reshape(x, x.shape[extra:]) if fits else None


def broadcastable(name: str, x, target: tuple[int, ...]):
    """`x` (None passes) must broadcast to exactly `target` (it may not enlarge the logits); returns it fitted.

    Leading axes beyond `target`'s rank are allowed when they have size 1 (an
    unbatched query `[T, H, D]` with a mask `[1, H, T, S]`, as jax.nn accepts)
    and are dropped (`fit_shape`).
    """
    if x is None:
        return None
    x = jnp.asarray(x)
    fitted = fit_shape(x, target)
    if fitted is None:
        raise ValueError(
            f"{name} of shape {tuple(x.shape)} does not broadcast to the logits shape "
            f"[..., H, T, S] = {target}"
        )
    return fitted


def bool_mask(mask):
    """Boolean masks pass; numeric {0, 1} masks (as flax's `make_attention_mask` gives) become `mask != 0`.

    A concrete floating-point mask must hold only 0 and 1: an additive mask (0 where
    a key is kept, -inf or -1e9 where it is not, as jax.nn's `bias` takes) read as
    nonzero = attend would attend to exactly the masked keys, so it raises a
    ValueError pointing to `bias=`. A traced float mask cannot be read: it is taken
    as nonzero = attend, unchecked. Integer masks are nonzero = attend.
    """
    if mask is None or mask.dtype == jnp.bool_:
        return mask
    if not (jnp.issubdtype(mask.dtype, jnp.integer) or jnp.issubdtype(mask.dtype, jnp.floating)):
        raise TypeError(
            f"mask must be boolean or numeric 0/1 (nonzero = attend), got dtype {mask.dtype}"
        )
    if jnp.issubdtype(mask.dtype, jnp.floating) and concrete(mask):
        values = np.asarray(mask)
        other = values[(values != 0) & (values != 1)]
        if other.size:
            raise ValueError(
                f"mask must be boolean or 0/1 (nonzero = attend); this float mask of shape "
                f"{tuple(mask.shape)} also holds {float(other.ravel()[0])}: an additive mask "
                f"(0 to keep, -inf to mask) belongs in bias=, not mask="
            )
    return mask != 0


def lengths(name: str, value, batch_shape: tuple[int, ...]):
    """Sequence lengths (None passes): an integer array broadcastable to the batch dims `[...]` (jax.nn: `[B]`).

    Returns it fitted to `batch_shape` (`fit_shape`).
    """
    if value is None:
        return None
    value = jnp.asarray(value)
    if not jnp.issubdtype(value.dtype, jnp.integer):
        raise TypeError(f"{name} must be an integer array, got dtype {value.dtype}")
    fitted = fit_shape(value, batch_shape)
    if fitted is None:
        raise ValueError(
            f"{name} of shape {tuple(value.shape)} does not broadcast to the batch dims {batch_shape}"
        )
    return fitted


def window(local_window_size) -> Optional[tuple[int, int]]:
    """jax.nn's `local_window_size`: an int w (meaning (w, w)) or (left, right), non-negative ints.

    Returns (left, right) as ints, or None for None.
    """
    if local_window_size is None:
        return None
    pair = (local_window_size,) * 2 if isinstance(local_window_size, _INTS) else local_window_size
    ok = isinstance(pair, (tuple, list)) and len(pair) == 2
    ok = ok and all(isinstance(w, _INTS) and not isinstance(w, bool) and w >= 0 for w in pair)
    if not ok:
        raise ValueError(
            f"local_window_size must be a non-negative int or a pair (left, right), got {local_window_size!r}"
        )
    return int(pair[0]), int(pair[1])


def dropout(dropout_rate, dropout_rng) -> bool:
    """A dropout rate in [0, 1), with a PRNG key when it is > 0; returns True when dropout is to be applied."""
    rate("dropout_rate", dropout_rate)
    if dropout_rate > 0 and dropout_rng is None:
        raise ValueError(f"dropout_rate={dropout_rate} needs a dropout_rng (a PRNG key)")
    return dropout_rate > 0


def as_arrays(*arrays):
    """Array-likes (lists, tuples, NumPy arrays, scalars) as `jnp` arrays, as `jax.nn` accepts them; JAX
    arrays and tracers pass through unchanged. Anything else (None, strings, objects) also passes through,
    for the callee's own check to name it."""
    array_like = (list, tuple, np.ndarray, np.generic, int, float)
    return tuple(
        jnp.asarray(x) if isinstance(x, array_like) and not isinstance(x, bool) else x
        for x in arrays
    )
