"""Shared helpers for benchmark sections: timing, memory, and rows with ratios and targets.

Every figure a section reports is a ratio against a reference measured in the
same run: absolute times on shared machines are noisy, ratios less so.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Optional, Sequence

import jax


def median_time(fn: Callable[..., Any], *args, repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time in seconds of `fn(*args)` after `warmup` calls.

    `fn` should already be jitted; every call is waited on with
    `jax.block_until_ready`, so asynchronous dispatch is not mistaken for speed.
    """
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_median_times(
    fns: dict[str, Callable[[], Any]], *, repeats: int = 7, warmup: int = 1
) -> dict[str, float]:
    """Median wall time of each zero-argument callable, timed in alternation.

    Alternating the candidates (a, b, a, b, ...) exposes them to the same
    machine load, so their ratio is steadier than timing one after the other.
    """
    for fn in fns.values():
        for _ in range(warmup):
            jax.block_until_ready(fn())
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def compile_seconds(fn: Callable[..., Any], *args) -> float:
    """Seconds to trace, lower and compile `jax.jit(fn)` for `args` (no execution).

    JAX's in-memory compilation caches are cleared first, so a repeated
    measurement is a real compile and not a cache hit.
    """
    jax.clear_caches()
    start = time.perf_counter()
    jax.jit(fn).lower(*args).compile()
    return time.perf_counter() - start


def temp_bytes(compiled) -> int | None:
    """Temporary buffer bytes of a compiled executable (`jax.jit(f).lower(...).compile()`), or None if unknown."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    return int(analysis.temp_size_in_bytes)


def drop_targets(rows: Sequence[dict]) -> list[dict]:
    """Smoke runs use sizes too small for the targets to mean anything."""
    return [{k: v for k, v in row.items() if k not in ("target", "ok")} for row in rows]


def meets(ratio: Optional[float], target: Optional[str]) -> Optional[bool]:
    """Whether `ratio` meets `target` ('>= x' or '<= x'); None when either is missing."""
    if ratio is None or target is None:
        return None
    op, bound = target.split()
    if op not in (">=", "<="):
        raise ValueError(f"target must be '>= x' or '<= x', got {target!r}")
    return ratio >= float(bound) if op == ">=" else ratio <= float(bound)


def ratio_row(
    section: str,
    name: str,
    shape: str,
    value,
    ref_value,
    reference: str,
    target: Optional[str] = None,
    **extra,
) -> dict:
    """A row comparing `value` with `ref_value` measured in the same run: ratio = value / ref_value."""
    ratio = None if value is None or not ref_value else value / ref_value
    row = {
        "section": section,
        "name": name,
        "shape": shape,
        "reference": reference,
        "ratio": ratio,
        **extra,
    }
    if target is not None:
        row.update(target=target, ok=meets(ratio, target))
    return row


def not_measured(
    section: str, name: str, shape: str, why: str, target: Optional[str] = None
) -> dict:
    """A placeholder row for a measurement this machine cannot make (e.g. no GPU)."""
    row = {"section": section, "name": name, "shape": shape, "note": f"not measured ({why})"}
    if target is not None:
        row.update(target=target, ok=None)
    return row
