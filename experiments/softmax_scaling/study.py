r"""Why attention logits are scaled by 1/sqrt(d_k) (Vaswani et al. 2017, "Attention is all you need", §3.2.1).

    python -m experiments.softmax_scaling --config configs/softmax_scaling.py --workdir runs/softmax_scaling

For q, k in R^{d_k} with iid N(0, 1) components, q.k = sum_i q_i k_i has mean
0 and variance d_k (each product has variance 1), so the scaled logit
q.k / sqrt(d_k) has variance 1. Unscaled logits, of standard deviation sqrt(d_k), drive
the softmax towards a one-hot vector, whose Jacobian

    J = d softmax(z) / dz = diag(p) - p p^T          ([T, T], symmetric PSD)

vanishes: gradients stop flowing through the attention weights. This study
measures, for each d_k in `config.dims` (one resumable run each, plus one
for the d_k -> infinity limit of the scaled case):

1. Var(q.k) and Var(q.k / sqrt(d_k)) against the predictions d_k and 1;
2. for one query against T = `config.num_keys` keys, the softmax of the
   logits with and without the scale: mean max weight, mean entropy (nats,
   at most log T), and the mean spectral norm ||J||_2 (its largest
   eigenvalue) and Frobenius norm ||J||_F of the softmax Jacobian.

Predictions checked (`report.py`; report.md states each as pass/fail):
* the measured variances are within `variance_tolerance` of d_k and of 1;
* with the scale, saturation statistics do not depend on d_k: they stay within
  `saturation_tolerance` of their d_k -> infinity limit, where the scaled
  logits are iid N(0, 1) (simulated directly);
* without it the softmax saturates: the max weight rises and the entropy
  falls as d_k grows;
* and the Jacobian vanishes: for large d_k, E||J||_2 ~ d_k^(-1/2) (the top
  two logits differ by less than a constant with probability ~ 1/sigma,
  sigma = |q| ~ sqrt(d_k); otherwise J is exponentially small), checked as a
  fitted log-log slope within 0.25 of -1/2 over d_k >= `decay_fit_min_dim`.

Rows: `{"quantity": "variance" | "max_weight" | "entropy" | "jacobian_spectral"
| "jacobian_frobenius", "scaling": "unscaled" | "scaled", "value", "dtype"}`
(variance rows also carry `predicted`); the limit run (`d_k` None) has the
scaled statistics only.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

import attnjax
from attnjax import checks
from attnjax.workdir import RunDir

Array = jax.Array
SCALINGS = ("unscaled", "scaled")
STATS = ("max_weight", "entropy", "jacobian_spectral", "jacobian_frobenius")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run: the statistics at key width `d_k`, or (`d_k` None) the d_k -> infinity limit of the scaled case."""

    d_k: Optional[int]

    @property
    def run_id(self) -> str:
        return "limit" if self.d_k is None else f"d_k={self.d_k:05d}"


# --------------------------------------------------------------------------
# Config checks (before any compute)


def _check_fraction(config, name: str, upper: float) -> None:
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < upper:
        raise ValueError(f"config.{name} must be a number in (0, {upper}), got {value!r}")


def specs(config) -> list[RunSpec]:
    """The limit run, then one run per d_k (ascending); raises ValueError naming the key of a bad value."""
    dims = config.dims
    if not isinstance(dims, (tuple, list)) or not dims:
        raise ValueError(f"config.dims must be a non-empty tuple of ints, got {dims!r}")
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
            raise ValueError(f"config.dims: every d_k must be an int >= 1, got {d!r} in {tuple(dims)}")
    if len(set(dims)) != len(dims):
        raise ValueError(f"config.dims has repeated values: {tuple(dims)}")
    checks.integer("config.seed", config.seed, 0)
    checks.integer("config.num_samples", config.num_samples, 2)
    checks.integer("config.num_keys", config.num_keys, 2)
    checks.integer("config.saturation_samples", config.saturation_samples, 1)
    checks.integer("config.decay_fit_min_dim", config.decay_fit_min_dim, 1)
    checks.integer("config.chunk_size", config.chunk_size, 1)
    _check_fraction(config, "variance_tolerance", 1.0)
    _check_fraction(config, "saturation_tolerance", math.inf)
    return [RunSpec(None)] + [RunSpec(int(d)) for d in sorted(dims)]


# --------------------------------------------------------------------------
# Measurements (pure, vectorised, jitted)


def float_dtype():
    """float64 when jax_enable_x64 is on, else float32."""
    return jax.dtypes.canonicalize_dtype(jnp.float64)


