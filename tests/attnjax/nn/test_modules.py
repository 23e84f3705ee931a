import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attnjax
from attnjax import nn
from tests import host_random


def _copy_into_flax(ours: nn.MultiHeadAttention, theirs: nnx.MultiHeadAttention) -> None:
    """Copy our [F, H*Dh] kernels into flax's [F, H, Dh] / [H, Dh, F] layout."""
    for name in ("query", "key", "value"):
        src, dst = getattr(ours, name), getattr(theirs, name)
        dst.kernel[...] = src.kernel[...].reshape(dst.kernel.shape)
        dst.bias[...] = src.bias[...].reshape(dst.bias.shape)
    theirs.out.kernel[...] = ours.out.kernel[...].reshape(theirs.out.kernel.shape)
    theirs.out.bias[...] = ours.out.bias[...]
    if ours.config.normalize_qk == "layernorm":
        theirs.query_ln.scale[...] = ours.query_ln.scale[...]
        theirs.key_ln.scale[...] = ours.key_ln.scale[...]


@pytest.mark.parametrize("normalize_qk", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_equals_flax(causal, normalize_qk):
    ours = nn.MultiHeadAttention(
        32, 4, qkv_features=48, out_features=24, normalize_qk=normalize_qk, rngs=nnx.Rngs(0)
    )
    theirs = nnx.MultiHeadAttention(
        4,
        32,
        qkv_features=48,
        out_features=24,
        normalize_qk=normalize_qk,
        decode=False,
        rngs=nnx.Rngs(1),
    )
    # Non-trivial LayerNorm scales so that copying them matters.
    if normalize_qk:
        ours.query_ln.scale[...] = 1.0 + 0.1 * host_random.normal(9, (12,), jnp.float32)
    _copy_into_flax(ours, theirs)
    x = host_random.normal(2, (3, 10, 32), jnp.float32)
    mask = host_random.bernoulli(3, 0.8, (3, 1, 10, 10)) | jnp.eye(10, dtype=bool)[None, None]
    with jax.default_matmul_precision("highest"):
        got = ours(x, mask=mask, is_causal=causal)
        expected = theirs(
            x, mask=mask & (jnp.tril(jnp.ones((10, 10), bool))[None, None] if causal else True)
        )
    assert got.shape == (3, 10, 24)
    np.testing.assert_allclose(got, expected, atol=2e-6, rtol=2e-6)


def test_cross_attention_equals_flax():
    ours = nn.MultiHeadAttention(16, 2, rngs=nnx.Rngs(0))
    theirs = nnx.MultiHeadAttention(2, 16, decode=False, rngs=nnx.Rngs(1))
    _copy_into_flax(ours, theirs)
    x = host_random.normal(4, (2, 5, 16), jnp.float32)
    c = host_random.normal(5, (2, 7, 16), jnp.float32)
    with jax.default_matmul_precision("highest"):
        np.testing.assert_allclose(ours(x, c), theirs(x, c), atol=2e-6)


def test_fused_qkv_equals_separate_projections():
    sep = nn.MultiHeadAttention(16, 4, num_kv_heads=2, rngs=nnx.Rngs(0))
    fused = nn.MultiHeadAttention(16, 4, num_kv_heads=2, fused_qkv=True, rngs=nnx.Rngs(1))
    assert fused.qkv.kernel.shape == (16, 16 + 2 * 8)
    fused.qkv.kernel[...] = jnp.concatenate(
        [sep.query.kernel[...], sep.key.kernel[...], sep.value.kernel[...]], -1
    )
    fused.qkv.bias[...] = jnp.concatenate(
        [sep.query.bias[...], sep.key.bias[...], sep.value.bias[...]], -1
    )
    fused.out.kernel[...], fused.out.bias[...] = sep.out.kernel[...], sep.out.bias[...]
    x = host_random.normal(6, (2, 6, 16), jnp.float32)
    np.testing.assert_allclose(fused(x, is_causal=True), sep(x, is_causal=True), atol=1e-6)
    with pytest.raises(ValueError, match="self-attention only"):
        fused(x, x)


@pytest.mark.parametrize("num_kv_heads, use_bias", [(None, True), (1, False)])
def test_self_attention_single_product_equals_three_projections(num_kv_heads, use_bias):
    """Self-attention computes q, k, v as one product of the three kernels side by side; with
    `context=x` they are three products. Outputs and every parameter's gradient agree."""
    model = nn.MultiHeadAttention(
        16, 4, num_kv_heads=num_kv_heads, use_bias=use_bias, rngs=nnx.Rngs(0)
    )
    x = host_random.normal(6, (2, 6, 16), jnp.float32)
    target = host_random.normal(7, (2, 6, 16), jnp.float32)

    def loss(m, context):
        return jnp.sum((m(x, context, is_causal=True) - target) ** 2)

    fused_grads = nnx.jit(nnx.grad(loss))(model, None)
    separate_grads = nnx.jit(nnx.grad(loss))(model, x)
    np.testing.assert_allclose(model(x, is_causal=True), model(x, x, is_causal=True), atol=2e-6)
    for name in ("query", "key", "value", "out"):
        for leaf in ("kernel", "bias") if use_bias else ("kernel",):
            got = getattr(getattr(fused_grads, name), leaf)[...]
            expected = getattr(getattr(separate_grads, name), leaf)[...]
            assert float(jnp.max(jnp.abs(expected))) > 0
            np.testing.assert_allclose(
                got, expected, rtol=1e-5, atol=1e-5, err_msg=f"{name}.{leaf}"
            )


def test_gqa_module_equals_repeated_kv_heads():
    gqa = nn.MultiHeadAttention(16, 4, num_kv_heads=2, rngs=nnx.Rngs(0))
    full = nn.MultiHeadAttention(16, 4, rngs=nnx.Rngs(1))
    full.query.kernel[...], full.query.bias[...] = gqa.query.kernel[...], gqa.query.bias[...]
    for name in ("key", "value"):
        src, dst = getattr(gqa, name), getattr(full, name)
        kernel = src.kernel[...].reshape(16, 2, 1, 4)
        dst.kernel[...] = jnp.broadcast_to(kernel, (16, 2, 2, 4)).reshape(16, 16)
        dst.bias[...] = jnp.broadcast_to(src.bias[...].reshape(2, 1, 4), (2, 2, 4)).reshape(16)
    full.out.kernel[...], full.out.bias[...] = gqa.out.kernel[...], gqa.out.bias[...]
    x = host_random.normal(7, (2, 6, 16), jnp.float32)
    np.testing.assert_allclose(gqa(x), full(x), atol=1e-6)


@pytest.mark.slow
def test_cosine_qk_bounds_logits_by_sqrt_head_dim():
    mha = nn.MultiHeadAttention(32, 2, normalize_qk="cosine", rngs=nnx.Rngs(0))
    x = 50.0 * host_random.normal(8, (1, 12, 32), jnp.float32)
    q, k, _ = mha.project(x)
    np.testing.assert_allclose(jnp.linalg.norm(q, axis=-1), 4.0, rtol=1e-5)  # sqrt(Dh = 16)
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / 4.0
    assert float(jnp.max(jnp.abs(logits))) <= 4.0 + 1e-4
    # The module's weights are softmax of exactly these logits.
    _, w = mha(x, return_weights=True)
    np.testing.assert_allclose(w, jax.nn.softmax(logits, axis=-1), atol=1e-6)


def test_decoding_with_a_key_padding_mask_equals_the_masked_causal_forward():
    """Decoding in two chunks with a key-padding mask (True: keep) sees what the full causal forward
    sees: each query the earlier kept keys, never an unfilled cache slot (float64)."""
    mha = nn.MultiHeadAttention(8, 2, param_dtype=jnp.float64, rngs=nnx.Rngs(0))
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 5, 8)))
    keep = np.ones((2, 1, 1, 7), bool)
    keep[0, ..., 1], keep[1, ..., 3] = False, False
    full = mha(x, mask=jnp.asarray(keep[..., :5]), is_causal=True)
    mha.init_cache(2, 7)
    step = nnx.jit(lambda m, chunk: m(chunk, decode=True, mask=jnp.asarray(keep)))
    decoded = jnp.concatenate([step(mha, x[:, :2]), step(mha, x[:, 2:])], axis=1)
    np.testing.assert_allclose(np.asarray(decoded), np.asarray(full), rtol=0, atol=1e-12)


