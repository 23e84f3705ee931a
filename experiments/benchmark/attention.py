"""Benchmark section 'attention': exact attention against jax.nn, and on a GPU against cuDNN.

Rows (config: `configs/benchmark.py`, `attention`):
* matmul peak: a square matmul (float32 on CPU, bf16 on GPU), the
  denominator of every `pct_peak` figure.
* Any backend, float32, causal: `attnjax.dot_product_attention` without
  weights against `jax.nn.dot_product_attention` (XLA), target time ratio
  <= `target`; the same call returning weights and a naive einsum for context.
  Forward+backward (gradients of sum(out**2) with respect to q, k and v) at
  the same shape, target <= `target`.
* Any backend, float32, causal, the studies' small shapes (`small_lengths`,
  `small_batch`, `small_heads`, `small_head_dim`: the rank-collapse model's
  heads): forward+backward of attnjax against jax.nn (XLA), target <=
  `small_target` at each length.
* Any backend, float32, causal, forward at length (`long_length`,
  `long_heads`, `long_head_dim`, batch 1): attnjax (from T = 2048 in query
  blocks, `attnjax.causal_blocks`) against its dense core (the same call
  returning weights), interleaved; target: attnjax >= `long_target_peak_fraction`
  of the matmul peak.
* GPU only, bf16, causal, at each of `gpu_lengths`: attnjax against
  `jax.nn.dot_product_attention(implementation='cudnn')`, forward and
  forward+backward, with achieved TFLOP/s and the fraction of the matmul peak.
  At `gpu_target_length`: forward throughput >= 0.95x cuDNN's and >= 50% of
  the peak. Elsewhere these rows read "not measured (no GPU)".

FLOPs of causal attention: 4 B H T^2 D / 2 forward (two matmuls, half the
[T, T] square), 2.5x that backward (five matmuls), as FlashAttention counts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import attnjax
from experiments.benchmark.util import (
    interleaved_median_times,
    median_time,
    not_measured,
    ratio_row,
)

SECTION = "attention"
XLA = "jax.nn.dot_product_attention (xla)"
CUDNN = "jax.nn.dot_product_attention (cudnn)"
ATTNJAX = "attnjax.dot_product_attention"


def _inputs(batch, length, heads, dim, dtype, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return [jax.random.normal(k, (batch, length, heads, dim), dtype) for k in keys]


def _naive(q, k, v):
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
    causal = jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool))[None, None]
    weights = jax.nn.softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)
    return jnp.einsum("bhts,bshd->bthd", weights, v)


def causal_flops(batch, length, heads, dim, backward=False) -> float:
    """FLOPs of causal attention: 4 B H T^2 D / 2 forward, x3.5 with the backward pass."""
    forward = 4 * batch * heads * length * length * dim / 2
    return forward * (3.5 if backward else 1.0)


def _timed(name, shape, seconds, flops, peak_tflops, **extra):
    tflops = flops / seconds / 1e12
    return {
        "section": SECTION,
        "name": name,
        "shape": shape,
        "seconds": seconds,
        "tflops": tflops,
        "pct_peak": 100 * tflops / peak_tflops,
        **extra,
    }


def _fwd_bwd(fn):
    return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v).astype(jnp.float32)), argnums=(0, 1, 2))


def _fwd_bwd_squares(fn):
    """Gradients of sum(out**2) with respect to q, k, v: a cotangent that depends on the output."""
    return jax.grad(
        lambda q, k, v: jnp.sum(jnp.square(fn(q, k, v).astype(jnp.float32))), argnums=(0, 1, 2)
    )


def _xla_causal(q, k, v):
    return jax.nn.dot_product_attention(q, k, v, is_causal=True)


def _attnjax_causal(q, k, v):
    return attnjax.dot_product_attention(q, k, v, is_causal=True)


def fwd_bwd_rows(batch, length, heads, dim, repeats, target, peak_tflops) -> list[dict]:
    """float32 causal forward+backward: attnjax against jax.nn (XLA), interleaved; the ratio row has `target`."""
    q, k, v = _inputs(batch, length, heads, dim, jnp.float32)
    shape = f"B={batch} T={length} H={heads} D={dim} f32 causal"
    fns = {
        XLA: jax.jit(_fwd_bwd_squares(_xla_causal)),
        ATTNJAX: jax.jit(_fwd_bwd_squares(_attnjax_causal)),
    }
    times = interleaved_median_times(
        {n: (lambda f=f: f(q, k, v)) for n, f in fns.items()}, repeats=repeats
    )
    flops = causal_flops(batch, length, heads, dim, backward=True)
    ref = _timed(f"{XLA}, fwd+bwd", shape, times[XLA], flops, peak_tflops)
    mine = _timed(f"{ATTNJAX}, fwd+bwd", shape, times[ATTNJAX], flops, peak_tflops)
    mine.update(
        ratio_row(
            SECTION, mine["name"], shape, times[ATTNJAX], times[XLA], ref["name"], f"<= {target:g}"
        )
    )
    return [ref, mine]


def small_shape_rows(cfg, peak_tflops: float) -> list[dict]:
    """Forward+backward at the studies' small shapes (one row pair per length in `small_lengths`)."""
    return [
        row
        for length in cfg.small_lengths
        for row in fwd_bwd_rows(
            cfg.small_batch,
            length,
            cfg.small_heads,
            cfg.small_head_dim,
            cfg.small_repeats,
            cfg.small_target,
            peak_tflops,
        )
    ]


