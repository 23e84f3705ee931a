"""`from_pretrained`'s errors: each names the file, option or tensor and what is supported.

Checkpoints are written by hand (tests/tiny_checkpoint.py: a one-layer llama
of width 8 with NumPy and `safetensors`, a word-level `tokenizer.json` as
JSON), so these tests need neither torch nor transformers.
"""

import json
import re
import warnings

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

GPT2 = {
    "model_type": "gpt2",
    "n_embd": D,
    "n_layer": 1,
    "n_head": HEADS,
    "n_positions": 16,
    "vocab_size": VOCAB,
}


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
        r"supported model_type: \('bert', 'llama', 'mistral', 'qwen2', 'gpt2', 'gemma3_text'\)",
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


# ------------------------------------------------- loaders never change a model silently


def test_a_bert_config_without_type_vocab_size_has_hugging_faces_two_token_types(tmp_path):
    """Hugging Face's BertConfig defaults type_vocab_size to 2: the token-type embedding exists."""
    config = {k: v for k, v in tiny.BERT_CONFIG.items() if k != "type_vocab_size"}
    tiny.write(tmp_path, config=config, tensors_=tiny.bert_tensors())
    model, _ = pretrained.from_pretrained(str(tmp_path))
    assert model.config.type_vocab_size == 2
    np.testing.assert_array_equal(
        np.asarray(model.type_embed.embedding[...]),
        tiny.bert_tensors()["embeddings.token_type_embeddings.weight"],
    )


@pytest.mark.parametrize(
    "config, absent, expected",
    [
        (tiny.BERT_CONFIG, "layer_norm_eps", ("norm_eps", 1e-12)),
        (tiny.BERT_CONFIG, "hidden_act", ("mlp_activation", "gelu")),
        ({**CONFIG, "model_type": "mistral"}, "sliding_window", ("window", 4096)),
        (
            {**CONFIG, "model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 0},
            "layer_types",
            ("window", 4096),
        ),
        (
            {**CONFIG, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4},
            "layer_types",
            ("window", None),  # layer_types default: sliding from layer max_window_layers = 28
        ),
    ],
)
def test_an_absent_option_takes_hugging_faces_default(tmp_path, config, absent, expected):
    """An option the file leaves out is what Hugging Face's config class makes of it."""
    bert = config["model_type"] == "bert"
    tiny.write(
        tmp_path,
        config={k: v for k, v in config.items() if k != absent},
        tensors_=tiny.bert_tensors()
        if bert
        else _tensors(qkv_bias=config["model_type"] == "qwen2"),
    )
    model, _ = pretrained.from_pretrained(str(tmp_path))
    block = model.config.block
    name, value = expected
    assert getattr(block.attention if name == "window" else block, name) == value


def test_a_causal_bert_is_refused(tmp_path):
    """BertModel with is_decoder=true attends causally; loading it as an encoder would change it."""
    tiny.write(
        tmp_path, config={**tiny.BERT_CONFIG, "is_decoder": True}, tensors_=tiny.bert_tensors()
    )
    with pytest.raises(ValueError, match=r"config.json: unsupported is_decoder=True"):
        pretrained.from_pretrained(str(tmp_path))


def test_a_config_with_fewer_layers_than_the_checkpoint_is_refused(tmp_path):
    """num_hidden_layers: 1 on a 2-layer checkpoint: the unread layer is an error, or a warning."""
    _write(tmp_path, tensors=_tensors(layers=2))
    message = (
        r"model.safetensors holds 9 tensor\(s\) that the model .*config.json describes does not "
        r"read: \['model.layers.1.input_layernorm.weight', .*\] \(layers \[1\]; .*config.json: "
        r"num_hidden_layers=1\); pass strict=False to load without them"
    )
    with pytest.raises(ValueError, match=message):
        pretrained.from_pretrained(str(tmp_path))
    with pytest.warns(UserWarning, match=message.split("; pass")[0]):
        model, _ = pretrained.from_pretrained(str(tmp_path), strict=False)
    assert model.config.num_layers == 1


def test_a_stray_tensor_is_reported(tmp_path):
    _write(tmp_path, tensors={**_tensors(), "model.extra.weight": np.ones(3, np.float32)})
    with pytest.raises(ValueError, match=r"1 tensor\(s\) .* read: \['model.extra.weight'\]"):
        pretrained.from_pretrained(str(tmp_path))


def test_the_parts_outside_the_bert_encoder_are_not_read_by_design(tmp_path):
    """BERT's pooler, a task model's heads and the position_ids buffer load without a word (documented)."""
    tensors = {f"bert.{k}": v for k, v in tiny.bert_tensors().items()}
    extra = {
        "bert.pooler.dense.weight": np.ones((D, D), np.float32),
        "bert.pooler.dense.bias": np.ones(D, np.float32),
        "bert.embeddings.position_ids": np.arange(64)[None],
        "cls.predictions.bias": np.ones(VOCAB, np.float32),
    }
    tiny.write(tmp_path, config=tiny.BERT_CONFIG, tensors_={**tensors, **extra})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model, _ = pretrained.from_pretrained(str(tmp_path))
    np.testing.assert_array_equal(
        np.asarray(model.embed.embedding[...]), tensors["bert.embeddings.word_embeddings.weight"]
    )


def test_a_directory_without_tokenizer_loads_the_model_alone(tmp_path):
    _write(tmp_path, tokenizer=False)
    with pytest.raises(
        FileNotFoundError, match=r"lacks tokenizer.json .*tokenizer=False loads the model alone"
    ):
        pretrained.from_pretrained(str(tmp_path))
    model, tokenizer = pretrained.from_pretrained(str(tmp_path), tokenizer=False)
    assert tokenizer is None and model(jnp.asarray([[2, 3, 5]])).shape == (1, 3, VOCAB)
    model, tokenizer = pretrained.load_bert(
        str(tiny.write(tmp_path / "bert", config=tiny.BERT_CONFIG, tensors_=tiny.bert_tensors())),
        tokenizer=False,
    )
    assert tokenizer is None and model(jnp.asarray([[2, 3, 5]])).shape == (1, 3, D)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", r"is not valid JSON"),
        ("[1, 2]", r"must hold a JSON object with a 'weight_map', got list"),
        ('{"weight_map": ["model-1.safetensors"]}', r"'weight_map' .* got list"),
        ('{"weight_map": {"model.norm.weight": 3}}', r"'weight_map' .* got .*3"),
        ('{"metadata": {}}', r"'weight_map' .* got None"),
    ],
)
def test_an_invalid_index(tmp_path, text, message):
    """A sharded checkpoint's index that is not JSON, or not {tensor name: shard file}, is named."""
    (_write(tmp_path) / "model.safetensors").unlink()
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(text)
    with pytest.raises(ValueError, match=re.escape(str(index)) + ".*" + message):
        pretrained.from_pretrained(str(tmp_path))