def _dot(a: Array, b: Array) -> Array:
    """a `[..., d]` . b `[d]` -> `[...]`, as an elementwise product and a sum.

    Not a matmul, so the sum is in full precision on every backend (TPU
    matmuls default to reduced-precision passes for float32).
    """
    return jnp.sum(a * jnp.reshape(b, (1,) * (a.ndim - 1) + b.shape), axis=-1)


def map_samples(fn, key: Array, num_samples: int, chunk_size: int):
    """[fn(fold_in(key, i)) for i < num_samples], stacked; `chunk_size` samples
    at a time (vmapped), the chunks in sequence (`lax.map`).

    Sample i's key depends only on i, so results do not depend on `chunk_size`
    (the last chunk is padded with extra samples, then cut).
    """
    chunk_size = min(chunk_size, num_samples)
    num_chunks = -(-num_samples // chunk_size)
    index = jnp.arange(num_chunks * chunk_size, dtype=jnp.uint32).reshape(num_chunks, chunk_size)
    sample = lambda i: fn(jax.random.fold_in(key, i))  # noqa: E731
    out = jax.lax.map(jax.vmap(sample), index)
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[:num_samples], out)


@functools.partial(jax.jit, static_argnames=("dim", "num_samples", "chunk_size"))
def dot_products(key: Array, *, dim: int, num_samples: int, chunk_size: int) -> Array:
    """`[num_samples]` samples of q.k, q and k `[dim]` with iid N(0, 1) components."""
    def one(k):
        kq, kk = jax.random.split(k)
        return _dot(jax.random.normal(kq, (dim,), float_dtype()), jax.random.normal(kk, (dim,), float_dtype()))

    return map_samples(one, key, num_samples, chunk_size)


def softmax_jacobian(p: Array) -> Array:
    """J = diag(p) - p p^T, `[T] -> [T, T]`.

    The diagonal p_i (1 - p_i) is computed as p_i * sum_{j != i} p_j, which
    stays accurate when p_i rounds to 1 (a saturated softmax).
    """
    off_diagonal = ~jnp.eye(p.shape[-1], dtype=bool)
    rest = jnp.sum(jnp.where(off_diagonal, p[None, :], jnp.zeros_like(p)[None, :]), axis=-1)
    return jnp.where(off_diagonal, -p[:, None] * p[None, :], jnp.diag(p * rest))


def jacobian_norms(p: Array) -> tuple[Array, Array]:
    """(||J||_2, ||J||_F) of the softmax Jacobian at probabilities p `[T]`.

    J is symmetric positive semi-definite, so ||J||_2 is its largest
    eigenvalue. J is divided by its largest entry first, and a J whose largest
    entry is below the smallest normal float counts as 0: CPUs may flush
    denormals to zero, and 0/0 = NaN would stall the eigensolver.
    """
    jac = softmax_jacobian(p)
    size = jnp.max(jnp.abs(jac))
    nonzero = size > jnp.finfo(jac.dtype).tiny
    unit = jac / jnp.where(nonzero, size, jnp.ones_like(size))
    size = jnp.where(nonzero, size, jnp.zeros_like(size))
    spectral = size * jnp.linalg.eigvalsh(unit)[-1]
    frobenius = size * jnp.sqrt(jnp.sum(unit * unit))
    return spectral, frobenius


def softmax_stats(logits: Array) -> dict[str, Array]:
    """Saturation of softmax(logits) for logits `[T]`: max weight, entropy
    -sum p log p (nats, 0 log 0 = 0) and the Jacobian norms; each a scalar."""
    p = attnjax.softmax_with_temperature(logits)
    plogp = jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, jnp.ones_like(p))), jnp.zeros_like(p))
    spectral, frobenius = jacobian_norms(p)
    return {"max_weight": jnp.max(p), "entropy": -jnp.sum(plogp), "jacobian_spectral": spectral,
            "jacobian_frobenius": frobenius}


