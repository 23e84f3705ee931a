"""The test processes lower every program into one MLIR context per thread (tests/mlir_context.py); the
lowered modules are the ones a fresh context gives."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.interpreters import mlir

import attnjax
from tests import mlir_context

X = np.random.default_rng(0).standard_normal((2, 6, 3, 4)).astype(np.float32)


def attention(q):
    return attnjax.dot_product_attention(q, q, q, is_causal=True)


def gradient(q):
    return jax.grad(lambda x: jnp.sum(attention(x) ** 2))(q)


@pytest.mark.parametrize("fn", [attention, gradient, jnp.cumsum])
def test_the_reused_context_lowers_the_module_a_fresh_one_does(fn, monkeypatch):
    def lowered_text():  # a new function each time: lowered anew, not read from JAX's lowering cache
        return jax.jit(lambda x: fn(x)).lower(X).as_text()

    reused = lowered_text()
    monkeypatch.setattr(mlir, "make_ir_context", mlir_context.MAKE_FRESH_CONTEXT)
    assert lowering_context(fn) is not mlir_context.reused_context()  # a fresh context
    assert lowered_text() == reused


def lowering_context(fn):
    """The MLIR context of `fn` lowered anew (a new function: not read from JAX's lowering cache)."""
    return jax.jit(lambda x: fn(x)).lower(X).compiler_ir().context


def test_lowering_in_the_suite_uses_one_context_per_thread():
    first = lowering_context(attention)
    assert lowering_context(jnp.cumsum) is first
    other = []
    thread = threading.Thread(target=lambda: other.append(lowering_context(jnp.cumsum)))
    thread.start()
    thread.join()
    assert other[0] is not first
