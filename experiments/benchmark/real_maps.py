"""Benchmark rows of section 'pretrained': the leading singular values of a pretrained causal LM's own
attention maps on prose, by subspace iteration without the T x T matrix, against a dense SVD.

At `real_map_length` tokens of standard-library docstrings
(`attnjax.sentences.docstring_sentences`), the forward pass's q and k of the
layers `real_map_layers` (the sites q and k: after RoPE) give each head's
causal map, with the layer's scale,

    A = softmax(q k^T / (sqrt(Dh) tau) + causal mask).

Its sigma_1, sigma_2 by the streaming path (`attention_statistics` for the
rows' lse, then `leading_singular_values`, as `nn.attention_spectra` runs
them, `ITERATIONS` rounds), in float32 (timed, compile included) and in
float64, against the same maps built densely in float64 and NumPy's SVD.
Reported: the largest relative difference of sigma_1 and sigma_2 over those
layers' heads, in float64 (the method's accuracy, which the issue bounds at
1e-6) and in float32 (the method plus float32 rounding).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from attnjax.analysis import attention_statistics, leading_singular_values
from attnjax.attention import default_scale
from attnjax.sentences import docstring_sentences

SECTION = "pretrained"
ITERATIONS = 60  # `nn.attention_spectra`'s default rounds of subspace iteration


def prose_tokens(tokenizer, length: int) -> jax.Array:
    """The first `length` token ids `[1, length]` of the standard-library docstrings, joined."""
    ids = np.asarray(tokenizer.encode(" ".join(docstring_sentences())), np.int32)
    if ids.size < length:
        raise ValueError(
            f"real_map_length={length} exceeds the {ids.size} tokens of the prose text"
        )
    return jnp.asarray(ids[None, :length])


def dense_singular_values(q: np.ndarray, k: np.ndarray, scale: float, num_values: int = 2):
    """sigma_1..n of each head's causal map in float64: q `[T, H, Dh]`, k `[T, K, Dh]` -> `[H, n]`."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    length, heads = q.shape[0], q.shape[1]
    group = heads // k.shape[1]
    future = np.triu(np.ones((length, length), bool), 1)
    values = []
    for h in range(heads):
        logits = q[:, h] @ k[:, h // group].T * scale
        logits[future] = -np.inf
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        values.append(np.linalg.svd(weights, compute_uv=False)[:num_values])
    return np.stack(values)


def streaming_singular_values(q, k, scale: float, dtype) -> np.ndarray:
    """sigma_1, sigma_2 `[H, 2]` of one layer's causal maps by the streaming path, in `dtype`:
    q `[T, H, Dh]`, k `[T, K, Dh]`."""
    with jax.enable_x64(dtype == np.float64):
        q, k = jnp.asarray(q, dtype)[None], jnp.asarray(k, dtype)[None]
        lse = attention_statistics(q, k, is_causal=True, scale=scale).lse
        leading = leading_singular_values(
            q, k, lse, num_values=2, iterations=ITERATIONS, is_causal=True, scale=scale
        )
        return np.asarray(leading.values[0])


def _largest_relative_difference(values, reference) -> float:
    return float(np.max(np.abs(np.asarray(values) - reference) / reference))


def real_map_rows(model, tokenizer, model_label: str, cfg) -> list[dict]:
    """The streaming spectra of the model's maps at `cfg.real_map_length` tokens, and their accuracy
    against float64 dense SVDs on `cfg.real_map_layers`."""
    config = model.config
    if not config.causal or config.block.attention.window is not None:
        raise ValueError("real_map_rows needs a causal model without a sliding window")
    layers = tuple(cfg.real_map_layers)
    if not layers or any(not 0 <= layer < config.num_layers for layer in layers):
        raise ValueError(
            f"real_map_layers must be layers of the model (0..{config.num_layers - 1}), got {layers}"
        )
    tokens = prose_tokens(tokenizer, cfg.real_map_length)
    _, captured = model(tokens, capture=("q", "k"))
    scale = default_scale(config.block.head_dim) / config.block.attention.temperature
    float32, float64, seconds = [], [], 0.0
    for layer in layers:
        q, k = np.asarray(captured["q"][layer, 0]), np.asarray(captured["k"][layer, 0])
        reference = dense_singular_values(q, k, scale)
        start = time.perf_counter()
        values = streaming_singular_values(q, k, scale, np.float32)
        seconds += time.perf_counter() - start
        float32.append(_largest_relative_difference(values, reference))
        values = streaming_singular_values(q, k, scale, np.float64)
        float64.append(_largest_relative_difference(values, reference))
    heads = config.block.num_heads
    shape = f"B=1 T={cfg.real_map_length} prose, {config.num_layers} x {heads} heads"
    return [
        {
            "section": SECTION,
            "name": f"{model_label} leading singular values of its maps (streaming)",
            "shape": shape,
            "seconds": seconds,
            "max_relative_difference": max(float64),
            "max_relative_difference_float32": max(float32),
            "note": f"sigma_1, sigma_2 of every head of layers {', '.join(map(str, layers))} (float32 "
            f"time, compile included), {ITERATIONS} rounds, against float64 dense SVDs: the largest "
            f"relative difference, streaming in float64 {max(float64):.2g}, float32 {max(float32):.2g}",
        }
    ]
