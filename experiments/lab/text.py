"""The studies' long text: English docstrings of standard-library modules, assembled offline, deterministic.

The text depends only on the Python version (the same on every machine with
that version) and needs no download.
"""

from __future__ import annotations

import importlib
import inspect
import warnings

import numpy as np

DEFAULT_MODULES = (
    "argparse",
    "ast",
    "asyncio",
    "bz2",
    "calendar",
    "codecs",
    "collections",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "doctest",
    "email.message",
    "email.utils",
    "enum",
    "fractions",
    "ftplib",
    "functools",
    "gettext",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "html.parser",
    "http.client",
    "imaplib",
    "inspect",
    "io",
    "itertools",
    "json",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "math",
    "mimetypes",
    "multiprocessing",
    "numbers",
    "operator",
    "optparse",
    "os",
    "pathlib",
    "pdb",
    "pickle",
    "platform",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "selectors",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "traceback",
    "types",
    "typing",
    "unittest",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "xml.etree.ElementTree",
    "zipfile",
)


def long_text(modules=DEFAULT_MODULES) -> str:
    """The module docstring, then the docstrings of the public members defined in the module (sorted by name),
    of each of `modules` in order, cleaned by `inspect.getdoc` and joined by blank lines."""
    if isinstance(modules, str):
        raise TypeError("modules must be a sequence of module names, got one str")
    parts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in modules:
            module = importlib.import_module(name)
            if module.__doc__:
                parts.append(inspect.cleandoc(module.__doc__))
            for key in sorted(vars(module)):
                obj = vars(module)[key]
                if key.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                    continue
                doc = inspect.getdoc(obj)
                if doc:
                    parts.append(doc)
    return "\n\n".join(parts)


def segment(
    tokens: np.ndarray, index: int, length: int, *, stride: int, seed: int = 0
) -> np.ndarray:
    """Tokens `[length]` of segment `index`: from token `(seed + index) * stride`; raises if the text is short."""
    start = (seed + index) * stride
    if start + length > len(tokens):
        raise ValueError(
            f"segment {index} needs tokens [{start}, {start + length}) but the text has "
            f"{len(tokens)} tokens; use fewer or shorter segments, or more modules"
        )
    return np.asarray(tokens[start : start + length])
