"""Called again outside `jax.jit` with the same shapes and options, the streaming passes reuse their
compiled program: nothing is traced or lowered again (a `lax.scan` run eagerly would be, at every call:
0.6 s a call of `attention_statistics` at T = 512 instead of 10 ms)."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import analysis

LOWERING = "/jax/core/compile/jaxpr_to_mlir_module_duration"


@contextlib.contextmanager
def lowerings():
    """The number of programs lowered to MLIR inside the block (a list, filled when it exits)."""
    events = []

    def listen(event, *args, **kwargs):
        if event == LOWERING:
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    count = []
    try:
        yield count
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
        count.append(len(events))


def _inputs():
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(24, 4, 8)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(24, 2, 8)), jnp.float32)
    padding = jnp.asarray(np.arange(24) < 20)
    return q, k, padding


def _statistics(q, k, padding):
    return analysis.attention_statistics(
        q, k, is_causal=True, key_padding=padding, window=4, chunk_size=8, query_chunk_size=8
    )


CALLS = {
    "attention_statistics": _statistics,
    "attention_matvec": lambda q, k, padding: analysis.attention_matvec(
        q,
        k,
        _statistics(q, k, padding).lse,
        jnp.ones((4, 24, 2)),
        is_causal=True,
        key_padding=padding,
    ),
    "attention_rmatvec": lambda q, k, padding: analysis.attention_rmatvec(
        q,
        k,
        _statistics(q, k, padding).lse,
        jnp.ones((4, 24, 2)),
        is_causal=True,
        key_padding=padding,
    ),
    "received_mass": lambda q, k, padding: analysis.received_mass(
        q, k, _statistics(q, k, padding).lse, top_k=3, is_causal=True, key_padding=padding
    ),
    "leading_singular_values": lambda q, k, padding: analysis.leading_singular_values(
        q, k, _statistics(q, k, padding).lse, iterations=3, is_causal=True, key_padding=padding
    ),
}


@pytest.mark.parametrize("name", CALLS)
def test_a_second_call_lowers_nothing(name):
    q, k, padding = _inputs()
    first = jax.block_until_ready(CALLS[name](q, k, padding))
    with lowerings() as count:
        second = jax.block_until_ready(CALLS[name](q, k, padding))
    assert count == [0], f"{name} lowered {count[0]} programs again"
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(second)):
        np.testing.assert_array_equal(a, b)


def test_the_counter_sees_an_eager_scan():
    """The check above can fail: a `lax.scan` run outside `jax.jit` is lowered at every call."""

    def cumulative(x):
        return jax.lax.scan(lambda c, y: (c + y, c), 0.0, x)[1]

    x = jnp.arange(5.0)
    cumulative(x)
    with lowerings() as count:
        cumulative(x)
    assert count[0] >= 1
