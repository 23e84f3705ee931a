"""`attnjax.nn.edits` against hand-written modified forwards of the float64 NumPy reference
(tests/reference_transformer.py), in one compiled program per edit structure, in `generate`, and the
errors for edits that name a layer, head or position that does not exist."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import nn
from attnjax.nn import edits
from tests import reference_transformer as ref
from tests.attnjax.nn.test_reference_transformer import randomize

TOL = dict(rtol=1e-10, atol=1e-10)
CASES = {
    "causal-gqa-rope": dict(
        positions=None,
        causal=True,
        num_kv_heads=2,
        rope="half",
        norm="pre",
        norm_kind="rmsnorm",
        temperature=0.7,
    ),
    "bidirectional": dict(positions="learned", causal=False, norm="post", temperature=1.2),
}
IDS = np.array([[3, 1, 4, 1, 5, 9, 2], [2, 6, 5, 3, 5, 8, 9]], np.int32)
T = IDS.shape[1]
RNG = np.random.default_rng(0)
PATTERN = RNG.random((T, T))
PATTERN /= PATTERN.sum(-1, keepdims=True)
VECTOR = RNG.normal(size=16)


def _model(name, seed=0):
    config = nn.TransformerConfig.create(
        num_layers=3,
        features=16,
        num_heads=4,
        vocab_size=13,
        max_len=32,
        mlp_features=24,
        param_dtype=jnp.float64,
        **CASES[name],
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(seed))
    return model, randomize(model, seed)


def _at(layer, fn):
    """A reference edit acting in `layer` only."""
    return lambda i, a: fn(a.copy()) if i == layer else a


def _zero_head(o, h):
    o[:, :, h] = 0
    return o


def _mean_head(o, h):
    o[:, :, h] = o[:, :, h].mean(1, keepdims=True)
    return o


def _scale_head(o, h, c):
    o[:, :, h] *= c
    return o


def _remove(w, positions, heads):
    for h in heads:
        w[:, h][..., list(positions)] = 0
        total = w[:, h].sum(-1, keepdims=True)
        w[:, h] = np.where(total > 0, w[:, h] / np.where(total > 0, total, 1), 0)
    return w


def _replace(w, h, pattern):
    w[:, h] = pattern
    return w


# name -> (attnjax edits, the hand-written reference edits)
EDITS = {
    "ablate-zero": (
        (edits.ablate_head(layer=1, head=2),),
        {"heads": _at(1, lambda o: _zero_head(o, 2))},
    ),
    "ablate-mean": (
        (edits.ablate_head(layer=0, head=3, mode="mean"),),
        {"heads": _at(0, lambda o: _mean_head(o, 3))},
    ),
    "scale": (
        (edits.scale_head(layer=2, head=1, scale=2.5),),
        {"heads": _at(2, lambda o: _scale_head(o, 1, 2.5))},
    ),
    "remove-some-heads": (
        (edits.remove_keys(layer=1, positions=(0, 2), heads=(1, 3)),),
        {"weights": _at(1, lambda w: _remove(w, (0, 2), (1, 3)))},
    ),
    "remove-everywhere": (
        (edits.remove_keys(layer=None, positions=(0,)),),
        {"weights": lambda i, w: _remove(w.copy(), (0,), range(4))},
    ),
    "replace-pattern": (
        (edits.replace_pattern(layer=0, head=1, pattern=PATTERN),),
        {"weights": _at(0, lambda w: _replace(w, 1, PATTERN))},
    ),
    "replace-pattern-batched": (
        (edits.replace_pattern(layer=2, head=0, pattern=np.stack([PATTERN, PATTERN.T])),),
        {"weights": _at(2, lambda w: _replace(w, 0, np.stack([PATTERN, PATTERN.T])))},
    ),
    "residual": (
        (edits.edit_residual(layer=1, scale=0.5, add=VECTOR),),
        {"residual": _at(1, lambda x: 0.5 * x + VECTOR)},
    ),
    "combined": (
        (
            edits.ablate_head(0, 0),
            edits.scale_head(0, 1, -1.0),
            edits.remove_keys(2, (1,), heads=(2,)),
            edits.edit_residual(0, 2.0),
        ),
        {
            "heads": _at(0, lambda o: _scale_head(_zero_head(o, 0), 1, -1.0)),
            "weights": _at(2, lambda w: _remove(w, (1,), (2,))),
            "residual": _at(0, lambda x: 2.0 * x),
        },
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_edit_matches_the_hand_written_forward(edit, name):
    model, params = _model(name)
    model_edits, reference_edits = EDITS[edit]
    logits, inter = model(jnp.asarray(IDS), edits=model_edits, return_intermediates=True)
    want_logits, want_hidden = ref.transformer(params, model.config, IDS, edits=reference_edits)
    np.testing.assert_allclose(np.asarray(inter["hidden"]), want_hidden, **TOL)
    np.testing.assert_allclose(np.asarray(logits), want_logits, **TOL)
    plain, _ = ref.transformer(params, model.config, IDS)
    assert np.max(np.abs(want_logits - plain)) > 1e-3  # the edit is not a no-op
    if edit.startswith(
        "remove"
    ):  # the returned weights are the edited ones: no mass on removed keys, rows sum to 1
        layer = 1
        w = np.asarray(inter["attention"][layer])
        assert np.max(w[:, 1, :, 0]) == 0 and np.allclose(w[:, 1, 1:].sum(-1), 1.0)


def test_one_program_per_edit_structure():
    model, params = _model("causal-gqa-rope")
    graphdef, state = nnx.split(model)
    traces = []  # one entry per trace, i.e. per compiled program (same input shapes)

    @jax.jit
    def run(state, e):
        traces.append(None)
        return nnx.merge(graphdef, state)(jnp.asarray(IDS), edits=e)

    for scale in (2.5, -0.5):
        got = run(state, (edits.scale_head(2, 1, scale),))
        hand = {"heads": _at(2, lambda o: _scale_head(o, 1, scale))}
        want, _ = ref.transformer(params, model.config, IDS, edits=hand)
        np.testing.assert_allclose(np.asarray(got), want, **TOL)
    assert len(traces) == 1  # a new scale is a new value, not a new program
    run(state, (edits.scale_head(1, 1, 2.0),))
    assert len(traces) == 2  # a new layer is a new structure


@pytest.mark.parametrize(
    "model_edits",
    [(edits.remove_keys(None, (0,)),), (edits.ablate_head(1, 0), edits.scale_head(2, 3, 3.0))],
    ids=["remove-first-token", "ablate-and-scale"],
)
def test_generate_applies_the_edits_at_every_step(model_edits):
    model, _ = _model("causal-gqa-rope")
    prompt = jnp.asarray(IDS[:, :3])
    tokens = model.generate(prompt, 6, edits=model_edits)
    np.testing.assert_array_equal(np.asarray(tokens[:, :3]), IDS[:, :3])
    # Greedy decoding by full edited forwards: the model is causal, so the logits at position t - 1 of one
    # forward of all 9 tokens are those of a forward of the first t, and each new token is their argmax.
    full = model(tokens, edits=model_edits)
    np.testing.assert_array_equal(
        np.asarray(tokens[:, 3:]), np.argmax(np.asarray(full)[:, 2:-1], -1)
    )
    # the cached decoding path itself, logit by logit: a prefill chunk, then one token at a time (jitted: two
    # programs, where eager dispatch compiles each operation of both alone)
    model.init_cache(2, 12)
    step = nnx.jit(lambda m, chunk: m(chunk, decode=True, edits=model_edits))
    decoded = [step(model, tokens[:, :3])] + [
        step(model, tokens[:, t : t + 1]) for t in range(3, tokens.shape[1])
    ]
    np.testing.assert_allclose(
        np.concatenate([np.asarray(d) for d in decoded], axis=1), np.asarray(full), **TOL
    )
    assert np.max(np.abs(np.asarray(full) - np.asarray(model(tokens)))) > 1e-3


BAD = [
    (edits.ablate_head(layer=3, head=0), "layer 3 does not exist"),
    (edits.ablate_head(layer=-1, head=0), "layer -1 does not exist"),
    (edits.scale_head(layer=0, head=4, scale=2.0), "head 4 out of range"),
    (edits.remove_keys(layer=1, positions=(0,), heads=(7,)), "head 7 out of range"),
    (edits.remove_keys(layer=1, positions=(T,)), r"key positions \[7\] out of range"),
    (edits.replace_pattern(layer=0, head=0, pattern=np.eye(T - 1)), "pattern must have shape"),
    (edits.ablate_head(layer=0, head=0, mode="median"), "mode must be"),
    (edits.edit_residual(layer=5), "layer 5 does not exist"),
    (edits.edit_residual(layer=0, add=np.ones(3)), "add must be"),
]


@pytest.mark.parametrize("edit, message", BAD, ids=[m for _, m in BAD])
def test_bad_edits_raise_before_any_compute(edit, message):
    model, _ = _model("causal-gqa-rope")
    with pytest.raises(ValueError, match=message):
        model(jnp.asarray(IDS), edits=(edit,))
    with pytest.raises(ValueError, match=message):  # at trace time, inside jit
        jax.jit(lambda t: model(t, edits=(edit,))).lower(jax.ShapeDtypeStruct(IDS.shape, jnp.int32))


def test_bad_edits_in_generate_and_types():
    model, _ = _model("causal-gqa-rope")
    prompt = jnp.asarray(IDS[:, :3])
    with pytest.raises(ValueError, match="mean ablation"):
        model.generate(prompt, 4, edits=(edits.ablate_head(0, 0, mode="mean"),))
    with pytest.raises(ValueError, match="head 9 out of range"):
        model.generate(prompt, 4, edits=(edits.ablate_head(0, 9),))
    with pytest.raises(ValueError, match="not decoding"):
        model.generate(prompt, 4, edits=(edits.replace_pattern(0, 0, np.eye(7)),))
    with pytest.raises(TypeError, match="sequence"):
        model(jnp.asarray(IDS), edits=edits.ablate_head(0, 0))
    with pytest.raises(TypeError, match="attnjax.nn.edits"):
        model(jnp.asarray(IDS), edits=("ablate",))
