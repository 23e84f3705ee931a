"""`nn.Transformer` against the float64 NumPy reference (tests/reference_transformer.py) at the quick
tier: two configurations that between them switch on every option the reference models (positions
learned and sinusoidal, pre- and post-norm, LayerNorm and RMSNorm, a residual scale, both RoPE layouts,
both QK-norms, grouped-query attention, temperature, causal mask, final norm, tied head, the MLP's
activation). One case per option, and more options apart, run in test_reference_transformer.py."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn
from tests import reference_transformer as ref
from tests.attnjax.nn.test_reference_transformer import IDS, TOL, randomize

CASES = {
    "learned-pre-layernorm-qk-layernorm-interleaved-gqa": dict(
        positions="learned",
        norm="pre",
        norm_kind="layernorm",
        rope="interleaved",
        normalize_qk="layernorm",
        num_kv_heads=2,
        temperature=0.7,
        residual_scale=0.5,
        causal=True,
    ),
    "sinusoidal-post-rmsnorm-qk-cosine-half-tied": dict(
        positions="sinusoidal",
        norm="post",
        norm_kind="rmsnorm",
        rope="half",
        normalize_qk="cosine",
        temperature=1.3,
        residual_scale=0.8,
        head="tied",
        mlp_activation="relu",
        causal=True,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_option_matches_the_float64_reference(name):
    config = nn.TransformerConfig.create(
        num_layers=2,
        features=16,
        num_heads=4,
        vocab_size=13,
        max_len=8,
        mlp_features=24,
        param_dtype=jnp.float64,
        **CASES[name],
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    params = randomize(model, 0)
    logits, inter = model(jnp.asarray(IDS), return_intermediates=True)
    want_logits, want_hidden = ref.transformer(params, model.config, IDS)
    np.testing.assert_allclose(np.asarray(inter["hidden"]), want_hidden, **TOL)
    np.testing.assert_allclose(np.asarray(logits), want_logits, **TOL)
