"""Exact causal attention in query blocks, each block reading only the keys up to its last query.

In causal self-attention (T = S, query t sees keys s <= t) the weights above
the diagonal are exactly 0, so the rows of the query block [a, b) need only
the keys [0, b). Computing block by block skips the masked upper triangle
(about half of the products and of the softmax at large T), and no `[T, T]`
array is formed: each block's logits and weights are `[..., H, b - a, b]`.
Each row's softmax still runs over every key it can see, so the result is the
dense one up to the summation order of a row.

Measured on a 2-core CPU (B=1, T=8192, H=8, D=64, float32, forward under
`jit`, best of 3): the dense core 4.13-4.18 s; blocks of 128, 256 and 512
queries 2.63, 2.31 and 2.33-2.58 s (the largest difference from the dense
output 1.5e-7, 4.1e-8 and 0). The benchmark's attention section times
`attnjax.dot_product_attention` (blocked from T = 2048) against the dense core
(`return_weights=True`) and jax.nn.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp

Array = jax.Array

# Queries per block, and the fewest blocks for which the blocked path is taken.
BLOCK = 512
MIN_BLOCKS = 4


def applies(
    query: Array,
    key: Array,
    *,
    is_causal: bool,
    window,
    keep: Optional[Array],
    return_weights: bool,
) -> bool:
    """Whether `attend` computes this call: causal self-attention of at least `MIN_BLOCKS`
    blocks (T = S >= `MIN_BLOCKS` x `BLOCK`), without a local window, dropout or returned weights
    (which need the whole `[T, S]` matrix)."""
    length = query.shape[-3]
    return (
        is_causal
        and window is None
        and keep is None
        and not return_weights
        and key.shape[-3] == length
        and length >= MIN_BLOCKS * BLOCK
    )


def rows_and_keys(x: Optional[Array], rows: slice, keys: slice, shape: tuple) -> Optional[Array]:
    """A mask or bias broadcastable to `shape` `[..., T, S]`, cut to `[..., rows, keys]` on the
    axes where it is not broadcast (its size-1 and missing axes stay as they are)."""
    if x is None:
        return None
    index = [slice(None)] * x.ndim
    if x.ndim >= 2 and x.shape[-2] == shape[-2]:
        index[-2] = rows
    if x.ndim >= 1 and x.shape[-1] == shape[-1]:
        index[-1] = keys
    return x[tuple(index)]


def attend(
    core: Callable,
    query: Array,
    key: Array,
    value: Array,
    mask: Optional[Array],
    bias: Optional[Array],
    *,
    scale,
    temperature,
) -> Array:
    """`core(query, key, value, mask, bias, scale=, temperature=)[0]`, block by block.

    query `[..., T, H, D]`, key `[..., T, K, D]`, value `[..., T, K, Dv]`; mask and bias
    broadcastable to `[..., H, T, T]`, the causal mask included in `mask` (the blocks only
    leave out keys it masks). Query block [a, b) reads keys [0, b); returns out
    `[..., T, H, Dv]`, the blocks' outputs concatenated over T.
    """
    length = query.shape[-3]
    shape = (length, length)
    outs = []
    for start in range(0, length, BLOCK):
        end = min(start + BLOCK, length)
        rows, keys = slice(start, end), slice(0, end)
        out, _ = core(
            query[..., rows, :, :],
            key[..., keys, :, :],
            value[..., keys, :, :],
            rows_and_keys(mask, rows, keys, shape),
            rows_and_keys(bias, rows, keys, shape),
            scale=scale,
            temperature=temperature,
        )
        outs.append(out)
    return jnp.concatenate(outs, axis=-3)
