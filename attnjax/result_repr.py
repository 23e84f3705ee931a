"""A compact `repr` for the library's result tuples: each array as its dtype and shape.

`RankReport(residual_ratio=float32[4, 16], stable_rank=float32[4, 16], ...)`
instead of every entry of every array; a concrete 0-d array or a Python number
shows its value. Result classes set `__repr__ = compact_repr`.
"""

from __future__ import annotations

import jax
import numpy as np


def _field(value) -> str:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return repr(value)
    if shape == () and not isinstance(value, jax.core.Tracer):
        return repr(np.asarray(value).item())
    return f"{np.dtype(dtype).name}[{', '.join(map(str, shape))}]"


def compact_repr(result) -> str:
    """`Name(field=dtype[shape], ...)` of a NamedTuple of arrays (a concrete scalar field shows its value)."""
    fields = ", ".join(f"{name}={_field(value)}" for name, value in zip(result._fields, result))
    return f"{type(result).__name__}({fields})"
