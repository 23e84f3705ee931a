"""`from_pretrained`'s errors: each names the file, option or tensor and what is supported.

Checkpoints are written by hand (tests/tiny_checkpoint.py: a one-layer llama
of width 8 with NumPy and `safetensors`, a word-level `tokenizer.json` as
JSON), so these tests need neither torch nor transformers.
"""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from attnjax import nn, pretrained
from attnjax.pretrained import checkpoint
from tests import tiny_checkpoint as tiny

D, HEADS, KV_HEADS, VOCAB, CONFIG = tiny.D, tiny.HEADS, tiny.KV_HEADS, tiny.VOCAB, tiny.CONFIG
_tensors = tiny.tensors


def _write(path, config=None, tensors=None, tokenizer=True):
    return tiny.write(path, config=config, tensors_=tensors, tokenizer=tokenizer)


def test_the_hand_written_checkpoint_loads(tmp_path):
    model, tokenizer = pretrained.from_pretrained(str(_write(tmp_path)))
    assert model.config.head == "tied" and model.config.block.attention.kv_heads(HEADS) == KV_HEADS
    np.testing.assert_array_equal(
        np.asarray(model.embed.embedding[...]), _tensors()["model.embed_tokens.weight"]
    )
    assert tokenizer.encode("a b d") == [2, 3, 5]
    assert model(jnp.asarray([[2, 3, 5]])).shape == (1, 3, VOCAB)


def test_a_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint directory .*nowhere' does not exist"):
        pretrained.from_pretrained(str(tmp_path / "nowhere"))


def test_a_directory_without_config_json(tmp_path):
    (_write(tmp_path) / "config.json").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=r"lacks config.json .*holds \['model.safetensors', 'tokenizer.json'\]",
    ):
        pretrained.from_pretrained(str(tmp_path))


def test_a_directory_without_weights(tmp_path):
    (_write(tmp_path) / "model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=r"no weights: neither model.safetensors nor "
        r"model.safetensors.index.json \(supported: safetensors",
    ):
        pretrained.from_pretrained(str(tmp_path))


def test_an_index_naming_a_missing_shard(tmp_path):
    (_write(tmp_path) / "model.safetensors").rename(tmp_path / "model-00001-of-00002.safetensors")
    weight_map = {name: "model-00001-of-00002.safetensors" for name in _tensors()}
    weight_map["model.norm.weight"] = "model-00002-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(
        FileNotFoundError, match=r"index.json names shard file\(s\) \['model-00002-of-00002"
    ):
        pretrained.from_pretrained(str(tmp_path))


def test_a_directory_without_tokenizer(tmp_path):
    _write(tmp_path, tokenizer=False)
    with pytest.raises(FileNotFoundError, match="lacks tokenizer.json"):
        pretrained.from_pretrained(str(tmp_path))


def test_an_unsupported_model_type(tmp_path):
    _write(tmp_path, config={**CONFIG, "model_type": "t5", "architectures": ["T5Model"]})
    with pytest.raises(
        ValueError,
        match=r"config.json: unsupported architecture, model_type 't5' .*"
        r"supported model_type: \('bert', 'llama', 'mistral', 'qwen2', 'gpt2'\)",
    ):
        pretrained.from_pretrained(str(tmp_path))


def test_load_bert_rejects_another_family(tmp_path):
    with pytest.raises(ValueError, match=r"model_type 'llama' .*supported model_type: \('bert',\)"):
        pretrained.load_bert(str(_write(tmp_path)))


def test_a_config_without_a_needed_field(tmp_path):
    _write(tmp_path, config={k: v for k, v in CONFIG.items() if k != "intermediate_size"})
    with pytest.raises(ValueError, match="model_type 'llama' needs the field 'intermediate_size'"):
        pretrained.from_pretrained(str(tmp_path))


def test_a_missing_tensor(tmp_path):
    name = "model.layers.0.self_attn.k_proj.weight"
    _write(tmp_path, tensors={k: v for k, v in _tensors().items() if k != name})
    with pytest.raises(ValueError, match=f"tensor '{name}' is missing from .*model.safetensors"):
        pretrained.from_pretrained(str(tmp_path))


def test_an_untied_head_without_lm_head(tmp_path):
    _write(tmp_path, config={**CONFIG, "tie_word_embeddings": False})
    with pytest.raises(ValueError, match="tensor 'lm_head.weight' is missing"):
        pretrained.from_pretrained(str(tmp_path))


