"""The leading spectrum and the received mass of every layer's and head's attention map, from a model's
forward pass, in memory linear in T.

`attention_spectra(model, tokens)` captures each layer's q and k (the sites of
`attnjax.nn.sites`: after QK-norm and RoPE), then per layer, one after another
(`jax.lax.map`), from q and k alone (`attnjax.analysis.products`):

    lse_i, H_i   the rows' log-sum-exp and entropy, raw and normalised (`attention_statistics`)
    sigma_1..n   the leading singular values of each head's map A `[T, T]`, with error bounds
                 (randomized subspace iteration over A v and A^T u)
    m_j          the mass key j receives, sum_i a_ij, and the top-k keys
    |lambda_2|   for causal models, exactly: the second-largest diagonal entry a_ii

with the layer's logits q_i . k_j / (sqrt(Dh) tau), its causality, its
sliding window (per layer with `TransformerConfig.layer_windows`) and the call's key
padding: the weights are those of the model's forward pass (`capture=("weights",)` gives them densely,
at T x T cost). `layers` picks some layers (the forward pass still runs them all).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from attnjax.analysis.causal_spectrum import causal_eigenvalues, causal_slem
from attnjax.analysis.products import leading_singular_values, received_mass
from attnjax.analysis.streaming import attention_statistics
from attnjax.attention import default_scale
from attnjax.masks import window_bounds
from attnjax.result_repr import compact_repr

Array = jax.Array


class AttentionSpectra(NamedTuple):
    """`attention_spectra`: per layer, sequence and head."""

    values: Array  # [L, B, H, n]: sigma_1 >= ... >= sigma_n of each map
    bounds: (
        Array  # [L, B, H, n]: a singular value of the map lies within this distance of each value
    )
    mass: Array  # [L, B, H, S]: the mass each key receives, sum_i a_ij
    top_keys: Array  # [L, B, H, k] int32: the keys that receive the most, most first
    top_mass: Array  # [L, B, H, k]
    slem: Optional[Array]  # [L, B, H]: |lambda_2| of causal maps (None for bidirectional models)
    entropy: Array  # [L, B, H, T]: each row's entropy -sum_j a_ij log a_ij (nats)
    normalized_entropy: Array  # [L, B, H, T]: entropy / log(the row's visible keys); 0 for one key

    __repr__ = compact_repr


def _checked_layers(layers, num_layers: int) -> tuple:
    """`layers` (None: all) as a tuple of distinct layer indices in [0, num_layers)."""
    if layers is None:
        return tuple(range(num_layers))
    chosen = tuple(layers)
    valid = all(isinstance(i, int) and not isinstance(i, bool) for i in chosen)
    if not chosen or not valid or len(set(chosen)) != len(chosen):
        raise ValueError(f"layers must be distinct ints, got {layers!r}")
    if not all(0 <= i < num_layers for i in chosen):
        raise ValueError(f"layers must lie in [0, {num_layers}) for this model, got {chosen}")
    return chosen


def _map_options(model, window) -> dict:
    """The masks, scale and temperature of the model's attention maps in layers of sliding
    window `window` (softmax layers only)."""
    config, attention = model.config, model.config.block.attention
    if attention.attention_kind != "softmax":
        raise ValueError(
            f"attention spectra need softmax attention, got attention_kind={attention.attention_kind!r}"
        )
    return dict(
        is_causal=config.causal,
        local_window=window_bounds(window),
        scale=default_scale(config.block.head_dim),
        temperature=attention.temperature,
    )


@functools.partial(jax.jit, static_argnames=("options", "num_values", "top_k", "chunks"))
def _layer_spectra(q, k, key_padding, *, options, num_values, top_k, chunks):
    """Every layer's spectra: q `[L, B, T, H, Dh]`, k `[L, B, S, K, Dh]` -> `AttentionSpectra`."""
    options = dict(options)
    iterations, oversampling, query_chunk_size, key_chunk_size = chunks
    products = dict(
        options,
        key_padding=key_padding,
        query_chunk_size=query_chunk_size,
        key_chunk_size=key_chunk_size,
    )

    def one(qk):
        q, k = qk
        statistics = attention_statistics(q, k, key_padding=key_padding, **options)
        lse = statistics.lse
        leading = leading_singular_values(
            q,
            k,
            lse,
            num_values=num_values,
            oversampling=oversampling,
            iterations=iterations,
            **products,
        )
        mass = received_mass(q, k, lse, top_k=top_k, **products)
        slem = None
        if options["is_causal"]:
            eigenvalues = causal_eigenvalues(
                q,
                k,
                lse,
                scale=options["scale"],
                temperature=options["temperature"],
                key_padding=key_padding,
            )
            slem = causal_slem(eigenvalues)
        return (
            leading.values,
            leading.bounds,
            mass.mass,
            mass.top_keys,
            mass.top_mass,
            slem,
            statistics.entropy,
            statistics.normalized_entropy,
        )

    return AttentionSpectra(*jax.lax.map(one, (q, k)))


