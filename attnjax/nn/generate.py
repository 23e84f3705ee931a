"""Autoregressive generation of a causal `Transformer` as one jitted program.

`Transformer.generate(prompt_tokens, max_new_tokens, key=, temperature=)`
checks its arguments (`check_generate`) and calls `generate`: the prompt
`[B, P]` is prefilled as one chunk into fresh caches of length
P + max_new_tokens, then tokens are decoded one at a time in a `lax.scan`.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
from flax import nnx

from attnjax import checks
from attnjax.nn import sink_cache as sink_lib
from attnjax.nn.tokens import check_tokens

Array = jax.Array


def check_generate(
    config, prompt_tokens, max_new_tokens, key, temperature, sink_cache=None
) -> None:
    """`Transformer.generate`'s checks, before any compute: a causal token model whose head predicts
    tokens, integer prompts `[B, P]`, a key to sample with, room in a learned position table."""
    if (
        config.vocab_size is None
        or config.head is None
        or config.out_features != config.vocab_size
        or not config.causal
    ):
        raise ValueError(
            "generate needs a causal token model whose head predicts tokens "
            f"(causal={config.causal}, vocab_size={config.vocab_size}, "
            f"output_features={config.out_features})"
        )
    if (
        not hasattr(prompt_tokens, "ndim")
        or prompt_tokens.ndim != 2
        or not jnp.issubdtype(prompt_tokens.dtype, jnp.integer)
    ):
        raise ValueError(
            f"prompt_tokens must be integer tokens [B, P], got {type(prompt_tokens).__name__} "
            f"of dtype {getattr(prompt_tokens, 'dtype', None)}, shape {jnp.shape(prompt_tokens)}"
        )
    if not isinstance(prompt_tokens, jax.core.Tracer):
        check_tokens(prompt_tokens, config.vocab_size)
    checks.positive_int("max_new_tokens", max_new_tokens)
    if (
        not isinstance(temperature, (int, float))
        or isinstance(temperature, bool)
        or not temperature >= 0  # NaN too
    ):
        raise ValueError(f"temperature must be a number >= 0 (0: greedy), got {temperature!r}")
    if temperature > 0 and not isinstance(key, jax.Array):
        raise ValueError(
            f"sampling (temperature={temperature}) needs key=, a PRNG key; got {key!r}"
        )
    total = prompt_tokens.shape[1] + max_new_tokens
    if sink_cache is not None:
        sink_lib.check_sink_cache(sink_cache)
        if config.positions is not None:
            raise ValueError(
                f"sink_cache needs a model without absolute positions (positions={config.positions!r})"
            )
    elif config.positions == "learned" and total > config.max_len:
        raise ValueError(
            f"prompt_tokens of shape {prompt_tokens.shape} plus max_new_tokens={max_new_tokens} "
            f"exceed max_len {config.max_len}"
        )


def _next_token(logits: Array, key: Optional[Array], step, temperature: float) -> Array:
    """logits `[B, V]` -> tokens `[B]`: argmax (temperature 0) or a sample with fold_in(key, step)."""
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1)
    return jax.random.categorical(jax.random.fold_in(key, step), logits / temperature, axis=-1)


@functools.partial(
    jax.jit, static_argnames=("graphdef", "max_new_tokens", "temperature", "sink_cache")
)
def generate(
    graphdef,
    state,
    prompt,
    key,
    edits=None,
    *,
    max_new_tokens: int,
    temperature: float,
    sink_cache=None,
) -> Array:
    """`Transformer.generate` as one program: prefill, then a scan over steps carrying the model state.

    `edits` (a pytree: their layers and heads are static) apply at every call;
    with `sink_cache` the caches have n_sink + W slots and prompt tokens past
    them are fed one at a time before sampling starts.
    """
    model = nnx.merge(graphdef, state)
    batch, length = prompt.shape
    slots = length + max_new_tokens if sink_cache is None else sum(sink_cache)
    model.init_cache(batch, slots)
    call = functools.partial(
        model, decode=True, deterministic=True, edits=edits, sink_cache=sink_cache
    )
    head = min(length, slots)
    logits = call(prompt[:, :head])[:, -1]
    if head < length:  # the rest of a long prompt, one token at a time
        graphdef, state = nnx.split(model)

        def feed(state, token):
            model = nnx.merge(graphdef, state)
            logits = model(
                token[:, None], decode=True, deterministic=True, edits=edits, sink_cache=sink_cache
            )
            return nnx.state(model), logits[:, -1]

        state, rest = jax.lax.scan(feed, state, prompt[:, head:].T)
        model, logits = nnx.merge(graphdef, state), rest[-1]
    first = _next_token(logits, key, 0, temperature).astype(prompt.dtype)
    graphdef, state = nnx.split(model)

    def step(carry, t):
        state, token = carry
        model = nnx.merge(graphdef, state)
        logits = model(
            token[:, None], decode=True, deterministic=True, edits=edits, sink_cache=sink_cache
        )
        token = _next_token(logits[:, -1], key, t, temperature).astype(prompt.dtype)
        return (nnx.state(model), token), token

    _, tokens = jax.lax.scan(step, (state, first), jnp.arange(1, max_new_tokens))
    return jnp.concatenate([prompt, first[:, None], tokens.T], axis=1)
