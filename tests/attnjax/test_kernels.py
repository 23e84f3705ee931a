"""Pallas kernels as attention_fn (`attnjax.kernels`), in interpret mode on the CPU.

Forward and gradient (each kernel has a custom backward) against
`attnjax.dot_product_attention` in float32, at the smallest shapes each kernel
accepts (splash and TPU flash: blocks of 128, so T = 128; the GPU kernel:
T = 16). A test is skipped only where the installed jax lacks the kernel.
"""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attnjax
from attnjax import kernels, nn

MODULES = {
    "splash": "jax.experimental.pallas.ops.tpu.splash_attention",
    "tpu_flash": "jax.experimental.pallas.ops.tpu.flash_attention",
    "gpu": "jax.experimental.pallas.ops.gpu.attention",
}
FACTORIES = {
    "splash": kernels.splash_attention,
    "tpu_flash": kernels.tpu_flash_attention,
    "gpu": kernels.gpu_flash_attention,
}
SEQ = {"splash": 128, "tpu_flash": 128, "gpu": 16}


def _kernel(name):
    try:
        importlib.import_module(MODULES[name])
    except ImportError:
        pytest.skip(f"the installed jax {jax.__version__} has no {MODULES[name]}")
    return FACTORIES[name](interpret=True)


def _inputs(t, heads, kv_heads, dim=8):
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (1, t, heads, dim), jnp.float32)
    k, v, cotangent = (jax.random.normal(kk, (1, t, kv_heads, dim), jnp.float32) for kk in keys[1:])
    return q, k, v, jax.random.normal(keys[3], (1, t, heads, dim), jnp.float32)


def _value_and_grads(fn, q, k, v, cotangent, **options):
    def loss(q, k, v):
        out = fn(q, k, v, **options)
        return jnp.sum(out * cotangent), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return out, grads


CASES = [  # (kernel, is_causal, local_window_size, query heads, key heads); one head where a case needs no more
    ("splash", False, None, 1, 1),
    ("splash", True, None, 2, 1),  # GQA: the multi-query kernel per key head
    ("splash", False, (3, 5), 1, 1),  # a local window, through the kernel's LocalMask
    ("tpu_flash", False, None, 1, 1),
    ("tpu_flash", True, None, 2, 1),  # GQA by repeated key heads
    ("gpu", False, None, 2, 2),
    ("gpu", True, None, 4, 2),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, is_causal, window, heads, kv_heads", CASES)
def test_kernel_matches_dot_product_attention_forward_and_gradient(
    name, is_causal, window, heads, kv_heads
):
    fn = _kernel(name)
    q, k, v, cotangent = _inputs(SEQ[name], heads, kv_heads)
    options = dict(is_causal=is_causal, scale=0.3)
    if window is not None:
        options["local_window_size"] = window
    with jax.default_matmul_precision("highest"):
        out, grads = _value_and_grads(fn, q, k, v, cotangent, **options)
        ref_out, ref_grads = _value_and_grads(
            attnjax.dot_product_attention, q, k, v, cotangent, **options
        )
    np.testing.assert_allclose(out, ref_out, atol=1e-5, rtol=1e-5)
    for grad, ref_grad, arg in zip(grads, ref_grads, "qkv"):
        np.testing.assert_allclose(grad, ref_grad, atol=1e-5, rtol=1e-5, err_msg=f"d/d{arg}")


BAD_CALLS = [  # (kernel, options, message)
    (
        "gpu",
        dict(bias=jnp.zeros((1, 2, 16, 16), jnp.float32)),
        "gpu_flash_attention cannot take bias",
    ),
    ("gpu", dict(mask=jnp.ones((1, 2, 16, 16), bool)), "gpu_flash_attention cannot take mask"),
    ("gpu", dict(return_weights=True), "cannot take return_weights"),
    ("gpu", dict(local_window_size=4), "gpu_flash_attention has no local window"),
    ("tpu_flash", dict(local_window_size=(2, 0)), "tpu_flash_attention has no local window"),
    (
        "splash",
        dict(),
        r"splash_attention needs T and S multiples of 128 \(its block\), got query \(1, 16, 2, 8\)",
    ),
    (
        "splash",
        dict(query_seq_lengths=jnp.array([3])),
        "splash_attention cannot take query_seq_lengths",
    ),
]


@pytest.mark.parametrize("name, options, message", BAD_CALLS)
def test_what_a_kernel_cannot_do_raises(name, options, message):
    q, k, v, _ = _inputs(16, 2, 2)
    with pytest.raises(ValueError, match=message):
        _kernel(name)(q, k, v, **options)


def test_heads_must_divide_and_shapes_must_agree():
    fn = kernels.gpu_flash_attention(interpret=True)
    q, k, v, _ = _inputs(16, 3, 2)
    with pytest.raises(ValueError, match=r"key heads K=2 must divide query heads H=3"):
        fn(q, k, v)
    with pytest.raises(ValueError, match=r"key and value must have one shape"):
        fn(q[..., :2, :], k, v[..., :4])


def test_kernel_as_the_attention_fn_of_a_module():
    """The GPU kernel (interpret mode) in a causal MultiHeadAttention gives the default module's output."""
    _kernel("gpu")
    x = jax.random.normal(jax.random.key(1), (2, 16, 16), jnp.float32)
    outs = []
    for fn in (attnjax.dot_product_attention, kernels.gpu_flash_attention(interpret=True)):
        layer = nn.MultiHeadAttention(16, 2, attention_fn=fn, rngs=nnx.Rngs(0))
        with jax.default_matmul_precision("highest"):
            outs.append(layer(x, is_causal=True))
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-5, rtol=1e-5)


