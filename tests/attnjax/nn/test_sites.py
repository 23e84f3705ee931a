"""Named activation sites (`attnjax.nn.sites`): every site captured against the float64 NumPy reference
written from the equations, the identities that tie the sites together, edits at sites from data, and the
errors for sites, shapes and calls that do not exist."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn
from attnjax.nn import edits, sites
from tests import reference_transformer as ref
from tests.attnjax.nn.test_reference_transformer import CASES, IDS, TOL, _model

# Cases with an MLP (all sites), without one (no resid_mid, mlp_*), post-LN and GQA with RoPE.
SITE_CASES = (
    "learned-pre-layernorm-gqa-causal",
    "sinusoidal-post-rmsnorm-rope-tied",
    "attention-only-no-norm",
    "qk-layernorm-rope-gqa",
)


def _reference_sites(params, config):
    """{site: float64 array} from the NumPy reference: layer sites stacked [L, ...]."""
    recorded = {}

    def record(name, layer, value):
        recorded.setdefault(name, {})[layer] = np.asarray(value, np.float64)

    ref.transformer(params, config, IDS, record=record)
    return {
        name: by_layer[None]
        if None in by_layer
        else np.stack([by_layer[i] for i in sorted(by_layer)])
        for name, by_layer in recorded.items()
    }


@pytest.mark.parametrize("name", SITE_CASES)
def test_every_site_equals_the_float64_reference(name):
    model, params = _model(CASES[name])
    shapes = sites.site_shapes(model.config, *IDS.shape)
    logits, captured = model(jnp.asarray(IDS), capture=tuple(shapes))
    want = _reference_sites(params, model.config)
    assert set(captured) == set(shapes) == set(want)
    for site, value in captured.items():
        layered = site in sites.LAYER_SITES
        expected_shape = ((model.config.num_layers,) if layered else ()) + shapes[site]
        assert value.shape == expected_shape, site
        assert value.dtype == jnp.float64, site
        np.testing.assert_allclose(np.asarray(value), want[site], **TOL, err_msg=site)
    # Capturing changes nothing.
    np.testing.assert_array_equal(np.asarray(logits), np.asarray(model(jnp.asarray(IDS))))


def test_the_sites_sum_to_each_other():
    """Pre-LN blocks with skips and residual scale 1: head outputs through W_o are the attention output,
    resid_pre + attn_out = resid_mid, resid_mid + mlp_out = resid_post = the next layer's resid_pre."""
    model, params = _model(CASES["learned-pre-layernorm-gqa-causal"])
    _, c = model(jnp.asarray(IDS), capture=sites.SITES)
    c = {k: np.asarray(v) for k, v in c.items()}
    w_o = params[("blocks", "attention", "out", "kernel")]  # [L, H Dh, D]
    b_o = params[("blocks", "attention", "out", "bias")]
    heads = c["head_out"].reshape(c["head_out"].shape[:3] + (-1,))
    through_w_o = np.einsum("lbtf,lfd->lbtd", heads, w_o) + b_o[:, None, None, :]
    np.testing.assert_allclose(through_w_o, c["attn_out"], **TOL)
    np.testing.assert_allclose(c["resid_pre"] + c["attn_out"], c["resid_mid"], **TOL)
    np.testing.assert_allclose(c["resid_mid"] + c["mlp_out"], c["resid_post"], **TOL)
    np.testing.assert_array_equal(c["resid_post"][:-1], c["resid_pre"][1:])
    np.testing.assert_array_equal(c["embed"], c["resid_pre"][0])
    np.testing.assert_allclose(c["weights"].sum(-1), 1.0, **TOL)


def test_capture_under_jit_returns_only_the_requested_sites():
    model, _ = _model(CASES["qk-layernorm-rope-gqa"])
    forward = nn.jit_forward(model, capture=("q", "final"))
    logits, captured = forward(jnp.asarray(IDS))
    eager_logits, eager = model(jnp.asarray(IDS), capture=("q", "final"))
    assert set(captured) == {"q", "final"}
    np.testing.assert_allclose(np.asarray(captured["q"]), np.asarray(eager["q"]), **TOL)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(eager_logits), **TOL)


def test_capture_combines_with_return_intermediates_and_attention_edits():
    model, params = _model(CASES["learned-pre-layernorm-gqa-causal"])
    ablate = edits.ablate_head(layer=1, head=2)
    _, out = model(
        jnp.asarray(IDS), capture=("head_out",), return_intermediates=True, edits=(ablate,)
    )
    assert set(out) == {"head_out", "hidden", "attention"}
    np.testing.assert_array_equal(np.asarray(out["head_out"][1, :, :, 2]), 0.0)
    assert np.abs(np.asarray(out["head_out"][0, :, :, 2])).min() > 0