def matmul_peak_row(cfg) -> dict:
    """TFLOP/s of one square matmul: float32 (CPU, TPU) or bf16 (GPU)."""
    gpu = jax.default_backend() == "gpu"
    n, dtype = (
        (cfg.gpu_peak_matmul_size, jnp.bfloat16) if gpu else (cfg.peak_matmul_size, jnp.float32)
    )
    a, b = (jax.random.normal(k, (n, n), dtype) for k in jax.random.split(jax.random.key(1)))
    seconds = median_time(jax.jit(jnp.matmul), a, b, repeats=cfg.repeats)
    tflops = 2 * n**3 / seconds / 1e12
    return {
        "section": SECTION,
        "name": "matmul peak",
        "shape": f"{n}x{n} @ {n}x{n} {jnp.dtype(dtype).name}",
        "seconds": seconds,
        "tflops": tflops,
        "pct_peak": 100.0,
    }


def exact_attention_rows(cfg, peak_tflops: float) -> list[dict]:
    """float32 causal attention, every backend: attnjax against jax.nn's XLA path."""
    b, t, h, d = cfg.batch, cfg.length, cfg.heads, cfg.head_dim
    q, k, v = _inputs(b, t, h, d, jnp.float32)
    shape = f"B={b} T={t} H={h} D={d} f32 causal"
    fns = {
        XLA: jax.jit(_xla_causal),
        ATTNJAX: jax.jit(_attnjax_causal),
        "attnjax with return_weights=True": jax.jit(
            lambda q, k, v: attnjax.dot_product_attention(
                q, k, v, is_causal=True, return_weights=True
            )
        ),
        "naive einsum softmax": jax.jit(_naive),
    }
    times = interleaved_median_times(
        {n: (lambda f=f: f(q, k, v)) for n, f in fns.items()}, repeats=cfg.repeats
    )
    flops = causal_flops(b, t, h, d)
    rows = []
    for name, seconds in times.items():
        row = _timed(name, shape, seconds, flops, peak_tflops)
        if name != XLA:
            target = f"<= {cfg.target:g}" if name == ATTNJAX else None
            row.update(ratio_row(SECTION, name, shape, seconds, times[XLA], XLA, target))
        rows.append(row)
    return rows