@pytest.mark.parametrize(
    "config, message",
    [
        ({**CONFIG, "num_hidden_layers": 0}, r"num_hidden_layers must be a positive int, got 0"),
        ({**CONFIG, "hidden_size": 8.5}, r"hidden_size must be a positive int, got 8.5"),
        ({**CONFIG, "vocab_size": "6"}, r"vocab_size must be a positive int, got '6'"),
        (
            {**CONFIG, "num_key_value_heads": 3},
            r"num_attention_heads \(2\) must be divisible by num_key_value_heads \(3\)",
        ),
        (
            {**CONFIG, "hidden_size": 9, "num_attention_heads": 2},
            r"hidden_size \(9\) must be divisible by num_attention_heads \(2\)",
        ),
        ({**CONFIG, "rms_norm_eps": -1.0}, r"rms_norm_eps must be a positive number, got -1.0"),
        (
            {**CONFIG, "max_position_embeddings": 0},
            r"max_position_embeddings must be a positive int, got 0",
        ),
        ({**CONFIG, "tie_word_embeddings": "yes"}, r"tie_word_embeddings must be a bool"),
        (
            {**CONFIG, "rope_parameters": {"rope_type": "linear", "factor": 0.0}},
            r"rope_parameters\['factor'\] must be a positive number, got 0.0",
        ),
        (
            {**CONFIG, "model_type": "mistral", "sliding_window": 0},
            r"sliding_window must be a positive int, got 0",
        ),
        (
            {**tiny.BERT_CONFIG, "num_attention_heads": 3},
            r"hidden_size \(8\) must be divisible by num_attention_heads \(3\)",
        ),
        ({**tiny.BERT_CONFIG, "type_vocab_size": 0}, r"type_vocab_size must be a positive int"),
        ({**tiny.BERT_CONFIG, "layer_norm_eps": 0}, r"layer_norm_eps must be a positive number"),
        (
            {**GPT2, "n_head": 3},
            r"n_embd \(8\) must be divisible by n_head \(3\)",
        ),
        (
            {**GPT2, "n_positions": 0},
            r"n_positions must be a positive int, got 0",
        ),
    ],
)
def test_config_errors_name_the_hugging_face_field_and_the_file(tmp_path, config, message):
    """A bad config.json value is named as the file names it (not as the attnjax field it becomes)."""
    _write(tmp_path, config=config)
    with pytest.raises(ValueError, match=r"config\.json: " + message) as error:
        pretrained.from_pretrained(str(tmp_path))
    attnjax_names = ("num_layers", "features", "num_heads", "num_kv_heads", "norm_eps", "max_len")
    assert not any(re.search(rf"\b{name}\b", str(error.value)) for name in attnjax_names)
