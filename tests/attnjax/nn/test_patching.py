"""The sweeps of `attnjax.nn.patching` against loops of single edits and against identities of patching:
self-patching changes nothing, a patched token embedding is the run on the patched tokens."""

import jax.numpy as jnp
import numpy as np
import pytest

from attnjax.nn import edits, patching
from tests.attnjax.nn.test_reference_transformer import CASES, IDS, TOL, _model

CORRUPTED = np.array([[3, 1, 4, 7, 5, 9], [2, 6, 0, 3, 5, 8]], np.int32)


def logit_difference(logits):
    """Mean over the batch of logit[11] - logit[12] at the last position."""
    return jnp.mean(logits[:, -1, 11] - logits[:, -1, 12])


@pytest.fixture(scope="module")
def model():
    return _model(CASES["learned-pre-layernorm-gqa-causal"])[0]


@pytest.mark.parametrize("mode", patching.ABLATIONS)
def test_head_ablation_sweep_equals_the_loop_of_single_edits(model, mode):
    messages = []
    grid = patching.ablate_heads(
        model, jnp.asarray(IDS), logit_difference, mode=mode, chunk_size=3, progress=messages.append
    )
    layers, heads = model.config.num_layers, model.config.block.num_heads
    assert grid.shape == (layers, heads)
    loop = [
        [
            logit_difference(model(jnp.asarray(IDS), edits=(edits.ablate_head(layer, h, mode),)))
            for h in range(heads)
        ]
        for layer in range(layers)
    ]
    np.testing.assert_allclose(grid, np.asarray(loop), **TOL)
    # Ablations do something: no cell is the clean metric.
    assert np.all(np.abs(grid - logit_difference(model(jnp.asarray(IDS)))) > 1e-6)
    assert len(messages) == 3 and messages[-1].startswith("head_out sweep: chunk 3/3 (8/8 cells)")


def test_patching_a_run_into_itself_changes_nothing(model):
    """Single runs: `test_sites.test_replacing_a_site_with_its_own_value_changes_nothing_bitwise`."""
    clean = logit_difference(model(jnp.asarray(IDS)))
    for grid in (
        patching.patch_residual(model, jnp.asarray(IDS), jnp.asarray(IDS), logit_difference),
        patching.patch_heads(model, jnp.asarray(IDS), jnp.asarray(IDS), logit_difference),
    ):
        # To float64 rounding: the cells run vmapped in one program, the clean run eagerly; XLA
        # vectorises the batch of cells, so even cells of one chunk differ in the last bits (3e-15).
        np.testing.assert_allclose(grid, np.full(grid.shape, clean), rtol=1e-13, atol=0)


def test_residual_patch_at_the_first_layer_is_the_run_on_the_patched_tokens(model):
    """resid_pre of layer 0 at position t is token t's embedding plus its position: patching it from the
    clean run is running the corrupted tokens with token t set to the clean one; at the last layer's
    resid_post ('resid_post' site) the last position carries the clean logits there."""
    grid = patching.patch_residual(
        model, jnp.asarray(IDS), jnp.asarray(CORRUPTED), logit_difference, chunk_size=5
    )
    assert grid.shape == (model.config.num_layers, IDS.shape[1])
    for t in range(IDS.shape[1]):
        tokens = CORRUPTED.copy()
        tokens[:, t] = IDS[:, t]
        np.testing.assert_allclose(
            grid[0, t], logit_difference(model(jnp.asarray(tokens))), **TOL, err_msg=str(t)
        )
    post = patching.patch_residual(
        model, jnp.asarray(IDS), jnp.asarray(CORRUPTED), logit_difference, site="resid_post"
    )
    np.testing.assert_allclose(post[-1, -1], logit_difference(model(jnp.asarray(IDS))), **TOL)
    corrupted = logit_difference(model(jnp.asarray(CORRUPTED)))
    np.testing.assert_allclose(post[-1, :-1], corrupted, **TOL)  # other positions: not read


def test_the_grid_does_not_depend_on_the_chunk_size(model):
    grids = [
        patching.patch_heads(
            model, jnp.asarray(IDS), jnp.asarray(CORRUPTED), logit_difference, chunk_size=c
        )
        for c in (1, 3, 8)
    ]
    for grid in grids[1:]:
        np.testing.assert_allclose(grid, grids[0], **TOL)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda m: patching.ablate_heads(m, IDS, logit_difference, mode="half"),
            ValueError,
            "mode",
        ),
        (lambda m: patching.ablate_heads(m, IDS, "logits"), TypeError, "metric must be a function"),
        (
            lambda m: patching.patch_heads(m, IDS, IDS[:, :4], logit_difference),
            ValueError,
            r"one shape, got \(2, 6\) and \(2, 4\)",
        ),
        (
            lambda m: patching.patch_residual(m, IDS, IDS, logit_difference, chunk_size=0),
            ValueError,
            "chunk_size",
        ),
        (
            lambda m: patching.patch_residual(m, IDS, IDS, logit_difference, site="q"),
            ValueError,
            "site",
        ),
    ],
)
def test_bad_calls_raise_naming_the_argument(model, call, error, match):
    with pytest.raises(error, match=match):
        call(model)
