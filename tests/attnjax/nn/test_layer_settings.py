"""Per-layer windows and rotary bases (`TransformerConfig.layer_windows`, `layer_rope_bases`).

Each layer of the scanned stack reads its own window and base (`LayerSetting`s
`[L]`): a model with per-layer settings equals, layer by layer, models whose
every layer has that layer's static `window` / `rope_base` (the same weights);
the statistics pass and the cached decode see the same windows as the full
forward (the sink cache applies them over cache positions:
tests/attnjax/nn/test_sink_cache.py); a model built by `nnx.eval_shape` gets its
settings back from `checkpoint.build`. (Against Hugging Face's Gemma 3:
tests/attnjax/pretrained/test_hf.py.)
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import nn
from attnjax.nn.attention import LayerSetting
from attnjax.pretrained import checkpoint

WINDOWS, BASES = (3, None, 2), (100.0, 1e4, 10.0)
T = 11


def _config(**options):
    base = dict(
        num_layers=3,
        features=16,
        num_heads=2,
        num_kv_heads=1,
        head_dim=12,
        vocab_size=40,
        positions=None,
        rope="half",
        causal=True,
        norm="sandwich",
        norm_kind="rmsnorm",
        normalize_qk="rmsnorm",
        mlp_activation="geglu",
        use_bias=False,
        embedding_scale=4.0,
    )
    return nn.TransformerConfig.create(**{**base, **options})


def _tokens():
    return jax.random.randint(jax.random.key(1), (2, T), 0, 40)


def _one_layer(model, layer, **static):
    """A one-layer model holding `model`'s layer `layer` (its parameters), with `static` options."""
    single = nn.Transformer(_config(num_layers=1, **static), rngs=nnx.Rngs(0))
    params = nnx.state(model.blocks, nnx.Param)
    nnx.update(single.blocks, jax.tree.map(lambda a: a[layer : layer + 1], params))
    return single


def _run_blocks(model, h):
    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=(nnx.Carry, 0))
    def run(block, x):
        return block(x, is_causal=True)[0], None

    return run(model.blocks, h)[0]


def _model():
    return nn.Transformer(_config(layer_windows=WINDOWS, layer_rope_bases=BASES), rngs=nnx.Rngs(0))


def test_each_layer_uses_its_own_window_and_base():
    """Layer l of the per-layer model equals its weights in a layer with the static window
    WINDOWS[l] and base BASES[l]; its weights are 0 outside the band and > 0 inside."""
    model = _model()
    _, inter = model(_tokens(), return_intermediates=True)
    t, s = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    for layer, (window, base) in enumerate(zip(WINDOWS, BASES)):
        single = _one_layer(model, layer, window=window, rope_base=base)
        theirs = _run_blocks(single, inter["hidden"][layer])
        np.testing.assert_allclose(
            inter["hidden"][layer + 1], theirs, rtol=1e-5, atol=1e-5, err_msg=f"layer {layer}"
        )
        weights = np.asarray(inter["attention"][layer])
        band = (s <= t) & (t - s < (window or T))
        assert np.all(weights[..., ~band] == 0) and np.all(weights[..., band] > 0)
    # The check sees a wrong setting: layer 0 with layer 1's base differs.
    wrong = _run_blocks(
        _one_layer(model, 0, window=WINDOWS[0], rope_base=BASES[1]), inter["hidden"][0]
    )
    assert np.max(np.abs(wrong - inter["hidden"][1])) > 1e-3


def test_statistics_pass_and_cached_decoding_see_the_same_windows():
    model = _model()
    tokens = _tokens()
    logits = model(tokens)
    streamed, inter = model(tokens, return_intermediates="statistics")
    np.testing.assert_allclose(streamed, logits, rtol=1e-5, atol=1e-5)
    _, dense = model(tokens, return_intermediates=True)
    entropy = -jnp.sum(
        jnp.where(dense["attention"] > 0, dense["attention"] * jnp.log(dense["attention"]), 0), -1
    )
    np.testing.assert_allclose(inter["statistics"].entropy, entropy, rtol=1e-4, atol=1e-5)
    model.init_cache(2, T)
    steps = [model(tokens[:, :4], decode=True)] + [
        model(tokens[:, i : i + 1], decode=True) for i in range(4, T)
    ]
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), logits, rtol=1e-4, atol=1e-5)


def test_settings_are_per_layer_state_and_survive_a_shape_only_build():
    model = _model()
    settings = nnx.state(model, LayerSetting)
    windows = settings["blocks"]["attention"]["layer_window"][...]
    np.testing.assert_array_equal(windows, [3, 0, 2])
    np.testing.assert_array_equal(settings["blocks"]["attention"]["layer_rope_base"][...], BASES)
    param_paths = {path for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    assert ("blocks", "attention", "layer_window") not in param_paths  # not trained
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    built = checkpoint.build(model.config, params, jnp.float32)
    np.testing.assert_array_equal(built(_tokens()), model(_tokens()))
