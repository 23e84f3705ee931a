"""Causal attention in query blocks (`attnjax.causal_blocks`): the dense result, with less work and memory.

The value tests shrink the block (`BLOCK` = 8) so that short sequences take the blocked path;
the memory test compiles the real block size at T = 2048 without running it.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnjax
from attnjax import causal_blocks
from tests import host_random
from tests.reference import softmax_attention

B, T, H, K, D = 2, 37, 4, 2, 8  # T not a multiple of the block: the last block is partial


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(causal_blocks, "BLOCK", 8)
    monkeypatch.setattr(causal_blocks, "MIN_BLOCKS", 4)


def _inputs(dtype):
    q = host_random.normal(0, (B, T, H, D), dtype)
    k = host_random.normal(1, (B, T, K, D), dtype)
    v = host_random.normal(2, (B, T, K, D), dtype)
    bias = host_random.normal(3, (1, H, T, T), dtype)
    return q, k, v, bias


def test_the_blocked_path_is_taken_only_where_it_applies(small_blocks):
    q, k, _, _ = _inputs(jnp.float32)
    options = dict(is_causal=True, window=None, keep=None, return_weights=False)
    assert causal_blocks.applies(q, k, **options)
    assert not causal_blocks.applies(q, k, **{**options, "is_causal": False})
    assert not causal_blocks.applies(q, k, **{**options, "window": (4, 0)})
    assert not causal_blocks.applies(q, k, **{**options, "return_weights": True})
    assert not causal_blocks.applies(q, k[:, :-1], **options)  # T != S
    assert not causal_blocks.applies(q[:, :31], k[:, :31], **options)  # fewer than 4 blocks


@pytest.mark.parametrize("dtype, tol", [(jnp.float64, 1e-12), (jnp.float32, 2e-6)])
def test_blocks_equal_the_float64_reference_with_gqa_bias_and_padding(small_blocks, dtype, tol):
    """Key padding in the second sequence, query padding in the first (its last rows: zero output)."""
    q, k, v, bias = _inputs(dtype)
    key_lengths, query_lengths = np.array([T, T - 11]), np.array([T - 5, T])
    attend = jax.jit(functools.partial(attnjax.dot_product_attention, is_causal=True))
    out = attend(
        q,
        k,
        v,
        bias,
        key_value_seq_lengths=jnp.asarray(key_lengths, jnp.int32),
        query_seq_lengths=jnp.asarray(query_lengths, jnp.int32),
    )
    causal = np.tril(np.ones((T, T), bool))
    keys = np.arange(T)[None, :] < key_lengths[:, None]  # [B, S]
    queries = np.arange(T)[None, :] < query_lengths[:, None]  # [B, T]
    mask = causal[None, None] & keys[:, None, None, :] & queries[:, None, :, None]
    expected, _ = softmax_attention(q, k, v, mask=mask, bias=bias)
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)
    np.testing.assert_array_equal(out[0, T - 5 :], 0.0)


def test_gradients_equal_the_dense_cores(small_blocks):
    """Through q, k, v and the bias; the dense core runs when the weights are returned."""
    q, k, v, bias = _inputs(jnp.float64)

    def loss(return_weights):
        def f(q, k, v, bias):
            out = attnjax.dot_product_attention(
                q, k, v, bias, is_causal=True, return_weights=return_weights
            )
            out = out[0] if return_weights else out
            return jnp.sum(jnp.sin(out))

        return jax.jit(jax.grad(f, argnums=(0, 1, 2, 3)))(q, k, v, bias)

    for blocked, dense in zip(loss(False), loss(True)):
        np.testing.assert_allclose(blocked, dense, rtol=1e-12, atol=1e-12)


def test_a_mask_cut_per_block_keeps_its_broadcast_axes():
    shape = (10, 10)
    rows, keys = slice(4, 8), slice(0, 8)
    full = jnp.arange(100.0).reshape(1, 1, 10, 10)
    assert causal_blocks.rows_and_keys(full, rows, keys, shape).shape == (1, 1, 4, 8)
    per_key = jnp.ones((1, 1, 1, 10))
    assert causal_blocks.rows_and_keys(per_key, rows, keys, shape).shape == (1, 1, 1, 8)
    assert causal_blocks.rows_and_keys(jnp.ones((10,)), rows, keys, shape).shape == (8,)
    np.testing.assert_array_equal(
        causal_blocks.rows_and_keys(full, rows, keys, shape), full[:, :, 4:8, :8]
    )
    assert causal_blocks.rows_and_keys(None, rows, keys, shape) is None


def test_at_t_2048_the_blocks_need_less_memory_than_the_dense_core():
    """Compiled, not run. The dense core holds `[H, T, T]` logits; the blocks' logits and weights
    together are at most 2 H BLOCK^2 n (n + 1) / 2 elements for n blocks (all of them alive at once,
    the most XLA's schedule can keep), about the dense logits' size at n = 4."""
    blocks, heads = 4, 2
    length = blocks * causal_blocks.BLOCK
    x = jax.ShapeDtypeStruct((1, length, heads, 16), jnp.float32)

    def temporaries(return_weights):
        def f(q, k, v):
            out = attnjax.dot_product_attention(
                q, k, v, is_causal=True, return_weights=return_weights
            )
            return out[0] if return_weights else out

        return jax.jit(f).lower(x, x, x).compile().memory_analysis().temp_size_in_bytes

    dense, blocked = temporaries(True), temporaries(False)
    assert dense >= heads * length * length * 4
    every_block = 2 * heads * causal_blocks.BLOCK**2 * blocks * (blocks + 1) // 2 * 4
    assert blocked <= every_block and blocked < dense