@nnx.jit
def _captured_qk(model, tokens, mask) -> dict:
    """Every layer's q and k from one forward pass, compiled: the logits are not an output of the
    program, so the head (Gemma 3's: 262,144 logits per token) is not run."""
    return model(tokens, mask=mask, capture=("q", "k"))[1]


def attention_spectra(
    model,
    tokens: Array,
    *,
    key_padding: Optional[Array] = None,
    num_values: int = 2,
    top_k: int = 8,
    iterations: int = 60,
    oversampling: int = 6,
    query_chunk_size: int = 256,
    key_chunk_size: int = 512,
    layers: Optional[Sequence[int]] = None,
) -> AttentionSpectra:
    """The leading singular values, received mass, row entropies and (causal) |lambda_2| of every layer's
    and head's map.

    Args:
      model: an `nn.Transformer` with softmax attention (a loaded checkpoint too).
      tokens: `[B, T]` token ids.
      key_padding: `[B, T]` bool, True for real tokens (also passed to the forward pass as its mask).
      num_values: singular values per head (`analysis.leading_singular_values`).
      top_k: keys per head in `top_keys` / `top_mass`.
      iterations: rounds of subspace iteration (the accuracy is in `bounds`; a flat spectrum needs
        more rounds).
      oversampling: extra starting vectors of the subspace iteration.
      query_chunk_size: queries per tile of the products (`analysis.attention_matvec`).
      key_chunk_size: keys per tile of the products.
      layers: the layers to analyse, distinct, from 0 (default: every layer); at 8k tokens a
        layer's spectra take a minute on a laptop CPU.

    Returns:
      `AttentionSpectra` with a leading layer axis `[L, ...]`: the layers of `layers` in their
      order (default: every layer, from 0).
    """
    windows = model.config.windows
    _map_options(model, None)  # softmax attention, before the forward pass
    chosen = _checked_layers(layers, len(windows))
    mask = None if key_padding is None else jnp.asarray(key_padding)[:, None, None, :]
    captured = _captured_qk(model, jnp.asarray(tokens), mask)
    parts, order = [], []
    for window in dict.fromkeys(windows[i] for i in chosen):  # one compiled program per window
        group = [i for i in chosen if windows[i] == window]
        parts.append(
            _layer_spectra(
                captured["q"][jnp.asarray(group)],
                captured["k"][jnp.asarray(group)],
                None if key_padding is None else jnp.asarray(key_padding),
                options=tuple(sorted(_map_options(model, window).items())),
                num_values=num_values,
                top_k=top_k,
                chunks=(iterations, oversampling, query_chunk_size, key_chunk_size),
            )
        )
        order += group
    if len(parts) == 1:
        return parts[0]
    back = jnp.asarray(
        [order.index(layer) for layer in chosen]
    )  # the rows of `chosen`, in its order
    return AttentionSpectra(
        *(None if f[0] is None else jnp.concatenate(f)[back] for f in zip(*parts))
    )
