"""Benchmark section 'linear': causal linear attention against exact attention.

Run: `python -m experiments.bench_linear` (add `--quick` for a seconds-long
smoke run). Every figure with a target is a ratio between rows of the same run:

* speed: causal linear attention (FAVOR+, M = 256) against exact causal
  softmax attention (`attnjax.dot_product_attention`, jitted) at T = 8192,
  H = 8, D = 64, forward: target >= 5x faster;
* scaling: time and compiled temp memory of linear attention when T doubles
  from 8192 to 16384, forward and forward+backward: target <= 2.5x;
* memory: forward+backward temp memory of the chunked form against a
  per-position `lax.scan` recurrence (`linear_attention_step`) differentiated
  by autodiff, which saves an [M, Dv] state per position: target <= 1/4;
* GPU only: forward+backward in bf16 at T = 32768, H = 16, D = 64, M = 128
  against cuDNN exact causal attention (`jax.nn.dot_product_attention`,
  implementation='cudnn'): target faster. Elsewhere these rows read
  "not measured (no GPU)".

Batch size 1 everywhere: exact causal attention at T = 8192, H = 8 already
materialises 2 GiB of float32 logits.
"""
from __future__ import annotations

import argparse
import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp

import attnjax
from attnjax import features, linear
from experiments.bench_util import drop_targets, format_table, median_time, temp_bytes

SECTION = "linear"
COLUMNS = ("section", "name", "shape", "seconds", "temp_mb", "reference", "ratio", "target", "ok", "note")


# --------------------------------------------------------------------------
# Functions under test (jitted; the projection is an argument, not a constant)


def _linear_fwd(q, k, v, w, *, chunk_size=linear.DEFAULT_CHUNK_SIZE):
    return linear.linear_attention(q, k, v, feature_map=features.favor_plus(w), is_causal=True, chunk_size=chunk_size)


# On a GPU the scan over chunks is bound by per-step launch latency, not
# FLOPs: larger chunks mean 4x fewer sequential steps for cheap extra
# intra-chunk work.
GPU_CHUNK_SIZE = 256


def _exact_fwd(q, k, v, w):
    del w
    return attnjax.dot_product_attention(q, k, v, is_causal=True)


def _cudnn_fwd(q, k, v, w):
    del w
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")


def _scan_fwd(q, k, v, w):
    """Per-position recurrence: `linear_attention_step` scanned over T, `[B, T, H, D]`."""
    phi = features.favor_plus(w)
    state = linear.init_state(q.shape[:1], k.shape[-2], w.shape[0], v.shape[-1])
    step = functools.partial(linear.linear_attention_step, feature_map=phi)
    _, out = jax.lax.scan(lambda s, x: step(s, *x), state, tuple(jnp.swapaxes(x, 0, 1) for x in (q, k, v)))
    return jnp.swapaxes(out, 0, 1)


def _fwd_bwd(fn: Callable) -> Callable:
    """Gradient of sum(out) with respect to q, k and v (forward + backward)."""
    return jax.grad(lambda q, k, v, w: jnp.sum(fn(q, k, v, w).astype(jnp.float32)), argnums=(0, 1, 2))


# --------------------------------------------------------------------------
# Measurements


def _inputs(seq_len, heads, dim, num_features, dtype):
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v = (jax.random.normal(key, (1, seq_len, heads, dim), jnp.float32).astype(dtype) for key in keys[:3])
    w = features.orthogonal_random_matrix(keys[3], num_features, dim)
    return q, k, v, w


def _shape(seq_len, heads, dim, num_features=None, dtype=jnp.float32):
    m = "" if num_features is None else f" M={num_features}"
    return f"B=1 T={seq_len} H={heads} D={dim}{m} {jnp.dtype(dtype).name}"


def _measure(name, fn, args, shape, *, timed=True, repeats=5):
    jitted = jax.jit(fn)
    row = {"section": SECTION, "name": name, "shape": shape}
    row["temp_mb"] = _mb(temp_bytes(fn, *args))
    row["seconds"] = median_time(jitted, *args, repeats=repeats) if timed else None
    if not timed:
        row["note"] = "compiled only (memory analysis)"
    return row


def _mb(n: Optional[int]) -> Optional[float]:
    return None if n is None else n / 2**20


def _compare(name, shape, value, ref_value, reference, target, note=""):
    """A ratio row: value / ref_value checked against `target` ('>= x' or '<= x')."""
    ratio = None if value is None or ref_value in (None, 0) else value / ref_value
    op, bound = target.split()
    ok = None if ratio is None else (ratio >= float(bound) if op == ">=" else ratio <= float(bound))
    return {"section": SECTION, "name": name, "shape": shape, "reference": reference,
            "ratio": ratio, "target": target, "ok": ok, "note": note}


