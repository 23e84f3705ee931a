"""`Transformer(..., return_intermediates="statistics")`: per-layer statistics equal those computed densely
(NumPy, float64) from the `return_intermediates=True` weights; compiled memory at T = 4096 below one
dense [H, T, T] array. The loaded BERT and llama models are checked in tests/attnjax/pretrained/test_bert.py and
tests/attnjax/pretrained/test_llama.py, with the model those files load once."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import masks, nn
from attnjax.analysis import AttentionStatistics
from tests.attnjax.nn.test_reference_transformer import randomize

SINKS = (0, 3)
CASES = {  # bidirectional; causal with GQA and RoPE; causal with a sliding window; all with a padding mask
    "bidirectional": dict(positions="learned", causal=False, norm="post", temperature=0.8),
    "causal-gqa-rope": dict(
        positions=None,
        causal=True,
        num_kv_heads=2,
        rope="half",
        norm="pre",
        norm_kind="rmsnorm",
        temperature=1.3,
    ),
    "causal-window": dict(
        positions=None, causal=True, rope="half", norm="pre", window=4
    ),  # Mistral's band
}
TOL = {jnp.float32: 1e-5, jnp.float64: 1e-12}


def dense_statistics(weights, visible, sinks):
    """The statistics from their definitions, float64: weights `[..., T, S]`, visible bool `[..., T, S]`."""
    w = np.asarray(weights, np.float64)
    t, s = w.shape[-2:]
    logs = np.log(np.where(w > 0, w, 1.0))
    entropy = -np.sum(w * logs, -1)
    count = visible.sum(-1)
    distance = np.abs(np.arange(t)[:, None] - np.arange(s)[None, :])
    return {
        "entropy": entropy,
        "normalized_entropy": np.where(count > 1, entropy / np.log(np.maximum(count, 2)), 0.0),
        "max_weight": w.max(-1),
        "argmax": np.where(visible.any(-1), np.argmax(w, -1), -1),
        "sink_mass": w[..., list(sinks)].sum(-1),
        "mean_distance": np.sum(w * distance, -1),
    }


def check_fields(stats, want):
    """float32 models: 1e-5 absolute; mean_distance (in positions, up to T) to 1e-5 relative."""
    for field in ("entropy", "max_weight", "sink_mass", "mean_distance"):
        tol = dict(rtol=1e-5, atol=1e-6) if field == "mean_distance" else dict(rtol=0, atol=1e-5)
        np.testing.assert_allclose(
            np.asarray(getattr(stats, field)), want[field], err_msg=field, **tol
        )


def _model(name, dtype, seed=0):
    config = nn.TransformerConfig.create(
        num_layers=3,
        features=16,
        num_heads=4,
        vocab_size=13,
        max_len=16,
        mlp_features=24,
        param_dtype=dtype,
        **CASES[name],
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(seed))
    if dtype == jnp.float64:
        randomize(model, seed)
    return model


IDS = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4]], np.int32)
VALID = np.arange(11)[None, :] < np.array([[11], [7]])  # the second sequence: 4 padding keys


# The quick tier's case (RoPE, grouped-query attention, causal mask, temperature); the others are slow.
QUICK = ("causal-gqa-rope", jnp.float64)


@pytest.mark.parametrize(
    "name, dtype",
    [
        pytest.param(name, dtype, marks=() if (name, dtype) == QUICK else pytest.mark.slow)
        for name in sorted(CASES)
        for dtype in (jnp.float32, jnp.float64)
    ],
)
def test_statistics_equal_the_dense_computation(name, dtype):
    model = _model(name, dtype)
    mask = masks.key_padding_mask(valid=jnp.asarray(VALID))
    tokens = jnp.asarray(IDS)
    logits, dense = model(tokens, mask=mask, return_intermediates=True)
    logits_s, inter = model(
        tokens, mask=mask, return_intermediates="statistics", sink_positions=SINKS
    )
    stats = inter["statistics"]
    assert isinstance(stats, AttentionStatistics) and set(inter) == {"hidden", "statistics"}
    assert stats.entropy.shape == (3, 2, 4, 11) and stats.window_mass is None
    tol = TOL[dtype]
    # the layers' outputs come from the chunked pass with the statistics' lse: same logits, same hidden states
    np.testing.assert_allclose(np.asarray(logits_s), np.asarray(logits), atol=tol * 10, rtol=tol)
    np.testing.assert_allclose(
        np.asarray(inter["hidden"]), np.asarray(dense["hidden"]), atol=tol * 10, rtol=tol
    )
    i, j = np.arange(11)[:, None], np.arange(11)[None, :]
    visible = np.broadcast_to(VALID[:, None, None, :], (2, 4, 11, 11))
    if model.config.causal:
        visible = visible & (j <= i)
    if model.config.block.attention.window is not None:
        visible = visible & (i - j < model.config.block.attention.window)
    want = dense_statistics(np.asarray(dense["attention"]), visible, SINKS)
    for field, value in want.items():
        got = np.asarray(getattr(stats, field))
        if field == "argmax":
            np.testing.assert_array_equal(got, value, err_msg=field)
        else:
            np.testing.assert_allclose(got, value, atol=tol, rtol=0, err_msg=field)
    # lse is checked through the outputs: o_i = sum_j exp(x_ij - lse_i) v_j gave the same hidden states


def test_statistics_follow_the_temperature_and_differ_from_uniform():
    """A control: the compared quantities are not constant (entropy below log(count) somewhere)."""
    model = _model("causal-gqa-rope", jnp.float64)
    _, inter = model(jnp.asarray(IDS), return_intermediates="statistics")
    count = np.arange(1, 12)[None, None, None, :]
    assert np.min(np.asarray(inter["statistics"].entropy)[..., 1:] - np.log(count)[..., 1:]) < -1e-3


def test_bad_options_raise():
    model = _model("causal-gqa-rope", jnp.float32)
    with pytest.raises(ValueError, match="return_intermediates"):
        model(jnp.asarray(IDS), return_intermediates="weights")
    with pytest.raises(ValueError, match="sink_positions"):
        model(jnp.asarray(IDS), sink_positions=(0,))
    with pytest.raises(ValueError, match="sink_positions"):
        model(jnp.asarray(IDS), return_intermediates="statistics", sink_positions=(11,))
    with pytest.raises(ValueError, match="do not combine"):
        model(
            jnp.asarray(IDS), return_intermediates="statistics", edits=(nn.edits.ablate_head(0, 0),)
        )
    model.init_cache(2, 16)
    with pytest.raises(ValueError, match="full .not decoding. forward"):
        model(jnp.asarray(IDS), return_intermediates="statistics", decode=True)


@pytest.mark.slow
def test_compiled_memory_at_4096_is_below_one_dense_attention_matrix():
    t = 4096
    config = nn.TransformerConfig.create(
        num_layers=2,
        features=32,
        num_heads=4,
        vocab_size=50,
        positions=None,
        rope="half",
        causal=True,
        max_len=t,
        mlp_features=64,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)

    def statistics(state, tokens):
        _, inter = nnx.merge(graphdef, state)(
            tokens, return_intermediates="statistics", sink_positions=(0,)
        )
        return inter["statistics"]

    tokens = jax.ShapeDtypeStruct((1, t), jnp.int32)
    temp = jax.jit(statistics).lower(state, tokens).compile().memory_analysis().temp_size_in_bytes
    dense = 4 * t * t * 4  # one [H, T, T] float32 array
    print(f"statistics forward temp {temp} bytes, one dense [H, T, T] float32 {dense} bytes")
    assert temp < dense, (temp, dense)

    def weights(state, tokens):  # the control: the dense path's temporaries exceed it
        return nnx.merge(graphdef, state)(tokens, return_intermediates=True)[1]["attention"]

    dense_temp = (
        jax.jit(weights).lower(state, tokens).compile().memory_analysis().temp_size_in_bytes
    )
    print(f"dense-weights forward temp {dense_temp} bytes")
    assert dense_temp > dense, (dense_temp, dense)
