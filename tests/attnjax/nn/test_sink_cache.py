"""Streaming generation with attention sinks (`attnjax.nn.sink_cache`, Xiao et al. 2023): slots and
cache positions by hand, equality with plain cached generation while everything fits, the attention of a
small cache against the float64 NumPy reference on the tokens it keeps, and decoding past the cache."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn
from attnjax.nn import edits, sink_cache
from tests import reference_transformer as ref
from tests.attnjax.nn.test_reference_transformer import randomize


def _model(num_layers=2, dtype=jnp.float32, seed=0, **options):
    options = {"positions": None, **options}
    config = nn.TransformerConfig.create(
        num_layers=num_layers,
        features=32,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=40,
        rope="half",
        causal=True,
        max_len=64,
        mlp_features=48,
        param_dtype=dtype,
        **options,
    )
    return nn.Transformer(config, rngs=nnx.Rngs(seed))


@pytest.mark.parametrize(
    "index, chunk, slots, q_pos, k_pos",
    [
        (0, 4, [0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]),  # a prefill chunk: the plain cache
        (5, 1, [5], [5], [0, 1, 2, 3, 4, 5]),  # the last free slot
        (
            6,
            1,
            [2],
            [5],
            [0, 1, 5, 2, 3, 4],
        ),  # token 6 evicts token 2; window 3, 4, 5, 6 at 2, 3, 4, 5
        (7, 1, [3], [5], [0, 1, 4, 5, 2, 3]),  # window 4, 5, 6, 7 in slots 4, 5, 2, 3
        (13, 1, [5], [5], [0, 1, 2, 3, 4, 5]),  # window 10..13 in slots 2..5 again
    ],
)
def test_slots_and_cache_positions_by_hand(index, chunk, slots, q_pos, k_pos):
    got = sink_cache.cache_positions(
        jnp.asarray(index, jnp.int32), chunk, 2, 4
    )  # n_sink = 2, W = 4
    np.testing.assert_array_equal(np.asarray(got[0]), slots)
    np.testing.assert_array_equal(np.asarray(got[1]), q_pos)
    filled = min(index + chunk, 6)
    np.testing.assert_array_equal(np.asarray(got[2])[:filled], k_pos[:filled])
    want_visible = np.arange(6)[None, :] <= (index + np.arange(chunk))[:, None]
    np.testing.assert_array_equal(np.asarray(got[3]), want_visible)


def test_within_the_cache_it_equals_plain_cached_generation():
    """Sampled, not greedy: the tokens vary more, and the two differ only in how a token is drawn from the
    same logits (greedy generation is checked in tests/attnjax/nn/test_decoding.py)."""
    model = _model(dtype=jnp.float64)
    randomize(model, 0)
    prompt = jax.random.randint(jax.random.key(1), (2, 8), 0, 40)
    sample = dict(
        temperature=3.0, key=jax.random.key(3)
    )  # flat enough that the sampled tokens vary
    plain = model.generate(prompt, 40, **sample)
    streamed = model.generate(prompt, 40, sink_cache=(4, 256), **sample)
    np.testing.assert_array_equal(np.asarray(streamed), np.asarray(plain))
    assert (
        len(np.unique(np.asarray(plain)[:, 8:])) > 5
    )  # sampled tokens vary: the comparison is not trivial


def test_edits_apply_through_the_sink_cache():
    """With the cache holding everything, edited streaming equals edited plain generation; evicting, removing
    the sink slot changes the tokens (the cache's slot 0 is the first token)."""
    model = _model(dtype=jnp.float64)
    randomize(model, 1)
    prompt = jax.random.randint(jax.random.key(5), (2, 6), 0, 40)
    remove_sink = (edits.remove_keys(None, (0,)),)
    sample = dict(temperature=1.0, key=jax.random.key(6))
    plain = model.generate(prompt, 20, edits=remove_sink, **sample)
    np.testing.assert_array_equal(
        np.asarray(model.generate(prompt, 20, sink_cache=(4, 256), edits=remove_sink, **sample)),
        np.asarray(plain),
    )
    small = model.generate(prompt, 20, sink_cache=(2, 4), **sample)
    assert not np.array_equal(
        np.asarray(model.generate(prompt, 20, sink_cache=(2, 4), edits=remove_sink, **sample)),
        np.asarray(small),
    )


def _stream(model, tokens, n_sink, window, prefill):
    """Logits `[B, N, V]` of decoding `tokens` `[B, N]` with the sink cache: a prefill chunk, then one at a time."""
    model.init_cache(tokens.shape[0], n_sink + window)
    graphdef, state = nnx.split(model)
    first = model(tokens[:, :prefill], decode=True, sink_cache=(n_sink, window))
    graphdef, state = nnx.split(model)

    @jax.jit
    def run(state, rest):
        def step(state, token):
            m = nnx.merge(graphdef, state)
            logits = m(token[:, None], decode=True, sink_cache=(n_sink, window))
            return nnx.state(m), logits[:, 0]

        state, logits = jax.lax.scan(step, state, rest.T)
        return state, jnp.swapaxes(logits, 0, 1)

    state, rest = run(state, tokens[:, prefill:])
    nnx.update(model, state)
    return jnp.concatenate([first, rest], axis=1)


@pytest.mark.parametrize("layer_window", [None, 5])
def test_small_cache_attention_equals_the_reference_on_the_kept_tokens(layer_window):
    """One layer: its keys and values depend on each token alone, so the logits at position p are those of the
    float64 NumPy reference on the tokens the cache keeps, [x_0, x_1, x_{p-3}, ..., x_p], at positions 0..5;
    a layer with a window of its own (as Gemma 3's local layers, and a rotary base of its own) applies it
    over those positions."""
    n_sink, window = 2, 4
    # A layer window of 5 over the cache's positions 0..5: the newest query sees sink 1, not sink 0.
    options = {} if layer_window is None else dict(layer_windows=(5,), layer_rope_bases=(100.0,))
    model = _model(num_layers=1, dtype=jnp.float64, **options)
    params = randomize(model, 0)
    tokens = np.asarray(jax.random.randint(jax.random.key(2), (2, 14), 0, 40))
    got = np.asarray(_stream(model, jnp.asarray(tokens), n_sink, window, prefill=3))
    for p in range(14):
        kept = (
            list(range(p + 1))
            if p < n_sink + window
            else [0, 1] + list(range(p - window + 1, p + 1))
        )
        want, _ = ref.transformer(params, model.config, tokens[:, kept])
        np.testing.assert_allclose(
            got[:, p], want[:, -1], rtol=1e-10, atol=1e-10, err_msg=f"position {p}"
        )
    full, _ = ref.transformer(
        params, model.config, tokens
    )  # control: the full context differs from the cache's
    assert np.max(np.abs(got[:, -1] - full[:, -1])) > 1e-3


def test_generation_runs_past_the_cache_and_max_len_and_stays_finite():
    model = _model()
    tokens = jax.random.randint(jax.random.key(4), (1, 340), 0, 40)
    logits = _stream(model, tokens, 4, 256, prefill=8)  # 340 positions > 260 slots > max_len = 64
    assert logits.shape == (1, 340, 40) and bool(jnp.all(jnp.isfinite(logits)))
    assert int(model.blocks.attention.cache_index[...][0]) == 340
    out = model.generate(
        tokens[:, :300], 40, sink_cache=(4, 256)
    )  # a prompt longer than the cache, too
    assert out.shape == (1, 340) and bool(jnp.all((out >= 0) & (out < 40)))
    np.testing.assert_array_equal(np.asarray(out[:, :300]), np.asarray(tokens[:, :300]))
    model.init_cache(
        1, 260
    )  # control: the plain cache refuses to run past its length (checked before compute)
    with pytest.raises(
        ValueError, match=r"chunk of 261 positions .* does not fit in the cache of max_len=260"
    ):
        model(tokens[:, :261], decode=True)


def test_bad_sink_cache_arguments_raise():
    model = _model()
    tokens = jnp.zeros((1, 8), jnp.int32)
    with pytest.raises(ValueError, match="n_sink"):
        model.generate(tokens, 4, sink_cache=(4,))
    with pytest.raises(ValueError, match="init_cache"):
        model.init_cache(1, 100)
        model(tokens, decode=True, sink_cache=(4, 8))
    model.init_cache(1, 12)
    with pytest.raises(ValueError, match="without eviction"):
        model(jnp.zeros((1, 13), jnp.int32), decode=True, sink_cache=(4, 8))
    with pytest.raises(ValueError, match="decode=True"):
        model(tokens, sink_cache=(4, 8))
    learned = _model(positions="learned")
    with pytest.raises(ValueError, match="absolute positions"):
        learned.generate(tokens, 4, sink_cache=(4, 8))
