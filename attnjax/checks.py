"""Argument checks shared by the library's functions, modules and configs.

Each raises a `ValueError` (a bad value) or `TypeError` (a bad type) whose
message names the argument and what it got, before any compute.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

_INTS = (int, np.integer)
_NUMBERS = (int, float, np.number)


def positive_int(name: str, value) -> None:
    """`value` is an int >= 1 (a bool is not)."""
    if not isinstance(value, _INTS) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def divisible(name: str, value: int, by_name: str, by: int) -> None:
    """`by` divides `value`."""
    if value % by:
        raise ValueError(f"{name} ({value}) must be divisible by {by_name} ({by})")


def positive_number(name: str, value) -> None:
    """`value` is a number > 0 (not a bool, not NaN)."""
    if not isinstance(value, _NUMBERS) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def temperature(value) -> None:
    """A softmax temperature: a positive number, or a scalar array (possibly traced, so its value is unchecked)."""
    if isinstance(value, _NUMBERS):
        positive_number("temperature", value)
    elif jnp.ndim(value) != 0:
        raise ValueError(f"temperature must be a scalar, got shape {jnp.shape(value)}")


def rate(name: str, value) -> None:
    """A dropout rate: a number in [0, 1)."""
    if not isinstance(value, _NUMBERS) or isinstance(value, bool) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")


def boolean(name: str, value, *, optional: bool = False) -> None:
    """`value` is a bool (or None when `optional`)."""
    if not (isinstance(value, bool) or (optional and value is None)):
        raise TypeError(f"{name} must be a bool{' or None' if optional else ''}, got {value!r}")


def function(name: str, value, *, optional: bool = False) -> None:
    """`value` is callable (or None when `optional`)."""
    if not (callable(value) or (optional and value is None)):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {value!r:.60}")


def integer(name: str, value, minimum: int) -> None:
    """`value` is an int (not a bool; TypeError) >= `minimum` (ValueError)."""
    if not isinstance(value, _INTS) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def choice(name: str, value, choices) -> None:
    """`value` is one of `choices` (a tuple, or the keys of a dict)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def nonempty_lengths(query, key) -> None:
    """`query [..., T, H, D]` and `key [..., S, K, D]` hold at least one position each (T, S >= 1).

    Softmax over zero keys has no value and zero queries no rows to fill, so
    attention is undefined there; this says which length is zero before any compute.
    """
    for name, x, length in (("query", query, "T"), ("key", key, "S")):
        if x.shape[-3] == 0:
            raise ValueError(f"{name} must hold at least one position: its length {length} (axis -3) is 0; "
                             f"got query.shape={tuple(query.shape)}, key.shape={tuple(key.shape)}")
