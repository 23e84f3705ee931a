"""`nn.MultiHeadAttention` and `nn.Transformer` against the float64 NumPy reference written from the
equations (tests/reference_transformer.py), every parameter random (biases and norm scales included),
and `depth_profile`'s fields against NumPy."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn
from attnjax.analysis.depth import depth_profile
from tests import reference_transformer as ref

TOL = dict(rtol=1e-10, atol=1e-10)
CASES = {
    "learned-pre-layernorm-gqa-causal": dict(
        positions="learned",
        norm="pre",
        norm_kind="layernorm",
        num_kv_heads=2,
        temperature=0.7,
        causal=True,
    ),
    "sinusoidal-post-rmsnorm-rope-tied": dict(
        positions="sinusoidal",
        norm="post",
        norm_kind="rmsnorm",
        rope="half",
        temperature=1.3,
        head="tied",
        mlp_activation="relu",
    ),
    "rope-interleaved-no-positions-scaled": dict(
        positions=None,
        norm="pre",
        norm_kind="rmsnorm",
        rope="interleaved",
        num_kv_heads=1,
        temperature=2.0,
        residual_scale=0.5,
        causal=True,
    ),
    "attention-only-no-norm": dict(
        positions="learned", norm=None, mlp=False, final_norm=False, temperature=0.5
    ),
    "qk-layernorm-rope-gqa": dict(
        positions=None, norm="pre", rope="half", num_kv_heads=2, normalize_qk="layernorm"
    ),
    "qk-cosine-causal": dict(
        positions="learned", norm="pre", normalize_qk="cosine", temperature=0.8, causal=True
    ),
}


def randomize(model, seed):
    """Every parameter drawn afresh in float64: N(0, 0.5^2), norm scales 1 + N(0, 0.2^2)."""
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    rng = np.random.default_rng(seed)  # host draws: eager jax.random compiles one program per shape
    for path, variable in flat:
        noise = rng.standard_normal(variable.shape)
        variable[...] = 1.0 + 0.2 * noise if path[-1] == "scale" else 0.5 * noise
    return {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _model(options, seed=0):
    options = dict(options)
    config = nn.TransformerConfig.create(
        num_layers=2,
        features=16,
        num_heads=4,
        vocab_size=13,
        max_len=8,
        mlp_features=24,
        param_dtype=jnp.float64,
        **options,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(seed))
    return model, randomize(model, seed)


IDS = np.array([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]], np.int32)


@pytest.mark.parametrize("name", sorted(CASES))
def test_transformer_matches_float64_reference(name):
    model, params = _model(CASES[name])
    logits, inter = model(jnp.asarray(IDS), return_intermediates=True)
    want_logits, want_hidden = ref.transformer(params, model.config, IDS)
    assert logits.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(inter["hidden"]), want_hidden, **TOL)
    np.testing.assert_allclose(np.asarray(logits), want_logits, **TOL)


@pytest.mark.parametrize(
    "rope, normalize_qk", [(None, None), ("half", None), ("half", "layernorm"), (None, "cosine")]
)
def test_multi_head_attention_matches_float64_reference(rope, normalize_qk):
    mha = nn.MultiHeadAttention(
        12,
        6,
        num_kv_heads=3,
        temperature=0.6,
        rope=rope,
        normalize_qk=normalize_qk,
        param_dtype=jnp.float64,
        rngs=nnx.Rngs(1),
    )
    flat = randomize(mha, 1)
    params = ref.param_tree(flat)
    x = np.random.default_rng(0).normal(size=(2, 5, 12))
    mask = np.random.default_rng(1).random((5, 5)) < 0.7
    mask[:, 0] = True
    out = mha(jnp.asarray(x), mask=jnp.asarray(mask))
    want = ref.multi_head_attention(
        params,
        x,
        num_heads=6,
        num_kv_heads=3,
        temperature=0.6,
        rope=rope,
        normalize_qk=normalize_qk,
        mask=mask,
    )
    np.testing.assert_allclose(np.asarray(out), want, **TOL)


# ---------------------------------------------------------------- depth_profile through the profile


def _np_profile(hidden, attention, causal):
    """The profile's fields from their definitions, float64: hidden [L+1, B, T, D], attention [L, B, H, T, T]."""
    t = hidden.shape[-2]
    u = hidden / np.linalg.norm(hidden, axis=-1, keepdims=True)
    gram = np.einsum("...id,...jd->...ij", u, u)
    cosine = (gram.sum((-2, -1)) - t) / (t * (t - 1))
    s = np.linalg.svd(hidden, compute_uv=False)
    stable = (s**2).sum(-1) / s[..., 0] ** 2
    prob = s / s.sum(-1, keepdims=True)
    effective = np.exp(
        -np.sum(np.where(prob > 0, prob * np.log(np.where(prob > 0, prob, 1)), 0), -1)
    )

    def l1inf(m):
        return np.sqrt(np.abs(m).sum(-2).max(-1) * np.abs(m).sum(-1).max(-1))

    residual = l1inf(hidden - hidden.mean(-2, keepdims=True)) / l1inf(hidden)
    visible = np.tril(np.ones((t, t), bool)) if causal else np.ones((t, t), bool)
    logs = np.log(np.where(visible, attention, 1.0))
    count = visible.sum(-1)
    mean = np.where(visible, logs, 0).sum(-1) / count
    var = np.where(visible, (logs - mean[..., None]) ** 2, 0).sum(-1) / count
    rows = count > 1
    entropy = -np.where(visible, attention * logs, 0).sum(-1) / np.log(
        np.maximum(count, 2)
    )  # one-key rows: left out
    return {
        "token_cosine": cosine.mean(1),
        "stable_rank": stable.mean(1),
        "effective_rank": effective.mean(1),
        "residual_l1inf": residual.mean(1),
        "logit_variance": (var[..., rows].mean(-1)).mean((1, 2)),
        "attention_entropy_normalized": entropy[..., rows].mean(-1).mean((1, 2)),
    }


@pytest.mark.parametrize("causal", [False, True])
def test_depth_profile_fields_match_numpy(causal):
    options = dict(CASES["learned-pre-layernorm-gqa-causal"], causal=causal)
    model, _ = _model(options)
    _, inter = model(jnp.asarray(IDS), return_intermediates=True)
    profile = depth_profile(inter["hidden"], inter["attention"], causal=causal)
    want = _np_profile(np.asarray(inter["hidden"]), np.asarray(inter["attention"]), causal)
    for name, value in want.items():
        np.testing.assert_allclose(
            np.asarray(profile[name]), value, rtol=1e-9, atol=1e-12, err_msg=name
        )