def long_rows(cfg, peak_tflops: float) -> list[dict]:
    """float32 causal forward at `long_length`: attnjax and its dense core, and attnjax's fraction of
    the matmul peak (target `long_target_peak_fraction`)."""
    t, h, d = cfg.long_length, cfg.long_heads, cfg.long_head_dim
    q, k, v = _inputs(1, t, h, d, jnp.float32)
    shape = f"B=1 T={t} H={h} D={d} f32 causal"
    dense = "attnjax dense core (return_weights=True), fwd"
    fns = {
        f"{ATTNJAX}, fwd": jax.jit(_attnjax_causal),
        dense: jax.jit(
            lambda q, k, v: attnjax.dot_product_attention(
                q, k, v, is_causal=True, return_weights=True
            )[0]
        ),
    }
    times = interleaved_median_times(
        {n: (lambda f=f: f(q, k, v)) for n, f in fns.items()}, repeats=cfg.long_repeats
    )
    flops = causal_flops(1, t, h, d)
    rows = [_timed(name, shape, seconds, flops, peak_tflops) for name, seconds in times.items()]
    ours = rows[0]
    ours.update(ratio_row(SECTION, ours["name"], shape, ours["seconds"], times[dense], dense))
    rows.append(
        ratio_row(
            SECTION,
            "attnjax fraction of matmul peak, fwd (float32)",
            shape,
            ours["tflops"],
            peak_tflops,
            "matmul peak",
            f">= {cfg.long_target_peak_fraction:g}",
        )
    )
    return rows


def _gpu_length_rows(cfg, length: int, peak_tflops: float) -> list[dict]:
    b, h, d = cfg.gpu_batch, cfg.gpu_heads, cfg.gpu_head_dim
    q, k, v = _inputs(b, length, h, d, jnp.bfloat16)
    shape = f"B={b} T={length} H={h} D={d} bf16 causal"

    def cudnn(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")

    def ours(q, k, v):
        return attnjax.dot_product_attention(q, k, v, is_causal=True)

    at_target = length == cfg.gpu_target_length
    rows = []
    for mode, wrap, backward in (("fwd", lambda f: f, False), ("fwd+bwd", _fwd_bwd, True)):
        fns = {CUDNN: jax.jit(wrap(cudnn)), ATTNJAX: jax.jit(wrap(ours))}
        times = interleaved_median_times(
            {n: (lambda f=f: f(q, k, v)) for n, f in fns.items()}, repeats=cfg.gpu_repeats
        )
        flops = causal_flops(b, length, h, d, backward)
        ref = _timed(f"{CUDNN}, {mode}", shape, times[CUDNN], flops, peak_tflops)
        mine = _timed(f"{ATTNJAX}, {mode}", shape, times[ATTNJAX], flops, peak_tflops)
        check = at_target and not backward
        # Throughput ratio: cuDNN's time over ours.
        throughput = ratio_row(
            SECTION,
            f"attnjax / cuDNN throughput, {mode}",
            shape,
            times[CUDNN],
            times[ATTNJAX],
            ref["name"],
            f">= {cfg.gpu_target_vs_cudnn:g}" if check else None,
        )
        rows += [ref, mine, throughput]
        if check:
            rows.append(
                ratio_row(
                    SECTION,
                    f"attnjax fraction of matmul peak, {mode}",
                    shape,
                    mine["tflops"],
                    peak_tflops,
                    "matmul peak",
                    f">= {cfg.gpu_target_peak_fraction:g}",
                )
            )
    return rows


def gpu_rows(cfg, peak_tflops: float) -> list[dict]:
    if jax.default_backend() != "gpu":
        shape = f"B={cfg.gpu_batch} T={cfg.gpu_target_length} H={cfg.gpu_heads} D={cfg.gpu_head_dim} bf16 causal"
        return [
            not_measured(
                SECTION,
                "attnjax / cuDNN throughput, fwd",
                shape,
                "no GPU",
                f">= {cfg.gpu_target_vs_cudnn:g}",
            ),
            not_measured(
                SECTION,
                "attnjax fraction of matmul peak, fwd",
                shape,
                "no GPU",
                f">= {cfg.gpu_target_peak_fraction:g}",
            ),
        ]
    return [row for length in cfg.gpu_lengths for row in _gpu_length_rows(cfg, length, peak_tflops)]


def run(cfg) -> list[dict]:
    """All rows of the section (see the module docstring)."""
    peak = matmul_peak_row(cfg)
    large = fwd_bwd_rows(
        cfg.batch, cfg.length, cfg.heads, cfg.head_dim, cfg.repeats, cfg.target, peak["tflops"]
    )
    return (
        [peak]
        + exact_attention_rows(cfg, peak["tflops"])
        + large
        + small_shape_rows(cfg, peak["tflops"])
        + long_rows(cfg, peak["tflops"])
        + gpu_rows(cfg, peak["tflops"])
    )
