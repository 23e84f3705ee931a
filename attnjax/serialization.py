"""JSON forms of the values experiments record: nested dicts and lists of arrays and NumPy scalars.

`to_json` makes a JSON-safe copy (arrays to lists, NumPy scalars to Python
numbers, NaN and inf to the strings 'nan', 'inf', '-inf'); `json_form` is a
value exactly as it reads back from a JSON file. Used by the trainer's
checkpoints (rows saved beside the state) and by the studies' run records.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


def to_json(value: Any) -> Any:
    """JSON-safe copy: arrays to lists, NumPy scalars to Python, NaN/inf to strings."""
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return to_json(np.asarray(value).tolist())
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def dumps(value: Any) -> str:
    """`value` as sorted-key JSON text (see `to_json`)."""
    return json.dumps(to_json(value), sort_keys=True)


def json_form(value: Any) -> Any:
    """`value` as it reads back from a JSON file (lists for tuples and arrays, 'nan' for NaN)."""
    return json.loads(dumps(value))