def _cpu_rows(quick: bool) -> list[dict]:
    if quick:
        short, long_, heads, dim, m, exact_repeats = 256, 512, 2, 16, 32, 3
    else:
        short, long_, heads, dim, m, exact_repeats = 8192, 16384, 8, 64, 256, 3
    rows = []
    args = _inputs(short, heads, dim, m, jnp.float32)
    exact = _measure("exact causal softmax, fwd", _exact_fwd, args, _shape(short, heads, dim), repeats=exact_repeats)
    fwd = _measure("linear causal, fwd", _linear_fwd, args, _shape(short, heads, dim, m))
    fwd_bwd = _measure("linear causal, fwd+bwd", _fwd_bwd(_linear_fwd), args, _shape(short, heads, dim, m))
    scan = _measure("per-position scan recurrence, fwd+bwd", _fwd_bwd(_scan_fwd), args,
                    _shape(short, heads, dim, m), timed=False)
    exact_fb = _measure("exact causal softmax, fwd+bwd", _fwd_bwd(_exact_fwd), args, _shape(short, heads, dim),
                        timed=False)
    del args
    args = _inputs(long_, heads, dim, m, jnp.float32)
    fwd_long = _measure("linear causal, fwd", _linear_fwd, args, _shape(long_, heads, dim, m))
    fwd_bwd_long = _measure("linear causal, fwd+bwd", _fwd_bwd(_linear_fwd), args, _shape(long_, heads, dim, m))
    del args
    rows += [exact, exact_fb, fwd, fwd_long, fwd_bwd, fwd_bwd_long, scan]
    doubling = f"T {short} -> {long_}"
    at_short = lambda row: f"{row['name']} @ T={short}"  # noqa: E731
    rows += [
        _compare("speedup of linear over exact, fwd", fwd["shape"], exact["seconds"], fwd["seconds"],
                 exact["name"], ">= 5", "exact seconds / linear seconds"),
        _compare("linear fwd time growth", doubling, fwd_long["seconds"], fwd["seconds"], at_short(fwd), "<= 2.5"),
        _compare("linear fwd temp growth", doubling, fwd_long["temp_mb"], fwd["temp_mb"], at_short(fwd), "<= 2.5"),
        _compare("linear fwd+bwd time growth", doubling, fwd_bwd_long["seconds"], fwd_bwd["seconds"],
                 at_short(fwd_bwd), "<= 2.5"),
        _compare("linear fwd+bwd temp growth", doubling, fwd_bwd_long["temp_mb"], fwd_bwd["temp_mb"],
                 at_short(fwd_bwd), "<= 2.5"),
        _compare("linear fwd+bwd temp vs scan recurrence", fwd_bwd["shape"], fwd_bwd["temp_mb"], scan["temp_mb"],
                 scan["name"], "<= 0.25", "chunked temp / per-position scan temp"),
    ]
    return rows


def _gpu_rows(quick: bool) -> list[dict]:
    seq_len, heads, dim, m = (1024, 4, 64, 32) if quick else (32768, 16, 64, 128)
    shape = _shape(seq_len, heads, dim, m, jnp.bfloat16)
    cudnn_name, linear_name = "cuDNN exact causal, fwd+bwd", "linear causal, fwd+bwd"
    if jax.default_backend() != "gpu":
        note = "not measured (no GPU)"
        return [
            {"section": SECTION, "name": cudnn_name, "shape": shape, "note": note},
            {"section": SECTION, "name": linear_name, "shape": shape, "note": note},
            {"section": SECTION, "name": "speedup of linear over cuDNN, fwd+bwd", "shape": shape,
             "reference": cudnn_name, "target": ">= 1", "ok": None, "note": note},
        ]
    args = _inputs(seq_len, heads, dim, m, jnp.bfloat16)
    cudnn = _measure(cudnn_name, _fwd_bwd(_cudnn_fwd), args, shape)
    lin = _measure(linear_name, _fwd_bwd(functools.partial(_linear_fwd, chunk_size=GPU_CHUNK_SIZE)), args, shape)
    lin["note"] = f"chunk_size={GPU_CHUNK_SIZE}"
    compare = _compare("speedup of linear over cuDNN, fwd+bwd", shape, cudnn["seconds"], lin["seconds"],
                       cudnn_name, ">= 1", "cuDNN seconds / linear seconds")
    return [cudnn, lin, compare]


def run(quick: bool = False) -> list[dict]:
    """All rows of the 'linear' section (see the module docstring); quick rows carry no targets."""
    rows = _cpu_rows(quick) + _gpu_rows(quick)
    return drop_targets(rows) if quick else rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    rows = run(quick=parser.parse_args().quick)
    print(format_table(rows, COLUMNS))


if __name__ == "__main__":
    main()
