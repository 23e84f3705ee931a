"""Rotary position embeddings: the relative-position identity, the two layouts,
and RoPE inside MultiHeadAttention under the KV cache."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn, rope


def _heads(seed, shape, dtype=jnp.float64):
    return jax.random.normal(jax.random.key(seed), shape, dtype)


def _numpy_rope(x, positions, base, layout):
    """From the definition: pair i rotated by positions * base^(-2i/D)."""
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    out = np.empty_like(x)
    for i in range(d // 2):
        a_idx, b_idx = (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)
        angle = np.asarray(positions, np.float64)[:, None] * base ** (-2 * i / d)
        a, b = x[..., a_idx], x[..., b_idx]
        out[..., a_idx] = a * np.cos(angle) - b * np.sin(angle)
        out[..., b_idx] = a * np.sin(angle) + b * np.cos(angle)
    return out


@pytest.mark.parametrize("layout", rope.LAYOUTS)
def test_matches_the_definition_and_keeps_norms(layout):
    x = _heads(0, (2, 7, 3, 8))
    positions = jnp.arange(7) * 3 + 5
    got = rope.rotary_embedding(x, positions, base=100.0, layout=layout)
    np.testing.assert_allclose(got, _numpy_rope(x, positions, 100.0, layout), atol=1e-12)
    np.testing.assert_allclose(
        jnp.linalg.norm(got, axis=-1), jnp.linalg.norm(x, axis=-1), atol=1e-12
    )


@pytest.mark.parametrize("layout", rope.LAYOUTS)
def test_dot_products_depend_only_on_the_offset(layout):
    """q_t . k_s after rotation is a function of t - s: shifting both positions changes nothing."""
    q, k = _heads(1, (1, 1, 16)), _heads(2, (1, 1, 16))

    def dot(t, s):
        return float(
            jnp.sum(
                rope.rotary_embedding(q, jnp.array([t]), layout=layout)
                * rope.rotary_embedding(k, jnp.array([s]), layout=layout)
            )
        )

    assert dot(3, 1) == pytest.approx(dot(103, 101), abs=1e-9)
    assert dot(3, 1) != pytest.approx(dot(3, 2), abs=1e-3)  # and it does depend on the offset


def test_scaled_frequencies_follow_hugging_faces_definitions():
    """Linear scaling divides every rate by the factor; Llama 3.1's (Hugging Face's
    `_compute_llama3_parameters`, in NumPy) divides the long wavelengths, keeps the short ones and
    interpolates the band between, at Llama 3.1's own parameters, where all three bands are populated."""
    dim, base = 64, 500000.0
    inv_freq = base ** (-np.arange(0, dim, 2) / dim)
    got = np.asarray(rope.inverse_frequencies(dim, base, ("linear", 4.0), jnp.float64))
    np.testing.assert_allclose(got, inv_freq / 4.0, rtol=1e-12)
    factor, low, high, original = 8.0, 1.0, 4.0, 8192
    wavelength = 2 * np.pi / inv_freq
    long, short = wavelength > original / low, wavelength < original / high
    assert long.any() and short.any() and (~long & ~short).any()
    smooth = (original / wavelength - low) / (high - low)
    want = np.where(long, inv_freq / factor, inv_freq)
    want = np.where(~long & ~short, (1 - smooth) * want / factor + smooth * want, want)
    scaling = ("llama3", factor, low, high, original)
    got = np.asarray(rope.inverse_frequencies(dim, base, scaling, jnp.float64))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_layouts_differ_by_a_permutation_of_coordinates():
    """Interleaved on x equals half-split on x with its coordinates permuted (the GGUF converter's permutation)."""
    x = _heads(3, (5, 2, 8))
    perm = np.concatenate([np.arange(0, 8, 2), np.arange(1, 8, 2)])  # interleaved -> half order
    positions = jnp.arange(5)
    inter = rope.rotary_embedding(x, positions, layout="interleaved")
    half = rope.rotary_embedding(x[..., perm], positions, layout="half")
    np.testing.assert_allclose(inter[..., perm], half, atol=1e-12)
    assert not np.allclose(inter, rope.rotary_embedding(x, positions, layout="half"))


def test_low_precision_inputs_keep_their_dtype():
    x = _heads(4, (4, 2, 8), jnp.bfloat16)
    assert rope.rotary_embedding(x, jnp.arange(4)).dtype == jnp.bfloat16


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"layout": "neox"}, "rope must be one of"),
        ({"base": 0.0}, "rope_base must be a positive number"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rope.rotary_embedding(_heads(5, (4, 2, 8)), jnp.arange(4), **kwargs)


def test_bad_shapes():
    with pytest.raises(ValueError, match="even head dim"):
        rope.rotary_embedding(_heads(6, (4, 2, 7)), jnp.arange(4))
    with pytest.raises(ValueError, match=r"positions must have shape \[T\] = \(4,\)"):
        rope.rotary_embedding(_heads(6, (4, 2, 8)), jnp.arange(5))
    with pytest.raises(ValueError, match="rope needs an even head dim"):
        nn.MultiHeadAttention(6, 2, rope="half", rngs=nnx.Rngs(0))


@pytest.mark.parametrize("layout", rope.LAYOUTS)
@pytest.mark.slow
def test_rope_in_attention_decodes_exactly(layout):
    """Cached decoding with RoPE (positions from the cache index) equals the full forward (1e-10)."""
    mha = nn.MultiHeadAttention(
        16,
        4,
        num_kv_heads=2,
        rope=layout,
        rope_base=500.0,
        param_dtype=jnp.float64,
        rngs=nnx.Rngs(0),
    )
    x = _heads(7, (2, 6, 16))
    full = nnx.jit(lambda m, x: m(x, is_causal=True))(mha, x)
    mha.init_cache(2, 9)
    decode = nnx.jit(
        lambda m, x: m(x, decode=True)
    )  # one program per chunk length (eager ops compile one by one)
    parts = [decode(mha, x[:, :3])] + [decode(mha, x[:, t : t + 1]) for t in range(3, 6)]
    np.testing.assert_allclose(jnp.concatenate(parts, axis=1), full, atol=1e-10)
    # Rotation is on: without it the output differs.
    plain = nn.MultiHeadAttention(16, 4, num_kv_heads=2, param_dtype=jnp.float64, rngs=nnx.Rngs(0))
    assert not np.allclose(plain(x, is_causal=True), full)
