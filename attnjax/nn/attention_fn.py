"""The attention-function contract: `jax.nn.dot_product_attention`'s signature.

`MultiHeadAttention` calls its `attention_fn` with keyword arguments
(`mask=`, `is_causal=`, `scale=`, and `return_weights=`, `dropout_rate=`,
`dropout_rng=` only when needed). `require_keywords` reads a function's
signature once and raises a `ValueError` naming what it lacks, before any
compute.
`from_flax(fn)` and `to_flax(fn)` adapt between this contract and flax's
(`flax.nnx.dot_product_attention` / `flax.nnx.MultiHeadAttention`'s `attention_fn`).
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, Optional

import jax
import jax.numpy as jnp
from flax import nnx

from attnjax.attention import default_scale


@functools.lru_cache(maxsize=256)
def _signature_keywords(fn: Callable) -> Optional[frozenset]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume it takes what it is given
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _describe(fn: Callable) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    module = "jax.nn" if getattr(jax.nn, name, None) is fn else getattr(fn, "__module__", "?")
    return f"{name} from {module}"


def require_keywords(fn: Callable, names: tuple[str, ...], purpose: str) -> None:
    """Raises unless `fn` takes keyword arguments `names` (its signature is read once per function)."""
    try:
        accepted = _signature_keywords(fn)
    except TypeError:  # an unhashable callable: read it uncached
        accepted = _signature_keywords.__wrapped__(fn)
    missing = [n for n in names if accepted is not None and n not in accepted]
    if missing:
        takes = ", ".join(f"{n}=" for n in missing)
        raise ValueError(
            f"{purpose} unavailable with attention_fn={_describe(fn)}: it takes no {takes}; "
            f"use attnjax.dot_product_attention (or any function that takes {takes})"
        )


def check_weights_available(config) -> None:
    """Raises unless a layer of `config` (an `AttentionConfig`) can return its attention weights."""
    if config.attention_kind == "softmax":
        require_keywords(
            config.attention_fn,
            ("return_weights",),
            "attention weights (sow_weights / return_weights / return_intermediates) are",
        )


def from_flax(fn: Callable) -> Callable:
    """A flax-style attention function (`flax.nnx.dot_product_attention`'s signature) as an attnjax
    `attention_fn` (`jax.nn.dot_product_attention`'s keywords).

    flax scales the logits by 1/sqrt(D) (`attnjax.attention.default_scale`) and takes no `scale`; the
    adapter multiplies the query by scale / default_scale(D), so softmax(q k^T * scale) is what `fn`
    computes. Dropout keywords map to flax's (`deterministic` = no `dropout_rng`). It returns no
    weights (`return_weights` raises, as for jax.nn).
    Layouts agree: q `[..., T, H, D]`, k, v `[..., S, H, D]`, mask broadcastable to `[..., H, T, S]`.
    """

    def attention_fn(
        query,
        key,
        value,
        bias=None,
        mask=None,
        *,
        scale=None,
        is_causal=False,
        dropout_rate=0.0,
        dropout_rng=None,
    ):
        if scale is not None:
            query = query * jnp.asarray(scale / default_scale(query.shape[-1]), query.dtype)
        return fn(
            query,
            key,
            value,
            bias=bias,
            mask=mask,
            is_causal=is_causal,
            dropout_rate=dropout_rate,
            dropout_rng=dropout_rng,
            deterministic=dropout_rng is None,
        )

    attention_fn.__name__ = f"from_flax({getattr(fn, '__name__', type(fn).__name__)})"
    return attention_fn


def to_flax(fn: Optional[Callable] = None) -> Callable:
    """An attnjax attention function (default `attnjax.dot_product_attention`) as the `attention_fn`
    of `flax.nnx.MultiHeadAttention`, which calls it with flax's keywords.

    The logits are scaled by 1/sqrt(D), as flax's; `dtype` casts q, k, v first (flax's promotion);
    `module` (flax's `sow_weights`) sows the weights `[..., H, T, S]` as 'attention_weights' (read
    them as flax's: call the module under `nnx.capture(..., nnx.Intermediate)`); dropout
    (not `deterministic`, `dropout_rate > 0`) passes `dropout_rate` and `dropout_rng` on. Raises a
    `ValueError` for what it cannot honour: `broadcast_dropout=True` with dropout on (attnjax draws
    one mask entry per weight) and a `precision` other than None.
    """
    if fn is None:
        from attnjax.attention import dot_product_attention as fn

    def attention_fn(
        query,
        key,
        value,
        bias=None,
        mask=None,
        *,
        broadcast_dropout=True,
        dropout_rng=None,
        dropout_rate=0.0,
        deterministic=False,
        dtype=None,
        precision=None,
        module=None,
        is_causal=False,
    ):
        dropout = not deterministic and dropout_rate > 0
        if dropout and broadcast_dropout:
            raise ValueError(
                f"to_flax: broadcast_dropout=True (dropout_rate={dropout_rate}) is not supported; "
                "build flax's MultiHeadAttention with broadcast_dropout=False"
            )
        if precision is not None:
            raise ValueError(f"to_flax: precision={precision!r} is not supported (None only)")
        if dtype is not None:
            query, key, value = (jnp.asarray(x, dtype) for x in (query, key, value))
        kwargs = dict(bias=bias, mask=mask, is_causal=is_causal)
        if dropout:
            kwargs.update(dropout_rate=dropout_rate, dropout_rng=dropout_rng)
        if module is None:
            return fn(query, key, value, **kwargs)
        out, weights = fn(query, key, value, return_weights=True, **kwargs)
        module.sow(nnx.Intermediate, "attention_weights", weights)
        return out

    attention_fn.__name__ = f"to_flax({getattr(fn, '__name__', type(fn).__name__)})"
    return attention_fn
