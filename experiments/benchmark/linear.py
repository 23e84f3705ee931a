"""Benchmark section 'linear': causal linear attention against exact attention over T.

Config: `configs/benchmark.py`, `linear`. Batch 1, FAVOR+ features.

* Sweep over `lengths`: forward time and compiled temp memory of chunked
  causal linear attention, of the per-position recurrence
  (`linear_attention_step` under `lax.scan`) and of exact causal attention
  (`attnjax.dot_product_attention`), the last only while its float32 logits
  fit in `exact_max_gib` (no limit on a GPU, where cuDNN never forms them).
  The crossover row names the shortest T at which linear is faster; the
  sweep is plotted as `plots/linear.png`.
* Targets, ratios of rows of the same run: linear >= `target_speedup`x
  faster than exact at `short`; time and temp memory of linear (forward and
  forward+backward) grow <= `target_growth`x from `short` to `long`;
  forward+backward temp memory of the chunked form <= `target_vs_scan_memory`
  of the recurrence differentiated by autodiff, which saves an [M, Dv] state
  per position.
* GPU only: forward+backward in bf16 at `gpu_length` against cuDNN exact
  causal attention; elsewhere "not measured (no GPU)".

On a GPU the sweep runs in bf16, elsewhere in float32.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp

import attnjax
from attnjax import features, linear
from experiments.benchmark.util import median_time, not_measured, ratio_row, temp_bytes

SECTION = "linear"
CHUNKED, RECURRENT, EXACT = (
    "linear causal (chunked)",
    "linear causal (recurrent scan)",
    "exact causal softmax",
)

# On a GPU the scan over chunks is bound by per-step launch latency, not
# FLOPs: larger chunks mean 4x fewer sequential steps for cheap extra
# intra-chunk work.
GPU_CHUNK_SIZE = 256


# --------------------------------------------------------------------------
# Functions under test (the projection is an argument, not a constant)


def _chunked_fwd(q, k, v, w, *, chunk_size=linear.DEFAULT_CHUNK_SIZE):
    return linear.linear_attention(
        q, k, v, feature_map=features.favor_plus(w), is_causal=True, chunk_size=chunk_size
    )


def _exact_fwd(q, k, v, w):
    del w
    return attnjax.dot_product_attention(q, k, v, is_causal=True)


def _cudnn_fwd(q, k, v, w):
    del w
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")


def _recurrent_fwd(q, k, v, w):
    """Per-position recurrence: `linear_attention_step` scanned over T, `[B, T, H, D]`."""
    phi = features.favor_plus(w)
    state = linear.init_state(q.shape[:1], k.shape[-2], w.shape[0], v.shape[-1])
    step = functools.partial(linear.linear_attention_step, feature_map=phi)
    _, out = jax.lax.scan(
        lambda s, x: step(s, *x), state, tuple(jnp.swapaxes(x, 0, 1) for x in (q, k, v))
    )
    return jnp.swapaxes(out, 0, 1)


def _fwd_bwd(fn: Callable) -> Callable:
    """Gradient of sum(out) with respect to q, k and v (forward + backward)."""
    return jax.grad(
        lambda q, k, v, w: jnp.sum(fn(q, k, v, w).astype(jnp.float32)), argnums=(0, 1, 2)
    )


# --------------------------------------------------------------------------
# Measurements


def _inputs(seq_len, heads, dim, num_features, dtype):
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v = (
        jax.random.normal(key, (1, seq_len, heads, dim), jnp.float32).astype(dtype)
        for key in keys[:3]
    )
    w = features.orthogonal_random_matrix(keys[3], num_features, dim)
    return q, k, v, w


def _shape(seq_len, heads, dim, num_features=None, dtype=jnp.float32):
    m = "" if num_features is None else f" M={num_features}"
    return f"B=1 T={seq_len} H={heads} D={dim}{m} {jnp.dtype(dtype).name}"


def _mb(n: Optional[int]) -> Optional[float]:
    return None if n is None else n / 2**20


def _measure(name, fn, args, shape, *, repeats, timed=True, **extra) -> dict:
    """Temp memory of `jax.jit(fn)` compiled once for `args`, and the median time of that executable."""
    compiled = jax.jit(fn).lower(*args).compile()
    row = {
        "section": SECTION,
        "name": name,
        "shape": shape,
        "temp_mb": _mb(temp_bytes(compiled)),
        **extra,
    }
    if timed:
        row["seconds"] = median_time(compiled, *args, repeats=repeats)
    else:
        row["note"] = "compiled only (memory analysis)"
    return row


def _exact_gib(cfg, length: int) -> float:
    return cfg.heads * length * length * 4 / 2**30


def sweep_rows(cfg, dtype) -> list[dict]:
    """Forward rows of chunked, recurrent and (where it fits) exact attention at every length."""
    gpu = jax.default_backend() == "gpu"
    chunked = functools.partial(_chunked_fwd, chunk_size=GPU_CHUNK_SIZE) if gpu else _chunked_fwd
    rows = []
    for length in sorted(cfg.lengths):
        args = _inputs(length, cfg.heads, cfg.head_dim, cfg.num_features, dtype)
        shape = _shape(length, cfg.heads, cfg.head_dim, cfg.num_features, dtype)
        sweep = dict(length=length, repeats=cfg.repeats)
        print(f"[benchmark] linear sweep T={length}", flush=True)
        rows.append(_measure(f"{CHUNKED}, fwd", chunked, args, shape, series=CHUNKED, **sweep))
        rows.append(
            _measure(f"{RECURRENT}, fwd", _recurrent_fwd, args, shape, series=RECURRENT, **sweep)
        )
        exact_shape = _shape(length, cfg.heads, cfg.head_dim, dtype=dtype)
        if gpu or _exact_gib(cfg, length) <= cfg.exact_max_gib:
            rows.append(
                _measure(f"{EXACT}, fwd", _exact_fwd, args, exact_shape, series=EXACT, **sweep)
            )
        else:
            rows.append(
                not_measured(
                    SECTION,
                    f"{EXACT}, fwd",
                    exact_shape,
                    f"logits {_exact_gib(cfg, length):.0f} GiB > exact_max_gib",
                )
            )
    return rows


def crossover_row(rows: list[dict]) -> dict:
    """The shortest swept T at which chunked linear attention beats exact attention."""
    times = {(r["series"], r["length"]): r["seconds"] for r in rows if r.get("seconds") is not None}
    lengths = sorted({length for series, length in times if series == EXACT})
    faster = [t for t in lengths if times[(CHUNKED, t)] < times[(EXACT, t)]]
    row = {
        "section": SECTION,
        "name": "crossover: shortest T where linear beats exact, fwd",
        "shape": _shape_of(rows),
        "crossover_length": faster[0] if faster else None,
    }
    if not faster:
        row["note"] = (
            f"exact faster at every measured T (up to {lengths[-1]})"
            if lengths
            else "no exact rows"
        )
    elif faster[0] == lengths[0]:
        row["note"] = f"T <= {faster[0]} (linear faster at every measured T)"
    else:
        row["note"] = (
            f"T = {faster[0]} (exact faster at T = {max(t for t in lengths if t < faster[0])})"
        )
    return row


def _shape_of(rows) -> str:
    r = next(r for r in rows if r.get("series") == CHUNKED)
    return r["shape"].replace(f"T={r['length']} ", "T=sweep ")


def _row_at(rows, series, length):
    return next(r for r in rows if r.get("series") == series and r.get("length") == length)


def target_rows(cfg, sweep: list[dict], dtype) -> list[dict]:
    """Speedup over exact at `short`; growth from `short` to `long`; memory against the recurrence."""
    short, long_ = cfg.short, cfg.long
    fwd_short, fwd_long = _row_at(sweep, CHUNKED, short), _row_at(sweep, CHUNKED, long_)
    exact = _row_at(sweep, EXACT, short)
    extra = []
    for length in (short, long_):
        args = _inputs(length, cfg.heads, cfg.head_dim, cfg.num_features, dtype)
        shape = _shape(length, cfg.heads, cfg.head_dim, cfg.num_features, dtype)
        extra.append(
            _measure(
                f"{CHUNKED}, fwd+bwd", _fwd_bwd(_chunked_fwd), args, shape, repeats=cfg.repeats
            )
        )
        if length == short:
            extra.append(
                _measure(
                    f"{RECURRENT}, fwd+bwd",
                    _fwd_bwd(_recurrent_fwd),
                    args,
                    shape,
                    repeats=cfg.repeats,
                    timed=False,
                )
            )
    fb_short, scan, fb_long = extra
    doubling = f"T {short} -> {long_}"

    def at(row):
        return f"{row['name']} @ T={short}"

    growth = f"<= {cfg.target_growth:g}"
    return extra + [
        ratio_row(
            SECTION,
            "speedup of linear over exact, fwd",
            fwd_short["shape"],
            exact["seconds"],
            fwd_short["seconds"],
            exact["name"],
            f">= {cfg.target_speedup:g}",
            note="exact s / linear s",
        ),
        ratio_row(
            SECTION,
            "linear fwd time growth",
            doubling,
            fwd_long["seconds"],
            fwd_short["seconds"],
            at(fwd_short),
            growth,
        ),
        ratio_row(
            SECTION,
            "linear fwd temp growth",
            doubling,
            fwd_long["temp_mb"],
            fwd_short["temp_mb"],
            at(fwd_short),
            growth,
        ),
        ratio_row(
            SECTION,
            "linear fwd+bwd time growth",
            doubling,
            fb_long["seconds"],
            fb_short["seconds"],
            at(fb_short),
            growth,
        ),
        ratio_row(
            SECTION,
            "linear fwd+bwd temp growth",
            doubling,
            fb_long["temp_mb"],
            fb_short["temp_mb"],
            at(fb_short),
            growth,
        ),
        ratio_row(
            SECTION,
            "linear fwd+bwd temp vs recurrence",
            fb_short["shape"],
            fb_short["temp_mb"],
            scan["temp_mb"],
            scan["name"],
            f"<= {cfg.target_vs_scan_memory:g}",
            note="chunked temp / recurrent temp",
        ),
    ]


def gpu_rows(cfg) -> list[dict]:
    shape = _shape(
        cfg.gpu_length, cfg.gpu_heads, cfg.gpu_head_dim, cfg.gpu_num_features, jnp.bfloat16
    )
    name, cudnn_name = "speedup of linear over cuDNN exact, fwd+bwd", "cuDNN exact causal, fwd+bwd"
    if jax.default_backend() != "gpu":
        return [not_measured(SECTION, name, shape, "no GPU", ">= 1")]
    args = _inputs(
        cfg.gpu_length, cfg.gpu_heads, cfg.gpu_head_dim, cfg.gpu_num_features, jnp.bfloat16
    )
    cudnn = _measure(cudnn_name, _fwd_bwd(_cudnn_fwd), args, shape, repeats=cfg.repeats)
    chunked = functools.partial(_chunked_fwd, chunk_size=GPU_CHUNK_SIZE)
    lin = _measure(
        f"{CHUNKED}, fwd+bwd",
        _fwd_bwd(chunked),
        args,
        shape,
        repeats=cfg.repeats,
        note=f"chunk_size={GPU_CHUNK_SIZE}",
    )
    return [
        cudnn,
        lin,
        ratio_row(
            SECTION,
            name,
            shape,
            cudnn["seconds"],
            lin["seconds"],
            cudnn_name,
            ">= 1",
            note="cuDNN s / linear s",
        ),
    ]


def run(cfg) -> list[dict]:
    """All rows of the section (see the module docstring)."""
    dtype = jnp.bfloat16 if jax.default_backend() == "gpu" else jnp.float32
    sweep = sweep_rows(cfg, dtype)
    return sweep + [crossover_row(sweep)] + target_rows(cfg, sweep, dtype) + gpu_rows(cfg)


def figure(rows: list[dict]):
    """Log-log forward time against T for the three forms (a Figure), or None without sweep rows."""
    sweep = [
        r for r in rows if r.get("section") == SECTION and r.get("series") and r.get("seconds")
    ]
    if not sweep:
        return None
    from attnjax import plotting

    fig = plotting.figure(6, 4)
    ax = fig.add_subplot()
    for series, marker in ((EXACT, "o"), (CHUNKED, "s"), (RECURRENT, "^")):
        points = sorted((r["length"], r["seconds"]) for r in sweep if r["series"] == series)
        if points:
            ax.loglog(*zip(*points), marker=marker, label=series, base=2)
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("forward seconds (median)")
    ax.set_title(f"Causal attention, {_shape_of(sweep)}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig
