"""Per-token loss of StreamingLLM's caches and of its two baselines, for a batch of segments.

With tokens x_0..x_(T-1) and a cache of C slots, each function gives the
next-token loss nll_p = -log p(x_(p+1) | what position p sees) at positions
p = C - 1, ..., T - 2 (`[B, T - C]`):

* `cache_nll`: the rolling cache of `attnjax.nn.sink_cache` with n sinks
  and C - n window slots (n = 0: window attention), the model fed one token
  at a time after a prefill of C - 1 tokens (shared by every n: nothing is
  evicted before position C, so the slots hold the same keys and values),
  positions assigned within the cache, as Xiao et al. evaluate. Nothing is evicted before position C, so
  nll_(C-1) equals full attention's (a sanity check).
* `full_nll`: full causal attention over the whole segment (one forward).
* `recompute_nll`: the sliding window with re-computation: for each p, the
  C tokens x_(p-C+1)..x_p re-encoded at positions 0..C-1 (nll_(C-1) is the
  segment's own first C tokens); a model that reads every input after a
  `<bos>` gets it in place of the window's oldest token.

The head over the vocabulary runs on the positions read only (Gemma 3's has
262,144 rows): the forward passes capture the final norm's output and
`Transformer.project` maps it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

Array = jax.Array


def next_token_nll(model, final: Array, targets: Array) -> Array:
    """`-log softmax(project(final))[target]` `[B, P]` (float32) from the final norm's output `[B, P, D]`
    and target ids `[B, P]`, one sequence at a time (logits `[P, V]` at most in memory)."""

    def one(args):
        f, t = args
        logp = jax.nn.log_softmax(model.project(f).astype(jnp.float32), axis=-1)
        return -jnp.take_along_axis(logp, t[:, None], axis=-1)[:, 0]

    return jax.lax.map(one, (final, targets))


@functools.partial(jax.jit, static_argnames=("graphdef", "n_sinks", "slots"))
def _cache_nll(graphdef, state, tokens: Array, *, n_sinks: tuple[int, ...], slots: int) -> Array:
    model = nnx.merge(graphdef, state)
    model.init_cache(tokens.shape[0], slots)
    # The prefill fills slots 0..C-2 whatever n is (nothing is evicted before position C): done once.
    model(tokens[:, : slots - 1], decode=True, deterministic=True, sink_cache=(0, slots))
    graphdef, prefilled = nnx.split(model)
    out = []
    for n in n_sinks:
        sink_cache = (n, slots - n)

        def feed(state, xs, sink_cache=sink_cache):
            token, target = xs
            model = nnx.merge(graphdef, state)
            logits = model(token[:, None], decode=True, deterministic=True, sink_cache=sink_cache)
            logp = jax.nn.log_softmax(logits[:, -1].astype(jnp.float32), axis=-1)
            return nnx.state(model), -jnp.take_along_axis(logp, target[:, None], axis=-1)[:, 0]

        _, nll = jax.lax.scan(feed, prefilled, (tokens[:, slots - 1 : -1].T, tokens[:, slots:].T))
        out.append(nll.T)
    return jnp.stack(out)


def cache_nll(model, tokens: Array, n_sinks, cache: int) -> Array:
    """nll `[len(n_sinks), B, T - cache]` at positions cache-1..T-2 through the sink cache
    (n, cache - n) for each n of `n_sinks` (one prefill shared by all)."""
    n_sinks = tuple(int(n) for n in n_sinks)
    if not n_sinks or not all(0 <= n < cache for n in n_sinks) or cache >= tokens.shape[1]:
        raise ValueError(
            f"need 0 <= n_sink < cache < T, got n_sinks={n_sinks}, cache={cache}, T={tokens.shape[1]}"
        )
    graphdef, state = nnx.split(model)
    return _cache_nll(graphdef, state, tokens, n_sinks=n_sinks, slots=cache)


@functools.partial(nnx.jit, static_argnames=("start",))
def full_nll(model, tokens: Array, start: int) -> Array:
    """nll `[B, T - 1 - start]` at positions start..T-2 under full causal attention (one forward)."""
    _, captured = model(tokens, capture=("final",))
    return next_token_nll(model, captured["final"][:, start:-1], tokens[:, start + 1 :])


@nnx.jit
def _last_nll(model, contexts: Array, targets: Array) -> Array:
    _, captured = model(contexts, capture=("final",))
    return next_token_nll(model, captured["final"][:, -1:], targets[:, None])[:, 0]


def recompute_nll(model, tokens: Array, cache: int, chunk: int = 64, prefix=()) -> Array:
    """nll `[B, T - cache]` at positions cache-1..T-2, each from its own forward over the `cache` tokens
    ending at p (positions 0..cache-1), `chunk` such windows per forward. With a `prefix` (the ids a
    tokenizer opens every input with, Gemma 3's `<bos>`), each window is the prefix and the last
    cache - len(prefix) tokens: the model's input as it was trained to read it."""
    batch, length = tokens.shape
    starts = jnp.arange(length - cache)  # window of position p = start + cache - 1
    windows = tokens[:, starts[:, None] + jnp.arange(cache)[None, :]]  # [B, P, C]
    if prefix:
        windows = windows.at[:, :, : len(prefix)].set(jnp.asarray(prefix, windows.dtype))
    count = batch * (length - cache)
    pad = (
        -count % chunk
    )  # every forward the same shape (one compile): the last one padded by repeats
    contexts = jnp.pad(windows.reshape(count, cache), ((0, pad), (0, 0)), mode="edge")
    targets = jnp.pad(tokens[:, cache:].reshape(count), (0, pad), mode="edge")
    out = [
        _last_nll(model, contexts[i : i + chunk], targets[i : i + chunk])
        for i in range(0, count + pad, chunk)
    ]
    return jnp.concatenate(out)[:count].reshape(batch, length - cache)
