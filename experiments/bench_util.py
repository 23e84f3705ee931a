"""Shared helpers for benchmark sections: timing, memory and table output.

Every figure a section reports is a ratio against a reference measured in the
same run: absolute times on shared machines are noisy, ratios less so.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

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


def interleaved_median_times(fns: dict[str, Callable[[], Any]], *, repeats: int = 7, warmup: int = 1) -> dict[str, float]:
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


def temp_bytes(fn: Callable[..., Any], *args) -> int | None:
    """Temporary buffer bytes of the compiled `jax.jit(fn)`, or None if unknown."""
    analysis = jax.jit(fn).lower(*args).compile().memory_analysis()
    if analysis is None:
        return None
    return int(analysis.temp_size_in_bytes)


def format_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Plain-text table of `rows` restricted to `columns` (missing cells blank)."""

    def cell(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return "" if value is None else str(value)

    body = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in body)) if body else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in body]
    return "\n".join(lines)


def drop_targets(rows: Sequence[dict]) -> list[dict]:
    """Quick (smoke) runs use sizes too small for the targets to mean anything."""
    return [{k: v for k, v in row.items() if k not in ("target", "ok")} for row in rows]
