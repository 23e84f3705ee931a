"""Training data made in-process: synthetic tasks and a character-level corpus.

Every task is a small frozen dataclass with

* `vocab_size`, `seq_len`: the token vocabulary and the length T of a sequence;
* `chance_accuracy`: the accuracy of guessing uniformly among the plausible
  answers of a scored position (what "near chance" means in a report);
* `batch(key, batch_size, split='train') -> Batch`: a pure function of an
  explicit PRNG key (same key, same batch) that composes with `jax.jit`
  (`batch_size` and `split` static) and `jax.vmap` over keys.

A `Batch` holds `inputs [B, T] int32`, `targets [B, T] int32` and
`weights [B, T] float32`: position t of a causal model reads `inputs[:, :t+1]`
and is scored, with weight `weights[:, t]`, on predicting `targets[:, t]`.
Unscored positions have weight 0 (and target 0 where no next token is natural).

Tasks:
* `AssociativeRecall` — multi-query associative recall (Arora et al. 2023,
  "Zoology"): key-value pairs, then queries whose answers must be retrieved
  from the context; it needs attention as retrieval.
* `Sorting` — sort a sequence of numbers (the task Dong et al. 2021 trained on).
* `CharCorpus` — character-level language modelling over a UTF-8 text file, by
  default a fixed list of Python standard-library sources; deterministic
  train/validation split.

Sentences of English prose, for measuring pretrained models on real text
(`docstring_sentences`, `split_sentences`), live in `attnjax.sentences`.

`make_task(name, **kwargs)` builds one by name: 'associative_recall',
'sorting' or 'char_lm'.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sysconfig
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import checks, compilation

Array = jax.Array

SPLITS = ("train", "val")


class Batch(NamedTuple):
    """One batch: `inputs [B, T] int32`, `targets [B, T] int32`, `weights [B, T] float32`."""

    inputs: Array
    targets: Array
    weights: Array


# --------------------------------------------------------------------------
# Argument checks (static, before any compute)


def _check_batch_args(batch_size, split: str) -> None:
    checks.integer("batch_size", batch_size, 1)
    checks.choice("split", split, SPLITS)


def _compiled_batch(make_batch):
    """A synthetic task's `_make_batch(key, batch_size)` as one compiled function (the task, a frozen
    dataclass, and the batch size static: cached per task and batch size), so eager calls do not
    dispatch op by op; inside an outer `jit` or `vmap` (a traced key) it is a plain nested `jax.jit`.

    Compiled with `compilation.fast_compile_options` (a sampler runs in microseconds; its integer
    tokens and 0/1 weights are the same bits at any optimisation level), read at each eager call,
    not at import (the options ask for the backend)."""
    nested = jax.jit(make_batch, static_argnums=(0, 2))

    @functools.cache
    def compiled(options: tuple):
        return jax.jit(make_batch, static_argnums=(0, 2), compiler_options=dict(options))

    @functools.wraps(make_batch)
    def call(self, key: Array, batch_size: int) -> Batch:
        if isinstance(key, jax.core.Tracer):
            return nested(self, key, batch_size)
        options = tuple(sorted(compilation.fast_compile_options().items()))
        return compiled(options)(self, key, batch_size)

    return call


# --------------------------------------------------------------------------
# Multi-query associative recall


@dataclasses.dataclass(frozen=True)
class AssociativeRecall:
    """Multi-query associative recall (Arora et al. 2023, "Zoology").

    Vocabulary: ids `[0, num_key_tokens)` are keys, ids
    `[num_key_tokens, vocab_size)` are values. Each example draws `num_pairs`
    distinct keys (without replacement) and a value for each (with
    replacement), then `num_queries` distinct keys among the pairs:

        inputs  = k_1 v_1 k_2 v_2 ... k_N v_N  q_1 ... q_M      (T = 2N + M)
        targets = 0   0   ...              0   a_1 ... a_M
        weights = 0   0   ...              0   1   ... 1

    where a_i is the value paired with key q_i. The answer is emitted AT the
    query position: a causal model at position 2N + i - 1 has read every pair
    and the queries q_1..q_i, and nothing else; values never appear after the
    pairs, so a_i is determined by the context only through the pair (q_i, a_i).

    Args:
      num_pairs: N, key-value pairs per example.
      num_queries: M <= N, queried keys per example (each pair queried at most once).
      vocab_size: total vocabulary (keys + values).
      num_key_tokens: size of the key part of the vocabulary (default
        `vocab_size // 2`); must be >= num_pairs so keys can be distinct.
    """

    num_pairs: int = 8
    num_queries: int = 8
    vocab_size: int = 64
    num_key_tokens: Optional[int] = None

    def __post_init__(self):
        checks.integer("num_pairs", self.num_pairs, 1)
        checks.integer("num_queries", self.num_queries, 1)
        checks.integer("vocab_size", self.vocab_size, 2)
        if self.num_key_tokens is not None:
            checks.integer("num_key_tokens", self.num_key_tokens, 1)
        if self.num_queries > self.num_pairs:
            raise ValueError(
                f"num_queries ({self.num_queries}) must be <= num_pairs ({self.num_pairs})"
            )
        if self.key_tokens >= self.vocab_size:
            raise ValueError(
                f"num_key_tokens ({self.key_tokens}) must be < vocab_size ({self.vocab_size}) "
                "so that at least one value token remains"
            )
        if self.num_pairs > self.key_tokens:
            raise ValueError(
                f"num_pairs ({self.num_pairs}) must be <= the number of distinct keys "
                f"(num_key_tokens = {self.key_tokens}); raise vocab_size or num_key_tokens"
            )

    @property
    def key_tokens(self) -> int:
        """Number of key ids, `[0, key_tokens)`."""
        return self.vocab_size // 2 if self.num_key_tokens is None else int(self.num_key_tokens)

    @property
    def value_tokens(self) -> int:
        """Number of value ids, `[key_tokens, vocab_size)`."""
        return self.vocab_size - self.key_tokens

    @property
    def seq_len(self) -> int:
        return 2 * self.num_pairs + self.num_queries

    @property
    def chance_accuracy(self) -> float:
        """Uniform guessing over the value vocabulary: 1 / value_tokens."""
        return 1.0 / self.value_tokens

    def _example(self, key: Array) -> tuple[Array, Array]:
        """One example: inputs `[T]` and targets `[T]`, int32."""
        k_keys, k_values, k_queries = jax.random.split(key, 3)
        keys = jax.random.permutation(k_keys, self.key_tokens)[: self.num_pairs].astype(jnp.int32)
        values = jax.random.randint(
            k_values, (self.num_pairs,), self.key_tokens, self.vocab_size, jnp.int32
        )
        asked = jax.random.permutation(k_queries, self.num_pairs)[: self.num_queries]
        pairs = jnp.stack([keys, values], axis=-1).reshape(-1)  # k1 v1 k2 v2 ...
        inputs = jnp.concatenate([pairs, keys[asked]])
        targets = jnp.concatenate([jnp.zeros((2 * self.num_pairs,), jnp.int32), values[asked]])
        return inputs, targets

    def batch(self, key: Array, batch_size: int, split: str = "train") -> Batch:
        """`batch_size` independent examples; `split` is accepted for a uniform
        interface (both splits are fresh draws from one distribution; use
        different keys for held-out data)."""
        _check_batch_args(batch_size, split)
        return self._make_batch(key, batch_size)

    @_compiled_batch
    def _make_batch(self, key: Array, batch_size: int) -> Batch:
        inputs, targets = jax.vmap(self._example)(jax.random.split(key, batch_size))
        scored = jnp.arange(self.seq_len) >= 2 * self.num_pairs
        weights = jnp.broadcast_to(scored.astype(jnp.float32)[None, :], inputs.shape)
        return Batch(inputs, targets, weights)


# --------------------------------------------------------------------------
# Sorting


@dataclasses.dataclass(frozen=True)
class Sorting:
    """Sort `length` numbers, framed as causal language modelling.

    Numbers are ids `[0, vocab_size - 1)`, drawn uniformly with replacement;
    id `vocab_size - 1` is the separator SEP. With y = sorted(x), the full
    sequence is `x_1 .. x_n SEP y_1 .. y_n` and (teacher forcing) inputs are
    all but its last token, targets all but its first:

        inputs  = x_1 .. x_n   SEP y_1 .. y_{n-1}              (T = 2n)
        targets = x_2 .. SEP   y_1 y_2 .. y_n
        weights = 0   .. 0     1   1   .. 1

    so `targets[:, n:]` is the sorted input and only those n positions are
    scored (the unsorted half is random and unpredictable).

    Args:
      length: n, the numbers to sort.
      vocab_size: total vocabulary: `vocab_size - 1` number ids plus SEP.
    """

    length: int = 8
    vocab_size: int = 16

    def __post_init__(self):
        checks.integer("length", self.length, 1)
        checks.integer("vocab_size", self.vocab_size, 3)

    @property
    def separator(self) -> int:
        return self.vocab_size - 1

    @property
    def seq_len(self) -> int:
        return 2 * self.length

    @property
    def chance_accuracy(self) -> float:
        """Uniform guessing over the number ids: 1 / (vocab_size - 1)."""
        return 1.0 / (self.vocab_size - 1)

    def batch(self, key: Array, batch_size: int, split: str = "train") -> Batch:
        """`batch_size` independent examples (`split` as in `AssociativeRecall.batch`)."""
        _check_batch_args(batch_size, split)
        return self._make_batch(key, batch_size)

    @_compiled_batch
    def _make_batch(self, key: Array, batch_size: int) -> Batch:
        x = jax.random.randint(key, (batch_size, self.length), 0, self.separator, jnp.int32)
        sep = jnp.full((batch_size, 1), self.separator, jnp.int32)
        full = jnp.concatenate([x, sep, jnp.sort(x, axis=-1)], axis=-1)
        scored = jnp.arange(self.seq_len) >= self.length
        weights = jnp.broadcast_to(scored.astype(jnp.float32)[None, :], (batch_size, self.seq_len))
        return Batch(full[:, :-1], full[:, 1:], weights)


# --------------------------------------------------------------------------
# Character-level corpus

# Modules present as single files in the standard library of every CPython 3.10+.
DEFAULT_STDLIB_FILES = (
    "abc.py",
    "argparse.py",
    "bisect.py",
    "calendar.py",
    "contextlib.py",
    "copy.py",
    "dataclasses.py",
    "difflib.py",
    "enum.py",
    "fractions.py",
    "functools.py",
    "heapq.py",
    "inspect.py",
    "random.py",
    "shutil.py",
    "statistics.py",
    "string.py",
    "textwrap.py",
    "typing.py",
    "weakref.py",
)

UNKNOWN_ID = 0
UNKNOWN_CHAR = "\ufffd"


def default_corpus_text() -> str:
    """The default corpus: the sources of `DEFAULT_STDLIB_FILES`, in that
    (sorted) order, from this Python's standard library. Files missing from an
    installation are skipped; the text is the same on every machine with the
    same Python version."""
    stdlib = sysconfig.get_paths()["stdlib"]
    parts = []
    for name in DEFAULT_STDLIB_FILES:
        path = os.path.join(stdlib, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
    if not parts:
        raise FileNotFoundError(
            f"no default corpus: none of {DEFAULT_STDLIB_FILES} found in {stdlib}; pass path= a text file"
        )
    return "".join(parts)


def _read_text(path: Optional[str]) -> str:
    if path is None:
        return default_corpus_text()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"path: no such text file: {path!r}")
    with open(path, encoding="utf-8") as f:
        return f.read()


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


@dataclasses.dataclass(frozen=True)
class CharCorpus:
    """Character-level language modelling over a UTF-8 text.

    The text is `path`, or by default `default_corpus_text()`, cut to its
    first `max_chars` characters. Vocabulary: id 0 = unknown character, ids
    1.. = the sorted set of characters of the text. Split, deterministic: the
    first `round((1 - val_fraction) * n)` characters are the training text, the
    rest the validation text; a batch is `batch_size` random crops of
    `seq_len + 1` characters from one split (inputs = crop[:-1],
    targets = crop[1:], every position scored).

    Args:
      path: a UTF-8 text file, or None for the default corpus.
      seq_len: T, characters per example.
      val_fraction: fraction of the text held out, in (0, 1).
      max_chars: use at most this many characters of the text.
    """

    path: Optional[str] = None
    seq_len: int = 64
    val_fraction: float = 0.1
    max_chars: int = 1_000_000
    chars: tuple = dataclasses.field(init=False, repr=False, compare=False)
    _splits: dict = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        checks.integer("seq_len", self.seq_len, 1)
        checks.integer("max_chars", self.max_chars, 2)
        if not 0.0 < float(self.val_fraction) < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        text = _read_text(self.path)[: self.max_chars]
        if not text:
            raise ValueError(f"path: the text file {self.path!r} is empty")
        chars = np.unique(_codepoints(text))
        object.__setattr__(self, "chars", tuple(chr(c) for c in chars))
        ids = self.encode(text)
        num_train = int(round((1.0 - float(self.val_fraction)) * len(ids)))
        splits = {"train": ids[:num_train], "val": ids[num_train:]}
        for split, part in splits.items():
            if len(part) < self.seq_len + 1:
                raise ValueError(
                    f"the {split} split of {self.path or 'the default corpus'} has {len(part)} characters; "
                    f"it needs at least seq_len + 1 = {self.seq_len + 1} (a longer text, a smaller "
                    f"seq_len, or another val_fraction)"
                )
        object.__setattr__(
            self, "_splits", {k: jnp.asarray(v, jnp.int32) for k, v in splits.items()}
        )

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 1

    @property
    def chance_accuracy(self) -> float:
        """Uniform guessing over the characters: 1 / vocab_size."""
        return 1.0 / self.vocab_size

    def encode(self, text: str) -> np.ndarray:
        """Ids `[len(text)] int32`; characters outside the vocabulary map to 0."""
        table = np.asarray([ord(c) for c in self.chars], np.uint32)
        points = _codepoints(text)
        where = np.minimum(np.searchsorted(table, points), len(table) - 1)
        known = table[where] == points
        return np.where(known, where + 1, UNKNOWN_ID).astype(np.int32)

    def decode(self, ids) -> str:
        """Text of ids `[n]`; id 0 decodes to U+FFFD."""
        lookup = (UNKNOWN_CHAR,) + self.chars
        return "".join(lookup[int(i)] for i in np.asarray(ids).reshape(-1))

    def split_ids(self, split: str) -> Array:
        """The encoded text of one split, `[n_split] int32`."""
        _check_batch_args(1, split)
        return self._splits[split]

    def batch(self, key: Array, batch_size: int, split: str = "train") -> Batch:
        """`batch_size` random crops of one split (uniform start positions)."""
        _check_batch_args(batch_size, split)
        ids = self._splits[split]
        starts = jax.random.randint(key, (batch_size,), 0, ids.shape[0] - self.seq_len, jnp.int32)
        crops = ids[starts[:, None] + jnp.arange(self.seq_len + 1, dtype=jnp.int32)[None, :]]
        weights = jnp.ones((batch_size, self.seq_len), jnp.float32)
        return Batch(crops[:, :-1], crops[:, 1:], weights)


# --------------------------------------------------------------------------
# Factory

TASKS = {"associative_recall": AssociativeRecall, "sorting": Sorting, "char_lm": CharCorpus}


def make_task(name: str, **kwargs):
    """A task by name ('associative_recall', 'sorting', 'char_lm') with its fields as kwargs."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid names: {sorted(TASKS)}")
    cls = TASKS[name]
    valid = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ValueError(f"unknown argument(s) {unknown} for task {name!r}; valid: {valid}")
    return cls(**kwargs)
