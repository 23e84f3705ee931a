"""Random test inputs drawn on the host with NumPy, seeded by an integer.

An eager `jax.random` draw compiles a program (the threefry hash) for every
new shape and dtype, often the costliest compile of a small test; a NumPy draw
compiles nothing. Signatures follow jax.random's, with a seed for the key; the
default dtypes are jax's (float64 and int64 here, where x64 is on).
"""

import jax.numpy as jnp
import numpy as np


def normal(seed, shape, dtype=float):
    """Standard normal `shape` array."""
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(jnp.dtype(dtype)))


def bernoulli(seed, p, shape):
    """Boolean `shape` array, True with probability p."""
    return jnp.asarray(np.random.default_rng(seed).random(shape) < p)


def randint(seed, shape, minval, maxval, dtype=int):
    """Integers uniform in [minval, maxval)."""
    return jnp.asarray(
        np.random.default_rng(seed).integers(minval, maxval, shape).astype(jnp.dtype(dtype))
    )
