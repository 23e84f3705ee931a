"""Mutants of the config checks (every field at construction) and of the loaders' promise that
nothing changes a model silently (Hugging Face's defaults, every tensor read or reported, a
model without its tokenizer, named index and config.json errors)."""

from tests.mutant import Mutant

VALIDATION = "tests/attnjax/nn/test_config_validation.py::"
ERRORS = "tests/attnjax/pretrained/test_hf_errors.py::"
GGUF = "tests/attnjax/pretrained/test_gguf.py::"
ORACLE = "tests/attnjax/pretrained/test_hf.py::"  # skips without torch / transformers

MUTANTS = (
    Mutant(
        "attnjax/nn/configs.py",
        'for name in ("vocab_size", "input_features", "output_features"):',
        "for name in ():",
        "config check: vocab_size, input_features, output_features unchecked",
        (VALIDATION + "test_transformer_config_validates_each_field",),
    ),
    Mutant(
        "attnjax/nn/configs.py",
        'checks.floating_dtype("param_dtype", self.param_dtype)',
        "pass",
        "config check: param_dtype unchecked",
        (VALIDATION + "test_block_config_validates_each_field",),
    ),
    Mutant(
        "attnjax/checks.py",
        "if dtype is None or not jnp.issubdtype(dtype, jnp.floating):",
        "if dtype is None:",
        "config check: an integer or complex dtype taken as floating",
        (VALIDATION + "test_block_config_validates_each_field",),
    ),
    Mutant(
        "attnjax/checks.py",
        "if not np.isfinite(value):",
        "if np.isnan(value):",
        "config check: norm_eps, residual_scale may be inf",
        (VALIDATION + "test_block_config_validates_each_field",),
    ),
    Mutant(
        "attnjax/pretrained/bert.py",
        '    "type_vocab_size": 2,\n',
        "",
        "loader: BERT without Hugging Face's default type_vocab_size 2",
        (ERRORS + "test_a_bert_config_without_type_vocab_size_has_hugging_faces_two_token_types",),
    ),
    Mutant(
        "attnjax/pretrained/decoder.py",
        '"num_key_value_heads": 8, "sliding_window": 4096}',
        '"num_key_value_heads": 8, "sliding_window": None}',
        "loader: mistral without Hugging Face's default sliding window",
        (ERRORS + "test_an_absent_option_takes_hugging_faces_default",),
    ),
    Mutant(
        "attnjax/pretrained/decoder.py",
        '"num_key_value_heads": 32,',
        '"num_key_value_heads": None,',
        "loader: qwen2 key/value heads default one per query head, not transformers' 32",
        (ORACLE + "test_each_familys_defaults_are_its_hugging_face_config_classs",),
    ),
    Mutant(
        "attnjax/pretrained/decoder.py",
        'return ["sliding_attention" if i >= start else "full_attention" for i in range(num_layers)]',
        'return ["sliding_attention" for i in range(num_layers)]',
        "loader: qwen2 layer_types not derived from max_window_layers",
        (ERRORS + "test_an_absent_option_takes_hugging_faces_default",),
    ),
    Mutant(
        "attnjax/pretrained/bert.py",
        'if f.boolean("is_decoder"):',
        "if False:",
        "loader: a causal BERT loaded as an encoder",
        (ERRORS + "test_a_causal_bert_is_refused",),
    ),
    Mutant(
        "attnjax/pretrained/hf.py",
        "reader.unread(family.not_read(set(tensors))),",
        "[],",
        "loader: unread safetensors tensors dropped silently",
        (
            ERRORS + "test_a_config_with_fewer_layers_than_the_checkpoint_is_refused",
            ERRORS + "test_a_stray_tensor_is_reported",
        ),
    ),
    Mutant(
        "attnjax/pretrained/checkpoint.py",
        "    if strict:\n",
        "    if not strict:\n",
        "loader: strict and strict=False swapped",
        (ERRORS + "test_a_config_with_fewer_layers_than_the_checkpoint_is_refused",),
    ),
    Mutant(
        "attnjax/pretrained/bert.py",
        "if outside.fullmatch(n) or not n.startswith(p)}",
        "if outside.fullmatch(n)}",
        "loader: BERT task heads reported though not read by design",
        (ERRORS + "test_the_parts_outside_the_bert_encoder_are_not_read_by_design",),
    ),
    Mutant(
        "attnjax/pretrained/gpt2.py",
        r'attn\.(bias|masked_bias)$"',
        r'attn\.(masked_bias)$"',
        "loader: gpt2's attn.bias buffers reported",
        (ORACLE + "test_the_attention_mask_buffers_of_older_gpt2_files_are_not_reported",),
    ),
    Mutant(
        "attnjax/pretrained/gguf.py",
        "tensors.unread(), path, path,",
        "[], path, path,",
        "loader: unread GGUF tensors dropped silently",
        (GGUF + "test_a_tensor_the_model_does_not_read_is_reported",),
    ),
    Mutant(
        "attnjax/pretrained/hf.py",
        "if tokenizer and not os.path.isfile(tokenizer_file):",
        "if not os.path.isfile(tokenizer_file):",
        "loader: tokenizer=False still needs tokenizer.json",
        (ERRORS + "test_a_directory_without_tokenizer_loads_the_model_alone",),
    ),
    Mutant(
        "attnjax/pretrained/checkpoint.py",
        "    if not isinstance(contents, dict):\n",
        "    if False:\n",
        "loader: a list-shaped index read as a dict",
        (ERRORS + "test_an_invalid_index",),
    ),
    Mutant(
        "attnjax/pretrained/fields.py",
        "if not _is_int(value) or value < 1:",
        "if not _is_number(value) or value < 1:",
        "loader: config.json sizes such as 8.5 truncated to ints",
        (ERRORS + "test_config_errors_name_the_hugging_face_field_and_the_file",),
    ),
    Mutant(
        "attnjax/pretrained/decoder.py",
        'f.divisible("num_attention_heads", num_heads, "num_key_value_heads", num_kv_heads)',
        "pass",
        "loader: key/value heads checked under attnjax's names only",
        (ERRORS + "test_config_errors_name_the_hugging_face_field_and_the_file",),
    ),
    Mutant(
        "attnjax/pretrained/gguf.py",
        "num_layers=f.positive_int(key(LAYERS_FIELD)),",
        "num_layers=f.get(key(LAYERS_FIELD)),",
        "loader: GGUF block_count checked under attnjax's name only",
        (GGUF + "test_metadata_errors_name_the_key_and_the_file",),
    ),
)