def test_replacing_a_site_with_its_own_value_changes_nothing_bitwise():
    model, _ = _model(CASES["sinusoidal-post-rmsnorm-rope-tied"])
    tokens = jnp.asarray(IDS)
    clean, c = model(tokens, capture=("resid_pre", "head_out", "mlp_hidden", "q", "final"))
    for site in c:
        patched = model(tokens, edits=(sites.replace(site, c[site]),))
        np.testing.assert_array_equal(np.asarray(patched), np.asarray(clean), err_msg=site)


def test_patching_the_clean_residual_into_a_corrupted_run():
    """resid_pre of layer 0 at every position, or resid_post of the last layer: the clean logits exactly;
    a patch at one position of the last layer changes the logits at that position only."""
    model, _ = _model(CASES["learned-pre-layernorm-gqa-causal"])
    clean_tokens, corrupted_tokens = jnp.asarray(IDS), jnp.asarray(IDS[:, ::-1])
    clean, c = model(clean_tokens, capture=("resid_pre", "resid_post"))
    corrupted = model(corrupted_tokens)
    first = np.zeros((model.config.num_layers, 1, 1, 1), bool)
    first[0] = True
    last = np.zeros_like(first)
    last[-1] = True
    for site, where in (("resid_pre", first), ("resid_post", last)):
        patched = model(corrupted_tokens, edits=(sites.replace(site, c[site], where),))
        np.testing.assert_array_equal(np.asarray(patched), np.asarray(clean), err_msg=site)
    one = np.zeros((model.config.num_layers, 1, IDS.shape[1], 1), bool)
    one[-1, :, 3] = True
    patched = np.asarray(
        model(corrupted_tokens, edits=(sites.replace("resid_post", c["resid_post"], one),))
    )
    np.testing.assert_array_equal(patched[:, 3], np.asarray(clean)[:, 3])
    others = [t for t in range(IDS.shape[1]) if t != 3]
    np.testing.assert_array_equal(patched[:, others], np.asarray(corrupted)[:, others])


def test_affine_edits_scale_and_add_at_a_site():
    """Scaling head_out of one head by 0 is `edits.ablate_head`; adding a [D] vector after block l is
    `edits.edit_residual`."""
    model, _ = _model(CASES["qk-layernorm-rope-gqa"])
    tokens, layers, heads = jnp.asarray(IDS), model.config.num_layers, model.config.block.num_heads
    scale = np.ones((layers, 1, 1, heads, 1))
    scale[1, ..., 3, :] = 0.0
    by_site = model(tokens, edits=(sites.affine("head_out", scale=scale),))
    by_edit = model(tokens, edits=(edits.ablate_head(layer=1, head=3),))
    np.testing.assert_allclose(np.asarray(by_site), np.asarray(by_edit), **TOL)
    add = np.zeros((layers, 1, 1, model.config.block.features))
    add[0, 0, 0] = np.linspace(-1, 1, add.shape[-1])
    by_site = model(tokens, edits=(sites.affine("resid_post", add=add),))
    by_edit = model(tokens, edits=(edits.edit_residual(layer=0, add=add[0, 0, 0]),))
    np.testing.assert_allclose(np.asarray(by_site), np.asarray(by_edit), **TOL)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (dict(capture=("resid",)), ValueError, r"site 'resid' does not exist in this model"),
        (dict(capture="q"), TypeError, r"capture must be a sequence of site names"),
        (dict(capture=("mlp_out",)), ValueError, r"site 'mlp_out' does not exist.*resid_pre"),
        (
            dict(edits=(sites.replace("weights", 0.0),)),
            ValueError,
            r"site 'weights' is capture only.*replace_pattern",
        ),
        (
            dict(edits=(sites.replace("resid_pre", np.zeros((2, 2, 5, 16))),)),
            ValueError,
            r"Replace\('resid_pre'\): value of shape \(2, 2, 5, 16\) does not broadcast against "
            r"\[L, \*site shape\] = \(2, 2, 6, 16\)",
        ),
        (
            dict(edits=(sites.replace("resid_pre", 0.0, where=np.ones((1, 1, 1, 1, 1), bool)),)),
            ValueError,
            r"where of shape \(1, 1, 1, 1, 1\) has more axes",
        ),
        (
            dict(edits=(sites.replace("final", 0.0, where=1),)),
            TypeError,
            r"Replace\('final'\): where must be boolean",
        ),
        (
            dict(edits=(sites.affine("q", scale=2.0), edits.ablate_head(0, 0))),
            ValueError,
            r"editing the sites q, k or v does not combine with attention edits",
        ),
        (
            dict(capture=("q", "weights"), return_intermediates="statistics"),
            ValueError,
            r"statistics' keeps memory linear in T: the sites \['weights'\] are \[B, H, T, S\]",
        ),
        (
            dict(edits=(sites.affine("resid_pre", scale=2.0),), return_intermediates="statistics"),
            ValueError,
            r"site edits and return_intermediates='statistics' do not combine",
        ),
    ],
)
def test_bad_sites_and_shapes_raise_naming_them(call, error, match):
    model, _ = _model(CASES["attention-only-no-norm"])
    with pytest.raises(error, match=match):
        model(jnp.asarray(IDS), **call)


