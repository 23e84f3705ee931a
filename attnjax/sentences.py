"""Sentences of English prose, for measuring pretrained models on real text.

`docstring_sentences(...)` takes them from the docstrings of standard-library
modules (offline, the same on every machine with the same Python version);
`split_sentences(text, ...)` cuts any text into prose sentences. Both are also
importable from `attnjax.tasks`.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from typing import Optional

from attnjax import checks

# Pure-Python standard-library modules with prose docstrings (CPython 3.10+).
DEFAULT_DOCSTRING_MODULES = (
    "argparse",
    "bisect",
    "calendar",
    "collections",
    "contextlib",
    "csv",
    "dataclasses",
    "difflib",
    "email.message",
    "fractions",
    "functools",
    "heapq",
    "inspect",
    "json",
    "logging",
    "pathlib",
    "pickle",
    "random",
    "shutil",
    "statistics",
    "string",
    "tarfile",
    "textwrap",
    "threading",
    "typing",
    "unittest",
    "urllib.parse",
    "weakref",
    "zipfile",
)
# A sentence ends at . ! or ? followed by whitespace and a capital letter.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
# Prose: a capital first, then letters, digits, spaces and , ; : ' - only, then . ! or ?
# (drops code, doctests, lists, dotted names and abbreviations such as "e.g.").
_PROSE = re.compile(r"[A-Z][A-Za-z0-9 ,;:'-]*[A-Za-z0-9][.!?]")


def _check_word_range(min_words, max_words) -> None:
    checks.integer("min_words", min_words, 1)
    checks.integer("max_words", max_words, 1)
    if max_words < min_words:
        raise ValueError(f"max_words ({max_words}) must be >= min_words ({min_words})")


def split_sentences(text: str, *, min_words: int = 6, max_words: int = 30) -> list[str]:
    """The prose sentences of `text` with `min_words` to `max_words` words, in order.

    Paragraphs (separated by blank lines) have their whitespace joined and
    are split after `.`, `!` or `?` followed by a capital letter; a sentence
    is kept if it is prose (see `_PROSE`) and its word count is in range.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    _check_word_range(min_words, max_words)
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        for sentence in _SENTENCE_BREAK.split(" ".join(paragraph.split())):
            if _PROSE.fullmatch(sentence) and min_words <= len(sentence.split()) <= max_words:
                out.append(sentence)
    return out


def _documented(module) -> list:
    """The module, then its classes and functions (by name), each class followed by its own methods."""
    objects = [module]
    for _, obj in sorted(vars(module).items()):
        if getattr(obj, "__module__", None) != module.__name__ or not (
            inspect.isclass(obj) or inspect.isfunction(obj)
        ):
            continue
        objects.append(obj)
        if inspect.isclass(obj):
            objects += [
                member for _, member in sorted(vars(obj).items()) if inspect.isfunction(member)
            ]
    return objects


def docstring_sentences(
    modules=DEFAULT_DOCSTRING_MODULES,
    max_sentences: Optional[int] = None,
    min_words: int = 6,
    max_words: int = 30,
) -> list[str]:
    """English sentences from the docstrings of standard-library `modules`, deterministic.

    Each module's docstring, then those of its classes, functions and
    methods (sorted by name, only objects defined in the module), split by
    `split_sentences`; duplicates are dropped (first occurrence kept) and
    the list is cut to `max_sentences` (None: all). The text depends only on
    the Python version, so it is the same on every machine with that version
    and needs no download.
    """
    if isinstance(modules, str):
        raise TypeError("modules must be a sequence of module names, got one str")
    if max_sentences is not None:
        checks.integer("max_sentences", max_sentences, 1)
    _check_word_range(min_words, max_words)
    seen = {}
    with warnings.catch_warnings():  # reading deprecated members (typing.io, ...) warns
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in modules:
            for obj in _documented(importlib.import_module(name)):
                doc = obj.__doc__ if isinstance(getattr(obj, "__doc__", None), str) else ""
                for sentence in split_sentences(
                    inspect.cleandoc(doc), min_words=min_words, max_words=max_words
                ):
                    seen.setdefault(sentence, None)
    sentences = list(seen)
    return sentences if max_sentences is None else sentences[:max_sentences]
