import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import analysis, nn
from attnjax.analysis.depth import ATTENTION_METRICS, HIDDEN_METRICS, depth_profile


def _forward(skip, depth=6):
    config = nn.TransformerConfig.create(
        num_layers=depth,
        features=32,
        num_heads=2,
        input_features=32,
        positions=None,
        skip=skip,
        mlp=False,
        norm=None,
        final_norm=False,
        residual_scale="inv_sqrt_depth" if skip else 1.0,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (3, 12, 32), jnp.float32)
    return model(x, return_intermediates=True)[1]


@pytest.mark.slow
def test_profile_shapes_and_agreement_with_the_single_metrics():
    inter = _forward(skip=False)
    profile = depth_profile(inter["hidden"], inter["attention"])
    for name in HIDDEN_METRICS:
        assert profile[name].shape == (7,)
    for name in ATTENTION_METRICS:
        assert profile[name].shape == (6,)
    np.testing.assert_allclose(
        profile["residual_fro"][2], analysis.residual_ratio(inter["hidden"][2]).mean(), rtol=1e-5
    )
    np.testing.assert_allclose(
        profile["slem"][0], analysis.slem(inter["attention"][0]).mean(), rtol=1e-5
    )
    # The path product of layer 1 is the head-averaged first attention matrix.
    a1 = inter["attention"][0].mean(axis=1)
    np.testing.assert_allclose(
        profile["path_rank_one_residual"][0], analysis.rank_one_residual(a1).best.mean(), rtol=1e-5
    )


@pytest.mark.slow
def test_pure_attention_collapses_and_scaled_skips_do_not():
    pure = depth_profile(**_forward(skip=False))
    scaled = depth_profile(**_forward(skip=True))
    assert pure["residual_fro"][4] < 1e-3 * pure["residual_fro"][0]
    assert pure["path_rank_one_residual"][-1] < pure["path_rank_one_residual"][0]
    assert scaled["residual_fro"][-1] > 0.9 * scaled["residual_fro"][0]
    # Dobrushin coefficients of row-stochastic matrices lie in [0, 1].
    assert np.all((pure["dobrushin"] >= 0) & (pure["dobrushin"] <= 1))
