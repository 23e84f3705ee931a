"""Benchmark section 'attention': exact attention speed and Transformer compile time.

Rows (each a ratio against a reference measured in the same run):
* Any backend, float32, B=2 T=2048 H=8 D=64 causal: `attnjax.dot_product_attention`
  without weights vs `jax.nn.dot_product_attention` (target <= 1.05), plus
  the same call returning weights and a naive einsum for context.
* GPU only, bf16, B=4 T=4096 H=16 D=128 causal: attnjax vs
  `jax.nn.dot_product_attention(implementation='cudnn')` throughput
  (target >= 0.95), with achieved TFLOP/s.
* Compile time of a 32-layer `Transformer` forward+backward vs a 2-layer one
  (target <= 2).

Run alone: python -m experiments.bench_attention [--quick]
"""
from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
from flax import nnx

import attnjax
from attnjax import nn
from experiments.bench_util import compile_seconds, drop_targets, format_table, interleaved_median_times

COLUMNS = ("section", "name", "shape", "seconds", "reference", "ratio", "target", "ok", "tflops")


def _inputs(batch, length, heads, dim, dtype, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return [jax.random.normal(k, (batch, length, heads, dim), dtype) for k in keys]


def _naive(q, k, v):
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
    causal = jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool))[None, None]
    weights = jax.nn.softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)
    return jnp.einsum("bhts,bshd->bthd", weights, v)


def _row(name, shape, seconds, reference=None, ref_seconds=None, target=None, higher_is_better=False, **extra):
    row = {"section": "attention", "name": name, "shape": shape, "seconds": seconds, **extra}
    if reference is not None:
        ratio = seconds / ref_seconds
        row.update(reference=reference, ratio=ratio, target=target)
        if target is not None:
            bound = float(target.split()[-1])
            row["ok"] = ratio >= bound if higher_is_better else ratio <= bound
    return row


def exact_attention_rows(quick: bool) -> list[dict]:
    batch, length, heads, dim = (2, 256, 4, 32) if quick else (2, 2048, 8, 64)
    q, k, v = _inputs(batch, length, heads, dim, jnp.float32)
    shape = f"B={batch} T={length} H={heads} D={dim} f32 causal"
    fns = {
        "jax.nn.dot_product_attention (xla)": jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)),
        "attnjax.dot_product_attention": jax.jit(lambda q, k, v: attnjax.dot_product_attention(q, k, v, is_causal=True)),
        "attnjax with return_weights=True": jax.jit(
            lambda q, k, v: attnjax.dot_product_attention(q, k, v, is_causal=True, return_weights=True)),
        "naive einsum softmax": jax.jit(_naive),
    }
    times = interleaved_median_times({n: (lambda f=f: f(q, k, v)) for n, f in fns.items()}, repeats=3 if quick else 7)
    ref = "jax.nn.dot_product_attention (xla)"
    rows = [_row(ref, shape, times[ref])]
    rows.append(_row("attnjax.dot_product_attention", shape, times["attnjax.dot_product_attention"], ref, times[ref], "<= 1.05"))
    for name in ("attnjax with return_weights=True", "naive einsum softmax"):
        rows.append(_row(name, shape, times[name], ref, times[ref]))
    return rows


def gpu_rows(quick: bool) -> list[dict]:
    batch, length, heads, dim = (1, 1024, 4, 128) if quick else (4, 4096, 16, 128)
    shape = f"B={batch} T={length} H={heads} D={dim} bf16 causal"
    if jax.default_backend() != "gpu":
        return [{"section": "attention", "name": "attnjax vs cudnn (GPU)", "shape": shape,
                 "note": "not measured (no GPU)"}]
    q, k, v = _inputs(batch, length, heads, dim, jnp.bfloat16)
    flops = 4 * batch * heads * length * length * dim / 2  # two matmuls, causal half
    fns = {
        "jax.nn cudnn": jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")),
        "attnjax.dot_product_attention": jax.jit(lambda q, k, v: attnjax.dot_product_attention(q, k, v, is_causal=True)),
    }
    times = interleaved_median_times({n: (lambda f=f: f(q, k, v)) for n, f in fns.items()}, repeats=20)
    ref = times["jax.nn cudnn"]
    rows = [_row("jax.nn cudnn", shape, ref, tflops=flops / ref / 1e12)]
    ours = times["attnjax.dot_product_attention"]
    # Throughput ratio = reference time / our time.
    row = _row("attnjax.dot_product_attention (throughput vs cudnn)", shape, ours, tflops=flops / ours / 1e12)
    row.update(reference="jax.nn cudnn", ratio=ref / ours, target=">= 0.95", ok=ref / ours >= 0.95)
    return rows + [row]


def _train_step_fn(depth: int):
    config = nn.TransformerConfig(num_layers=depth, features=64, num_heads=4, vocab_size=64, max_len=64, causal=True)
    graphdef, params = nnx.split(nn.Transformer(config, rngs=nnx.Rngs(0)))
    tokens = jnp.zeros((8, 64), jnp.int32)

    def loss(params, tokens):
        logits = nnx.merge(graphdef, params)(tokens)
        return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

    return jax.value_and_grad(loss), params, tokens


def compile_time_rows(quick: bool) -> list[dict]:
    deep = 8 if quick else 32
    seconds = {}
    for depth in (2, deep):
        fn, params, tokens = _train_step_fn(depth)
        seconds[depth] = min(compile_seconds(fn, params, tokens) for _ in range(2))
    shape = "D=64 H=4 T=64 B=8 fwd+bwd"
    return [
        _row("compile Transformer L=2", shape, seconds[2]),
        _row(f"compile Transformer L={deep}", shape, seconds[deep], "compile Transformer L=2", seconds[2], "<= 2"),
    ]


def run(quick: bool = False) -> list[dict]:
    rows = exact_attention_rows(quick) + gpu_rows(quick) + compile_time_rows(quick)
    return drop_targets(rows) if quick else rows


if __name__ == "__main__":
    print(format_table(run(quick="--quick" in sys.argv), COLUMNS + ("note",)))