def test_keys_no_query_reaches_cannot_make_nan():
    """Causal with S > T: keys s >= T are masked for every query. NaN and inf there (padding garbage) leave the
    output and the gradients of the GPU kernel (interpret mode) as they are with finite keys, 0 for those keys."""
    fn = _kernel("gpu")
    q, k, v, cotangent = _inputs(16, 2, 2)
    q, cotangent = q[:, :8], cotangent[:, :8]
    garbage = (jnp.arange(16) >= 8)[None, :, None, None]
    k_bad, v_bad = jnp.where(garbage, jnp.inf, k), jnp.where(garbage, jnp.nan, v)
    with jax.default_matmul_precision("highest"):
        out, grads = _value_and_grads(fn, q, k_bad, v_bad, cotangent, is_causal=True)
        ref_out, ref_grads = _value_and_grads(
            attnjax.dot_product_attention, q, k, v, cotangent, is_causal=True
        )
    np.testing.assert_allclose(out, ref_out, atol=1e-5, rtol=1e-5)
    for grad, ref_grad, arg in zip(grads, ref_grads, "qkv"):
        np.testing.assert_allclose(grad, ref_grad, atol=1e-5, rtol=1e-5, err_msg=f"d/d{arg}")
    np.testing.assert_array_equal(grads[1][:, 8:], 0.0)
    np.testing.assert_array_equal(grads[2][:, 8:], 0.0)


@pytest.mark.parametrize(
    "options, error, message",
    [
        (dict(scale=float("nan")), ValueError, r"scale must be a finite number, got nan"),
        (dict(scale="0.1"), TypeError, r"scale must be a number"),
        (dict(is_causal="False"), TypeError, r"is_causal must be a bool, got 'False'"),
    ],
)
def test_bad_scalars_raise_naming_them(options, error, message):
    q, k, v, _ = _inputs(16, 2, 2)
    with pytest.raises(error, match=message):
        kernels.gpu_flash_attention(interpret=True)(q, k, v, **options)


def test_a_zero_head_dim_raises():
    q = jnp.zeros((1, 16, 2, 0), jnp.float32)
    with pytest.raises(ValueError, match=r"head dim D >= 1.*\(1, 16, 2, 0\)"):
        kernels.gpu_flash_attention(interpret=True)(q, q, q)