def test_a_misshaped_tensor(tmp_path):
    name = "model.layers.0.self_attn.k_proj.weight"
    _write(tmp_path, tensors={**_tensors(), name: np.zeros((D, D), np.float32)})
    with pytest.raises(
        ValueError,
        match=rf"tensor '{name}' in .*model.safetensors has shape \(8, 8\); "
        r"the config needs \(4, 8\)",
    ):
        pretrained.from_pretrained(str(tmp_path))


def test_an_unsupported_rope_scaling(tmp_path):
    _write(
        tmp_path,
        config={
            **CONFIG,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0},
        },
    )
    with pytest.raises(
        ValueError,
        match=r"unsupported rope_scaling type 'yarn'; supported: "
        r"\('default', 'linear', 'llama3'\)",
    ):
        pretrained.from_pretrained(str(tmp_path))


def test_the_older_rope_scaling_field_is_read(tmp_path):
    config = {k: v for k, v in CONFIG.items() if k != "rope_parameters"}
    _write(
        tmp_path,
        config={**config, "rope_theta": 500.0, "rope_scaling": {"type": "linear", "factor": 2.0}},
    )
    model, _ = pretrained.from_pretrained(str(tmp_path))
    attention = model.config.block.attention
    assert (attention.rope_base, attention.rope_scaling) == (500.0, ("linear", 2.0))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_act": "gelu"}, r"unsupported hidden_act 'gelu' \(supported: 'silu'"),
        ({"head_dim": 8}, r"unsupported head_dim 8 with hidden_size 8 and 2 heads"),
        (
            {"attention_bias": True},
            r"unsupported: attention_bias=True with mlp_bias=False; supported: both alike",
        ),
        (
            {
                "model_type": "qwen2",
                "use_sliding_window": True,
                "sliding_window": 4,
                "layer_types": ["full_attention", "sliding_attention"],
            },
            r"unsupported: qwen2 with a sliding window on some layers only",
        ),
        (
            {
                "model_type": "gpt2",
                "n_embd": 8,
                "n_layer": 1,
                "n_head": 2,
                "n_positions": 16,
                "scale_attn_by_inverse_layer_idx": True,
            },
            r"unsupported scale_attn_by_inverse_layer_idx=True \(supported: False\)",
        ),
    ],
)
def test_an_unsupported_option(tmp_path, change, message):
    _write(tmp_path, config={**CONFIG, **change})
    with pytest.raises(ValueError, match=message):
        pretrained.from_pretrained(str(tmp_path))


def test_an_unreadable_weights_file(tmp_path):
    (_write(tmp_path) / "model.safetensors").write_bytes(
        b"\x10\x00\x00\x00\x00\x00\x00\x00not a json header"
    )
    with pytest.raises(ValueError, match=r"model.safetensors is not a safetensors file"):
        pretrained.from_pretrained(str(tmp_path))


def test_a_bfloat16_file_is_read_and_cast(tmp_path):
    import ml_dtypes

    tensors = {k: v.astype(ml_dtypes.bfloat16) for k, v in _tensors().items()}
    # safetensors.numpy cannot write bfloat16: the same bytes as float16-sized words, relabelled BF16.
    save_file(
        {k: v.view(np.float16) for k, v in tensors.items()},
        str(_write(tmp_path) / "model.safetensors"),
    )
    raw = (tmp_path / "model.safetensors").read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = raw[8 : 8 + size].replace(b'"F16"', b'"BF16"')
    (tmp_path / "model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + raw[8 + size :]
    )
    model, _ = pretrained.from_pretrained(str(tmp_path))
    table = np.asarray(model.embed.embedding[...])
    assert table.dtype == np.float32
    np.testing.assert_array_equal(table, tensors["model.embed_tokens.weight"].astype(np.float32))


def test_a_failed_assignment_leaves_the_model_untouched():
    config = nn.TransformerConfig.create(
        num_layers=1, features=D, num_heads=HEADS, vocab_size=VOCAB, head=None, positions=None
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(0))
    before = {
        path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
    }
    tree = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    tree = {
        **tree,
        "embed": {"embedding": np.ones((VOCAB, D))},
        "final_norm": {"scale": np.ones(D + 1), "bias": np.ones(D)},
    }
    with pytest.raises(
        ValueError,
        match=r"parameter final_norm.scale needs shape \(8,\), the checkpoint gives \(9,\)",
    ):
        checkpoint.assign(model, tree, jnp.float32)
    for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        np.testing.assert_array_equal(np.asarray(v[...]), before[path])
