"""The attention-function contract: `jax.nn.dot_product_attention`'s signature.

`MultiHeadAttention` calls its `attention_fn` with keyword arguments
(`mask=`, `is_causal=`, `scale=`, and `return_weights=`, `dropout_rate=`,
`dropout_rng=` only when needed). `require_keywords` reads a function's
signature once and raises a `ValueError` naming what it lacks, before any
compute.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Optional

import jax


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
        require_keywords(config.attention_fn, ("return_weights",),
                         "attention weights (sow_weights / return_weights / return_intermediates) are")
