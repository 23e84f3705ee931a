"""The leading spectrum and the received mass of every layer's and head's attention map, from a model's
forward pass, in memory linear in T.

`attention_spectra(model, tokens)` captures each layer's q and k (the sites of
`attnjax.nn.sites`: after QK-norm and RoPE), then per layer, one after another
(`jax.lax.map`), from q and k alone (`attnjax.analysis.products`):

    lse_i        the rows' log-sum-exp (`attention_statistics`, block by block)
    sigma_1..n   the leading singular values of each head's map A `[T, T]`, with error bounds
                 (randomized subspace iteration over A v and A^T u)
    m_j          the mass key j receives, sum_i a_ij, and the top-k keys
    |lambda_2|   for causal models, exactly: the second-largest diagonal entry a_ii

with the layer's logits q_i . k_j / (sqrt(Dh) tau), its causality, its
sliding window (per layer with `TransformerConfig.layer_windows`) and the call's key
padding: the weights are those of the model's forward pass (`capture=("weights",)` gives them densely, at T x T cost).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

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

    __repr__ = compact_repr


def _layer_windows(model) -> tuple:
    """Each layer's sliding window W (None: none): `layer_windows`, else the attention's `window`."""
    config = model.config
    return config.layer_windows or (config.block.attention.window,) * config.num_layers


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
        lse = attention_statistics(q, k, key_padding=key_padding, **options).lse
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
        return leading.values, leading.bounds, mass.mass, mass.top_keys, mass.top_mass, slem

    return AttentionSpectra(*jax.lax.map(one, (q, k)))


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
) -> AttentionSpectra:
    """The leading singular values, received mass and (causal) |lambda_2| of every layer's and head's map.

    Args:
      model: an `nn.Transformer` with softmax attention (a loaded checkpoint too).
      tokens: `[B, T]` token ids.
      key_padding: `[B, T]` bool, True for real tokens (also passed to the forward pass as its mask).
      num_values: singular values per head (`analysis.leading_singular_values`).
      top_k: keys per head in `top_keys` / `top_mass`.
      iterations: rounds of subspace iteration (the accuracy is in `bounds`; a flat spectrum needs
        more rounds).
      oversampling: extra starting vectors of the subspace iteration.
      query_chunk_size, key_chunk_size: queries and keys per tile of the products
        (`analysis.attention_matvec`).

    Returns:
      `AttentionSpectra` with a leading layer axis `[L, ...]` (layers from 0).
    """
    windows = _layer_windows(model)
    _map_options(model, None)  # softmax attention, before the forward pass
    mask = None if key_padding is None else jnp.asarray(key_padding)[:, None, None, :]
    _, captured = model(tokens, mask=mask, capture=("q", "k"))
    parts, order = [], []
    for window in dict.fromkeys(windows):  # the layers of each window, one compiled program each
        layers = [i for i, w in enumerate(windows) if w == window]
        parts.append(
            _layer_spectra(
                captured["q"][jnp.asarray(layers)],
                captured["k"][jnp.asarray(layers)],
                None if key_padding is None else jnp.asarray(key_padding),
                options=tuple(sorted(_map_options(model, window).items())),
                num_values=num_values,
                top_k=top_k,
                chunks=(iterations, oversampling, query_chunk_size, key_chunk_size),
            )
        )
        order += layers
    if len(parts) == 1:
        return parts[0]
    back = jnp.asarray(np.argsort(order))
    return AttentionSpectra(
        *(None if f[0] is None else jnp.concatenate(f)[back] for f in zip(*parts))
    )