def test_the_statistics_mode_captures_the_sites_of_the_plain_pass():
    """`return_intermediates="statistics"` (streaming attention, no [T, S] array) returns the requested
    sites under the same names as the plain pass, with its statistics; the attention output is the
    streaming pass's, equal to the dense one to float64 rounding, and so is everything after it."""
    model, _ = _model(CASES["learned-pre-layernorm-gqa-causal"])
    names = ("embed", "resid_pre", "q", "k", "v", "head_out", "attn_out", "resid_post", "final")
    tokens = jnp.asarray(IDS)
    _, plain = model(tokens, capture=names)
    _, streamed = model(tokens, capture=names, return_intermediates="statistics")
    assert set(streamed) == {*names, "hidden", "statistics"}
    for name in names:
        assert streamed[name].shape == plain[name].shape, name
        np.testing.assert_allclose(streamed[name], plain[name], **TOL, err_msg=name)
    np.testing.assert_array_equal(streamed["resid_pre"][0], plain["resid_pre"][0])


def test_capture_while_decoding_and_site_edits_in_generate_raise():
    model, _ = _model(CASES["learned-pre-layernorm-gqa-causal"])
    with pytest.raises(ValueError, match="full forward passes, not generate"):
        model.generate(jnp.asarray(IDS[:, :2]), 2, edits=(sites.affine("resid_pre", scale=2.0),))
    model.init_cache(2, 8)
    with pytest.raises(ValueError, match="full forward passes"):
        model(jnp.asarray(IDS), decode=True, capture=("q",))


def test_capture_of_a_bfloat16_model_keeps_its_dtypes():
    config = nn.TransformerConfig.create(
        num_layers=2, features=16, num_heads=2, vocab_size=13, max_len=8, dtype=jnp.bfloat16
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    _, c = model(jnp.asarray(IDS), capture=("resid_post", "weights", "head_out"))
    assert c["resid_post"].dtype == jnp.bfloat16 and c["head_out"].dtype == jnp.bfloat16
    assert np.isfinite(np.asarray(c["weights"], np.float32)).all()


def test_capturing_one_site_costs_that_sites_array_only():
    """Compiled memory of the jitted forward pass: the outputs are the logits and the requested stack (and
    the output tuple's table); the temporaries grow by at most three such stacks (measured: 0 for
    resid_pre, 0.25x for head_out, 2.3x for q, whose positioned copy and stacked buffer are new), far
    below every site's arrays."""
    config = nn.TransformerConfig.create(
        num_layers=4, vocab_size=50, features=32, num_heads=4, causal=True, max_len=128
    )
    graphdef, state = nnx.split(nn.Transformer(config, rngs=nnx.Rngs(0)))
    tokens = jnp.zeros((2, 128), jnp.int32)
    shapes = sites.site_shapes(config, 2, 128)

    def memory(capture):
        forward = jax.jit(lambda state, t: nnx.merge(graphdef, state)(t, capture=capture))
        stats = forward.lower(state, tokens).compile().memory_analysis()
        return stats.output_size_in_bytes, stats.temp_size_in_bytes

    logits_bytes, plain_temp = memory(())
    assert logits_bytes == 2 * 128 * 50 * 4
    for site in ("resid_pre", "q", "head_out", "mlp_hidden"):
        site_bytes = 4 * int(np.prod(shapes[site])) * 4  # [L, *shape] float32
        output, temp = memory((site,))
        assert logits_bytes + site_bytes <= output <= logits_bytes + site_bytes + 64, site
        assert temp <= plain_temp + 3 * site_bytes, site
    everything, _ = memory(tuple(shapes))
    assert everything > 10 * (logits_bytes + 4 * int(np.prod(shapes["resid_pre"])) * 4)
