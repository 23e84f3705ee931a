"""`attnjax.pretrained.gguf.load_llama` on a GGUF file written by hand (tests/tiny_checkpoint.py):
every tensor of the file is read or reported, and metadata errors name the key and the file.

Needs the `gguf` package (the `pretrained` extra), not the SmolLM2 wheel.
"""

import re

import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import pretrained
from tests import tiny_checkpoint as tiny


def test_the_hand_written_gguf_file_loads(tmp_path):
    model, tokenizer = pretrained.load_llama(str(tiny.write_gguf(tmp_path / "tiny.gguf")))
    tensors = tiny.gguf_tensors()
    np.testing.assert_array_equal(
        np.asarray(model.embed.embedding[...]), tensors["token_embd.weight"]
    )
    np.testing.assert_array_equal(
        np.asarray(model.blocks.mlp.down.kernel[...])[0], tensors["blk.0.ffn_down.weight"].T
    )
    assert model.config.head == "tied" and model.config.num_layers == 1
    assert model(jnp.asarray([[2, 3, 5]])).shape == (1, 3, tiny.VOCAB)
    assert tokenizer.vocab_size == tiny.VOCAB and tokenizer.encode("abc") == [5, 4]


def test_a_tensor_the_model_does_not_read_is_reported(tmp_path):
    """A llama-3 file's rope_freqs (its rope scaling) or a second layer would be dropped silently."""
    path = tiny.write_gguf(
        tmp_path / "tiny.gguf", extra={"rope_freqs.weight": np.ones(2, np.float32)}
    )
    message = (
        re.escape(str(path)) + r" holds 1 tensor\(s\) that the model .* does not read: "
        r"\['rope_freqs.weight'\]"
    )
    with pytest.raises(ValueError, match=message + r".*; pass strict=False"):
        pretrained.load_llama(str(path))
    with pytest.warns(UserWarning, match=message):
        model, _ = pretrained.load_llama(str(path), strict=False)
    assert model.config.num_layers == 1


def test_metadata_errors_name_the_key_and_the_file(tmp_path):
    path = tiny.write_gguf(tmp_path / "tiny.gguf", block_count=0)
    with pytest.raises(
        ValueError,
        match=re.escape(str(path)) + r": llama.block_count must be a positive int, got 0",
    ):
        pretrained.load_llama(str(path))