def test_sown_weights_are_row_stochastic():
    mha = nn.MultiHeadAttention(16, 4, temperature=0.5, rngs=nnx.Rngs(0))
    x = host_random.normal(9, (2, 7, 16), jnp.float32)
    forward = nnx.capture(lambda m, x: m(x, is_causal=True, sow_weights=True), nnx.Intermediate)
    out, intermediates = forward(mha, x)
    (weights,) = jax.tree.leaves(intermediates["attention_weights"])
    assert out.shape == (2, 7, 16) and weights.shape == (2, 4, 7, 7)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(np.triu(np.asarray(weights), 1), 0.0)


def test_articles_example_module_weights_sum_to_one():
    """Seed 000: batch 2, seq 10, d_model 512, 8 heads."""
    mha = nn.MultiHeadAttention(512, 8, rngs=nnx.Rngs(0))
    x = host_random.normal(10, (2, 10, 512), jnp.float32)
    out, w = mha(x, return_weights=True)
    assert out.shape == (2, 10, 512) and w.shape == (2, 8, 10, 10)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(in_features=30, num_heads=4),
            r"qkv_features \(30\) must be divisible by num_heads \(4\)",
        ),
        (
            dict(in_features=32, num_heads=4, num_kv_heads=3),
            r"num_heads \(4\) must be divisible by num_kv_heads \(3\)",
        ),
        (dict(in_features=32, num_heads=0), r"num_heads must be a positive int"),
        (
            dict(in_features=32, num_heads=4, temperature=-1.0),
            r"temperature must be a positive number",
        ),
        (dict(in_features=32, num_heads=4, normalize_qk="l2"), r"normalize_qk must be one of"),
    ],
)
def test_multi_head_attention_rejects_bad_configuration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        nn.MultiHeadAttention(rngs=nnx.Rngs(0), **kwargs)


