"""Activation patching and ablation sweeps, each one compiled program over every layer and head or position.

The standard experiments, as grids of a metric of the logits:

    ablate_heads(model, tokens, metric, mode)            [L, H]: head (l, h)'s output zeroed, or
                                                         replaced by its mean over the positions
    patch_heads(model, clean, corrupted, metric)         [L, H]: head (l, h)'s output in the corrupted
                                                         run replaced by the clean run's
    patch_residual(model, clean, corrupted, metric)      [L, T]: the residual stream entering layer l
                                                         (`resid_pre`) at position t replaced by the
                                                         clean run's

Each is a `sites.replace` edit whose `where` mask selects one (layer, head)
or (layer, position): the masks are data, so every cell of the grid runs in
the same compiled program, `chunk_size` cells at a time under `jax.vmap`
(memory: `chunk_size` forward passes), chunks in turn with `progress`. A mean
ablation of head h in layer l takes the clean run's mean of o^h over the
positions, which is the mean `edits.ablate_head(l, h, 'mean')` computes (the
layers before l are the clean run's).

`metric(logits)` maps the logits `[B, T, V]` of one run to a scalar (or any
array: the grid then has its shape after the two grid axes), e.g. the logit
difference of two answer tokens at the last position.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import checks
from attnjax.nn import sites as sites_lib

Array = jax.Array
ABLATIONS = ("zero", "mean")


def _one_hot_masks(grid: tuple[int, int], axes: tuple[int, int], rank: int) -> np.ndarray:
    """`[G0 * G1, *shape]` boolean masks, mask i True at cell divmod(i, G1) of a `rank`-axis array whose
    `axes` hold the grid (size 1 elsewhere)."""
    shape = [1] * rank
    shape[axes[0]], shape[axes[1]] = grid
    masks = np.zeros((grid[0] * grid[1], *shape), bool)
    for i in range(grid[0] * grid[1]):
        index = [i] + [0] * rank
        index[1 + axes[0]], index[1 + axes[1]] = divmod(i, grid[1])
        masks[tuple(index)] = True
    return masks


def _format_seconds(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def _sweep(
    model,
    tokens: Array,
    site: str,
    value: Array,
    masks: np.ndarray,
    metric: Callable,
    chunk_size: int,
    progress: Optional[Callable[[str], None]],
) -> np.ndarray:
    """metric(model(tokens, edits=[replace(site, value, mask)])) for every mask `[N, ...]` -> `[N, ...]`:
    one compiled program of `chunk_size` masks, run over the chunks in turn (the last padded)."""
    graphdef, state = nnx.split(model)

    @jax.jit
    def chunk(state, tokens, value, wheres):
        @nnx.vmap(in_axes=(None, 0))
        def one(model, where):
            return metric(model(tokens, edits=(sites_lib.replace(site, value, where),)))

        return one(nnx.merge(graphdef, state), wheres)

    count = masks.shape[0]
    padded = np.concatenate([masks, np.repeat(masks[:1], -count % chunk_size, axis=0)])
    results, start = [], time.perf_counter()
    num_chunks = padded.shape[0] // chunk_size
    for i in range(num_chunks):
        wheres = jnp.asarray(padded[i * chunk_size : (i + 1) * chunk_size])
        results.append(np.asarray(chunk(state, tokens, value, wheres)))
        if progress is not None:
            done, elapsed = min((i + 1) * chunk_size, count), time.perf_counter() - start
            left = elapsed / (i + 1) * (num_chunks - i - 1)
            progress(
                f"{site} sweep: chunk {i + 1}/{num_chunks} ({done}/{count} cells), "
                f"elapsed {_format_seconds(elapsed)}, about {_format_seconds(left)} left"
            )
    return np.concatenate(results)[:count]


def _check_call(tokens, metric, chunk_size, corrupted=None) -> None:
    if not callable(metric):
        raise TypeError(f"metric must be a function of the logits, got {type(metric).__name__}")
    checks.positive_int("chunk_size", chunk_size)
    if corrupted is not None and tuple(np.shape(corrupted)) != tuple(np.shape(tokens)):
        raise ValueError(
            f"clean and corrupted tokens must have one shape, got {tuple(np.shape(tokens))} "
            f"and {tuple(np.shape(corrupted))}"
        )


def ablate_heads(
    model,
    tokens: Array,
    metric: Callable,
    *,
    mode: str = "zero",
    chunk_size: int = 16,
    progress: Optional[Callable[[str], None]] = None,
) -> np.ndarray:
    """`[L, H]`: metric(logits) with head h of layer l ablated, every (l, h) in one compiled program.

    mode 'zero': o^h <- 0; 'mean': o^h_t <- (1/T) sum_t' o^h_t' (the clean run's, per sequence),
    as `edits.ablate_head`. tokens `[B, T]`.
    """
    _check_call(tokens, metric, chunk_size)
    checks.choice("mode", mode, ABLATIONS)
    value = jnp.zeros((), jnp.float32)
    if mode == "mean":
        _, clean = model(tokens, capture=("head_out",))
        value = jnp.mean(clean["head_out"], axis=2, keepdims=True)  # [L, B, 1, H, Dh]
    return _head_grid(model, tokens, value, metric, chunk_size, progress)


def _head_grid(model, tokens, value, metric, chunk_size, progress) -> np.ndarray:
    """`[L, H]`: metric(logits) with head_out of head h in layer l replaced by `value` there."""
    layers, heads = model.config.num_layers, model.config.block.num_heads
    masks = _one_hot_masks((layers, heads), (0, 3), 5)  # [L H, L, 1, 1, H, 1]
    grid = _sweep(model, tokens, "head_out", value, masks, metric, chunk_size, progress)
    return grid.reshape((layers, heads) + grid.shape[1:])


def patch_heads(
    model,
    clean_tokens: Array,
    corrupted_tokens: Array,
    metric: Callable,
    *,
    chunk_size: int = 16,
    progress: Optional[Callable[[str], None]] = None,
) -> np.ndarray:
    """`[L, H]`: metric(logits) of the corrupted run with head h of layer l given the clean run's output
    o^h at every position. Tokens `[B, T]`, one shape."""
    _check_call(clean_tokens, metric, chunk_size, corrupted_tokens)
    _, clean = model(clean_tokens, capture=("head_out",))
    return _head_grid(model, corrupted_tokens, clean["head_out"], metric, chunk_size, progress)


def patch_residual(
    model,
    clean_tokens: Array,
    corrupted_tokens: Array,
    metric: Callable,
    *,
    site: str = "resid_pre",
    chunk_size: int = 16,
    progress: Optional[Callable[[str], None]] = None,
) -> np.ndarray:
    """`[L, T]`: metric(logits) of the corrupted run with the residual stream at layer l, position t
    replaced by the clean run's (`site`: 'resid_pre', 'resid_mid' or 'resid_post'). Tokens `[B, T]`."""
    _check_call(clean_tokens, metric, chunk_size, corrupted_tokens)
    checks.choice("site", site, ("resid_pre", "resid_mid", "resid_post"))
    layers, length = model.config.num_layers, np.shape(clean_tokens)[1]
    _, clean = model(clean_tokens, capture=(site,))
    masks = _one_hot_masks((layers, length), (0, 2), 4)  # [L T, L, 1, T, 1]
    grid = _sweep(model, corrupted_tokens, site, clean[site], masks, metric, chunk_size, progress)
    return grid.reshape((layers, length) + grid.shape[1:])