@functools.partial(jax.jit, static_argnames=("dim", "num_keys", "num_samples", "chunk_size"))
def saturation(key: Array, *, dim: int, num_keys: int, num_samples: int, chunk_size: int) -> dict:
    """Per-sample softmax statistics for one query `[dim]` against `num_keys`
    keys `[T, dim]` (iid N(0, 1)): logits K q unscaled and divided by sqrt(dim).

    Returns {'unscaled': {stat: [num_samples]}, 'scaled': {...}}.
    """
    def one(k):
        kq, kk = jax.random.split(k)
        q = jax.random.normal(kq, (dim,), float_dtype())
        logits = _dot(jax.random.normal(kk, (num_keys, dim), float_dtype()), q)
        # Both scalings go through one vmapped call, so the program holds a single
        # batched eigensolver. The CPU eigensolver spreads its batch over the
        # intra-op thread pool and blocks until it is done; two of them running
        # at once on a 2-thread pool each wait for the other's thread: deadlock.
        stats = jax.vmap(softmax_stats)(jnp.stack([logits, logits / math.sqrt(dim)]))
        return {name: jax.tree.map(lambda x, i=i: x[i], stats) for i, name in enumerate(SCALINGS)}

    return map_samples(one, key, num_samples, max(1, chunk_size // num_keys))


@functools.partial(jax.jit, static_argnames=("num_keys", "num_samples", "chunk_size"))
def limit_saturation(key: Array, *, num_keys: int, num_samples: int, chunk_size: int) -> dict[str, Array]:
    """Per-sample statistics `{stat: [num_samples]}` in the d_k -> infinity
    limit of the scaled case, where the logits `[T]` are iid N(0, 1).

    (Given q, the scaled logits are iid N(0, |q|^2 / d_k), and |q|^2 / d_k -> 1.)
    """
    def one(k):
        return softmax_stats(jax.random.normal(k, (num_keys,), float_dtype()))

    return map_samples(one, key, num_samples, max(1, chunk_size // num_keys))


# --------------------------------------------------------------------------
# One d_k: the measurements


def _means(tree) -> dict:
    """Host-side float64 means over samples (accumulation in float64 whatever the device dtype)."""
    return jax.tree.map(lambda x: float(np.mean(np.asarray(x, np.float64))), tree)


def relative_standard_error(dim: int, num_samples: int) -> float:
    """Relative SE of the sample variance of q.k: sqrt((kurtosis - 1) / n), kurtosis 3 + 6 / d_k."""
    return math.sqrt((2.0 + 6.0 / dim) / num_samples)


def measure_dim(config, dim: int) -> dict:
    """All measurements for one d_k:
    `{"d_k", "dtype", "variance": {scaling: value}, "saturation": {scaling: {stat: mean}}}`."""
    key = jax.random.fold_in(jax.random.key(config.seed), dim)
    k_var, k_sat = jax.random.split(key)
    dots = np.asarray(dot_products(k_var, dim=dim, num_samples=config.num_samples, chunk_size=config.chunk_size),
                      np.float64)
    variance = {"unscaled": float(np.var(dots, ddof=1)), "scaled": float(np.var(dots / math.sqrt(dim), ddof=1))}
    stats = saturation(k_sat, dim=dim, num_keys=config.num_keys, num_samples=config.saturation_samples,
                       chunk_size=config.chunk_size)
    return {"d_k": dim, "dtype": str(np.dtype(float_dtype())), "variance": variance, "saturation": _means(stats)}


# --------------------------------------------------------------------------
# One run: its rows


def _dim_rows(record: dict) -> list[dict]:
    """One row per quantity and scaling; variance rows carry their prediction."""
    dim, dtype = record["d_k"], record["dtype"]
    rows = [{"quantity": "variance", "scaling": s, "value": record["variance"][s],
             "predicted": float(dim) if s == "unscaled" else 1.0, "dtype": dtype} for s in SCALINGS]
    return rows + [{"quantity": stat, "scaling": s, "value": record["saturation"][s][stat], "dtype": dtype}
                   for stat in STATS for s in SCALINGS]


def _limit_rows(config) -> list[dict]:
    """The scaled statistics in the d_k -> infinity limit; key fold_in(seed, 0) (a d_k run uses fold_in(seed, d_k))."""
    limit = _means(limit_saturation(jax.random.fold_in(jax.random.key(config.seed), 0), num_keys=config.num_keys,
                                    num_samples=config.saturation_samples, chunk_size=config.chunk_size))
    dtype = str(np.dtype(float_dtype()))
    return [{"quantity": stat, "scaling": "scaled", "value": limit[stat], "dtype": dtype} for stat in STATS]


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    if spec.d_k is None:
        return _limit_rows(config)
    record = measure_dim(config, spec.d_k)
    var, sat = record["variance"], record["saturation"]
    run.log(f"  Var(q.k)={var['unscaled']:.4g} (pred {spec.d_k}), Var(q.k/sqrt(d_k))={var['scaled']:.4f} (pred 1), "
            f"max weight {sat['unscaled']['max_weight']:.3f} unscaled vs {sat['scaled']['max_weight']:.3f} scaled")
    return _dim_rows(record)