def test_multi_head_attention_rejects_wrong_input_width():
    mha = nn.MultiHeadAttention(16, 4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"x must have shape \[\.\.\., T, 16\], got \(2, 5, 8\)"):
        mha(jnp.ones((2, 5, 8), jnp.float32))


# ------------------------------------------------------------------ blocks


def _x(seed=11):
    return host_random.normal(seed, (2, 8, 16), jnp.float32)


def _block(**kwargs):
    return nn.Block(nn.BlockConfig(features=16, num_heads=4, **kwargs), rngs=nnx.Rngs(0))


def test_attention_only_block_is_plain_attention():
    block = _block(skip=False, mlp=False, norm=None)
    y, w = block(_x(), return_weights=True)
    np.testing.assert_allclose(y, block.attention(_x()), atol=1e-6)
    assert w.shape == (2, 4, 8, 8)


def test_skip_block_adds_scaled_branch():
    plain = _block(skip=False, mlp=False, norm=None)
    scaled = _block(skip=True, mlp=False, norm=None, residual_scale=0.25)
    x = _x()
    np.testing.assert_allclose(scaled(x)[0], x + 0.25 * plain(x)[0], atol=1e-6)


def test_pre_norm_block_matches_manual_composition():
    block = _block(norm="pre")
    x = _x()
    h = x + block.attention(block.attention_norm(x))
    expected = h + block.mlp(block.mlp_norm(h))
    np.testing.assert_allclose(block(x)[0], expected, atol=1e-5)


def test_post_norm_block_output_is_normalised():
    block = _block(norm="post")
    y, _ = block(3.0 * _x() + 5.0)
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.var(-1), 1.0, atol=1e-3)


def test_block_rejects_unknown_norm():
    with pytest.raises(ValueError, match="norm must be one of"):
        nn.BlockConfig(features=16, num_heads=4, norm="rms")


# ------------------------------------------------------------- transformer


def _config(**kwargs):
    base = dict(num_layers=3, features=16, num_heads=4, vocab_size=11, max_len=32, causal=True)
    base.update(kwargs)
    return nn.TransformerConfig.create(**base)


