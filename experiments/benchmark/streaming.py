"""Benchmark section 'streaming': attention statistics without the T x T matrix.

Config: `configs/benchmark.py`, `streaming`. Batch 1, float32, causal.

* Time: `attnjax.analysis.attention_statistics` (lse, entropy, max weight,
  argmax, sink, window mass and mean distance per row, chunked over keys) at
  `length` with `heads` query and `kv_heads` key heads of `head_dim` (one
  SmolLM2-135M layer: T = 8192, H = 9, K = 3, D = 64) against the forward
  pass of the same attention (`attnjax.dot_product_attention`), timed
  alternately in one run. Target: statistics / forward <= `target`. Both run
  under XLA's memory-ordered CPU scheduler, which `experiments` sets (see its
  `__init__`): the forward is faster under it than under XLA's default
  (0.8-1.0 s against 1.1 s on a 2-core CPU), the statistics pass about as
  fast, so the ratio here (0.9-1.0) is higher than a library user's (0.8;
  both measured in `experiments/benchmark/NOTES.md`).
* Memory: compiled temporary bytes of the statistics program at each of
  `memory_lengths` (H = `memory_heads`), and their growth per doubling of T
  (target <= `memory_target`; linear in T at a fixed chunk), beside the
  dense forward's temporaries and the size of one `[H, T, T]` float32 weight
  matrix, which grow 4x. Lowered and compiled only, never run.
* Spectra: the leading singular values of the same maps at length, against a
  dense SVD where it fits (`experiments/benchmark/spectra.py`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import attnjax
from attnjax.analysis import attention_statistics
from experiments.benchmark.spectra import spectra_rows
from experiments.benchmark.util import interleaved_median_times, ratio_row, temp_bytes

SECTION = "streaming"
MIB = 2**20


def _statistics_fn(cfg):
    def statistics(q, k):
        return attention_statistics(
            q,
            k,
            is_causal=True,
            sink_positions=tuple(cfg.sink_positions),
            window=cfg.window,
            chunk_size=cfg.chunk_size,
            query_chunk_size=cfg.query_chunk_size,
        )

    return statistics


def _forward(q, k, v):
    return attnjax.dot_product_attention(q, k, v, is_causal=True)


def _shape(length, heads, kv_heads, head_dim) -> str:
    return f"B=1 T={length} H={heads} K={kv_heads} D={head_dim} float32 causal"


def time_rows(cfg) -> list[dict]:
    """Statistics pass against the forward pass at `cfg.length`, alternately timed."""
    keys = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(keys[0], (1, cfg.length, cfg.heads, cfg.head_dim), jnp.float32)
    k, v = (
        jax.random.normal(key, (1, cfg.length, cfg.kv_heads, cfg.head_dim), jnp.float32)
        for key in keys[1:]
    )
    statistics, forward = jax.jit(_statistics_fn(cfg)), jax.jit(_forward)
    times = interleaved_median_times(
        {"stats": lambda: statistics(q, k), "fwd": lambda: forward(q, k, v)}, repeats=cfg.repeats
    )
    shape = _shape(cfg.length, cfg.heads, cfg.kv_heads, cfg.head_dim)
    reference = "attnjax.dot_product_attention, fwd"
    return [
        {
            "section": SECTION,
            "name": reference,
            "shape": shape,
            "seconds": times["fwd"],
            "note": "reference",
        },
        ratio_row(
            SECTION,
            "attention_statistics (chunked, online)",
            shape,
            times["stats"],
            times["fwd"],
            reference,
            f"<= {cfg.target:g}",
            seconds=times["stats"],
            note=f"key chunk {cfg.chunk_size}, query block {cfg.query_chunk_size}; timed alternately "
            "with the reference",
        ),
    ]


def _compiled_temp(fn, *shapes) -> int | None:
    specs = [jax.ShapeDtypeStruct(shape, jnp.float32) for shape in shapes]
    return temp_bytes(jax.jit(fn).lower(*specs).compile())


def memory_rows(cfg) -> list[dict]:
    """Compiled temporary bytes of the statistics and dense forward programs over T, growth per doubling."""
    heads, dim = cfg.memory_heads, cfg.head_dim
    statistics = _statistics_fn(cfg)
    rows, previous = [], None
    for length in cfg.memory_lengths:
        q = (1, length, heads, dim)
        stats, dense = _compiled_temp(statistics, q, q), _compiled_temp(_forward, q, q, q)
        weights_mb = heads * length * length * 4 / MIB
        shape = _shape(length, heads, heads, dim)
        note = f"dense fwd temp {dense / MIB:.4g} MiB; one [H, T, T] float32 array {weights_mb:.4g} MiB"
        rows.append(
            {
                "section": SECTION,
                "name": "attention_statistics temp memory",
                "shape": shape,
                "temp_mb": stats / MIB,
                "note": note,
                "length": length,
                "dense_temp_mb": dense / MIB,
            }
        )
        if previous is not None:
            growth = ratio_row(
                SECTION,
                f"temp memory growth T={previous[0]} -> {length}",
                shape,
                stats,
                previous[1],
                f"attention_statistics temp memory, T={previous[0]}",
                f"<= {cfg.memory_target:g}",
                note=f"dense fwd temp: {dense / previous[2]:.2f}x; [H, T, T] array: 4x",
            )
            rows.append(growth)
        previous = (length, stats, dense)
    return rows


def run(cfg) -> list[dict]:
    return time_rows(cfg) + memory_rows(cfg) + spectra_rows(cfg)