@pytest.mark.slow
def test_transformer_shapes_and_intermediates():
    model = nn.Transformer(_config(), rngs=nnx.Rngs(0))
    tokens = host_random.randint(12, (2, 9), 0, 11)
    logits, inter = model(tokens, return_intermediates=True)
    assert logits.shape == (2, 9, 11)
    assert inter["hidden"].shape == (4, 2, 9, 16)
    assert inter["attention"].shape == (3, 2, 4, 9, 9)
    np.testing.assert_allclose(inter["attention"].sum(-1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(np.triu(np.asarray(inter["attention"]), 1), 0.0)
    np.testing.assert_allclose(model(tokens), logits, atol=1e-5)
    np.testing.assert_allclose(model.head(model.final_norm(inter["hidden"][-1])), logits, atol=1e-5)


@pytest.mark.slow
def test_scanned_layers_equal_an_explicit_loop():
    # The model and token shapes of test_transformer_shapes_and_intermediates: its eager compilations are reused.
    model = nn.Transformer(_config(), rngs=nnx.Rngs(1))
    tokens = host_random.randint(13, (2, 9), 0, 11)
    _, inter = model(tokens, return_intermediates=True)
    graphdef, state = nnx.split(model.blocks)
    h = inter["hidden"][0]
    for layer in range(3):
        block = nnx.merge(graphdef, jax.tree.map(lambda p: p[layer], state))
        h, _ = block(h, is_causal=True)
        np.testing.assert_allclose(h, inter["hidden"][layer + 1], atol=1e-5)


@pytest.mark.slow
def test_real_valued_inputs_sinusoidal_positions_and_gradients():
    config = _config(
        vocab_size=None,
        input_features=5,
        output_features=3,
        positions="sinusoidal",
        norm="post",
        residual_scale="inv_sqrt_depth",
        causal=False,
    )
    assert config.layer().residual_scale == pytest.approx(1 / np.sqrt(3))
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    x = host_random.normal(14, (2, 6, 5), jnp.float32)
    assert model(x).shape == (2, 6, 3)

    @nnx.jit
    def loss_and_grad(model, x):
        return nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)

    loss, grads = loss_and_grad(model, x)
    leaves = jax.tree.leaves(grads)
    assert np.isfinite(loss) and all(np.all(np.isfinite(g)) for g in leaves)
    assert grads.blocks.attention.query.kernel.shape == (3, 16, 16)


def test_sinusoidal_positions_formula():
    table = nn.sinusoidal_positions(6, 8)
    pos, i = np.arange(6)[:, None], np.arange(4)[None, :]
    angle = pos / 10000 ** (i / 4)
    np.testing.assert_allclose(table, np.concatenate([np.sin(angle), np.cos(angle)], -1), atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_layers=0), r"num_layers must be a positive int, got 0"),
        (dict(features=18), r"features \(18\) must be divisible by num_heads \(4\)"),
        (
            dict(attention=nn.AttentionConfig(num_kv_heads=3)),
            r"num_heads \(4\) must be divisible by num_kv_heads",
        ),
        (
            dict(features=12, num_heads=4, attention=nn.AttentionConfig(rope="half")),
            r"rope needs an even head dim",
        ),
        (dict(norm="batch"), r"norm must be one of"),
        (dict(positions="rope"), r"positions must be one of"),
        (dict(input_features=4), r"exactly one of vocab_size"),
        (dict(residual_scale="sqrt"), r"residual_scale must be a number or 'inv_sqrt_depth'"),
    ],
)
def test_transformer_config_fails_fast(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _config(**kwargs)


def test_transformer_rejects_bad_inputs():
    model = nn.Transformer(_config(max_len=8), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"exceeds max_len 8"):
        model(jnp.zeros((1, 9), jnp.int32))
    with pytest.raises(ValueError, match=r"integer tokens \[B, T\]"):
        model(jnp.zeros((1, 4, 2), jnp.float32))


def test_same_seed_same_model():
    a = nn.Transformer(_config(), rngs=nnx.Rngs(5))
    b = nn.Transformer(_config(), rngs=nnx.Rngs(5))
    for x, y in zip(jax.tree.leaves(nnx.state(a)), jax.tree.leaves(nnx.state(b))):
        np.testing.assert_array_equal(x, y)


def test_module_uses_the_pure_attention_function():
    calls = []

    def spy(q, k, v, **kwargs):
        calls.append(q.shape)
        return attnjax.dot_product_attention(q, k, v, **kwargs)

    mha = nn.MultiHeadAttention(16, 4, attention_fn=spy, rngs=nnx.Rngs(0))
    mha(_x())
    assert calls == [(2, 8, 4, 4)]


# ------------------------------------------------------- linear attention


@pytest.mark.slow
def test_linear_module_calls_linear_attention_with_its_projection():
    from attnjax import features, linear

    mha = nn.MultiHeadAttention(
        16,
        2,
        attention_kind="linear",
        feature_map="favor_plus",
        num_features=32,
        temperature=2.0,
        rngs=nnx.Rngs(0),
    )
    assert mha.projection.shape == (32, 8)
    x = _x()
    q, k, v = mha.project(x)
    phi = features.favor_plus(mha.projection[...])
    heads = linear.linear_attention(q / 2.0, k, v, feature_map=phi, is_causal=True)
    out, w = mha(x, is_causal=True, return_weights=True)
    np.testing.assert_allclose(out, mha.out(heads.reshape(2, 8, 16)), atol=1e-5)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(np.triu(np.asarray(w), 1), 0.0)


@pytest.mark.slow
def test_linear_module_approximates_softmax_module_as_features_grow():
    """FAVOR+ is a Monte-Carlo estimate whose error falls with M. Its features
    exp(w.x - |x|^2/2) are heavy-tailed, so at these sizes the error falls
    slower than 1/sqrt(M) (measured about M^-0.35 for Dh = 16): 16x the
    features must cut it by at least a quarter, and leave it below 0.2."""
    soft = nn.MultiHeadAttention(32, 2, rngs=nnx.Rngs(0))
    x = 0.5 * host_random.normal(3, (1, 16, 32), jnp.float32)
    exact = soft(x)
    errors = {}
    for m in (256, 4096):
        lin = nn.MultiHeadAttention(
            32, 2, attention_kind="linear", num_features=m, rngs=nnx.Rngs(0)
        )
        for name in ("query", "key", "value", "out"):
            getattr(lin, name).kernel[...] = getattr(soft, name).kernel[...]
            getattr(lin, name).bias[...] = getattr(soft, name).bias[...]
        errors[m] = float(jnp.linalg.norm(lin(x) - exact) / jnp.linalg.norm(exact))
    assert errors[4096] < 0.75 * errors[256]
    assert errors[4096] < 0.2


@pytest.mark.slow
def test_redraw_is_explicit_and_deterministic():
    config = _config(
        attention=nn.AttentionConfig(
            attention_kind="linear", feature_map="relu_random", num_features=16
        )
    )
    a, b = nn.Transformer(config, rngs=nnx.Rngs(0)), nn.Transformer(config, rngs=nnx.Rngs(0))
    tokens = host_random.randint(4, (2, 6), 0, 11)
    before = a(tokens)
    np.testing.assert_array_equal(a(tokens), before)  # no hidden redraw between calls
    a.redraw(jax.random.key(1))
    b.redraw(jax.random.key(1))
    assert a.blocks.attention.projection.shape == (3, 16, 4)
    np.testing.assert_array_equal(
        a.blocks.attention.projection[...], b.blocks.attention.projection[...]
    )
    assert not np.allclose(a(tokens), before)
    # The projection is not a trainable parameter.
    params = nnx.state(a, nnx.Param)
    assert "projection" not in params["blocks"]["attention"]


def test_redraw_without_random_features_raises():
    with pytest.raises(ValueError, match="redraw needs"):
        nn.Transformer(_config(), rngs=nnx.Rngs(0)).redraw(jax.random.key(0))
    with pytest.raises(ValueError, match="redraw needs"):
        nn.MultiHeadAttention(
            16, 2, attention_kind="linear", feature_map="elu_plus_one", rngs=nnx.Rngs(0)
        ).redraw(jax.random.key(0))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(attention_kind="sparse"), r"attention_kind must be one of \('softmax', 'linear'\)"),
        (dict(attention_kind="linear", feature_map="gelu"), r"feature_map must be one of"),
        (dict(attention_kind="linear", num_features=0), r"num_features must be a positive int"),
    ],
)
def test_linear_options_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        nn.AttentionConfig(**kwargs)
