r"""Why attention logits are scaled by 1/sqrt(d_k) (Vaswani et al. 2017, "Attention is all you need", §3.2.1).

    python -m experiments.softmax_scaling --config configs/softmax_scaling.py --workdir runs/softmax_scaling

What Vaswani et al. state (§3.2.1 and its footnote): "We suspect that for large
values of d_k, the dot products grow large in magnitude, pushing the softmax
function into regions where it has extremely small gradients. To counteract
this effect, we scale the dot products by 1/sqrt(d_k)", and "To illustrate why
the dot products get large, assume that the components of q and k are
independent random variables with mean 0 and variance 1. Then their dot
product, q.k = sum_i q_i k_i, has mean 0 and variance d_k."

Runs (each resumable): one per d_k in `config.dims`, one for the d_k -> infinity
limit of the scaled softmax (logits iid N(0, 1)), one for the Jacobian rate.
A d_k run measures

1. Var(q.k) and Var(q.k / sqrt(d_k)) over `num_samples` pairs (iid N(0, 1));
   sanity: the footnote's identity, and the same samples divided by d_k;
2. for one query against T = `num_keys` keys, both softmaxes' mean max
   weight, entropy and Jacobian norms (`jacobian.py`); sanity: the scaled
   ones tend to the limit by construction, the unscaled ones saturate;
3. the gradient that reaches q and K through the softmax (`gradients.py`),
   `gradient_samples` samples per seed and input family: Vaswani's
   suspicion, tested where it is meant.

The rate run samples E||J||_2 of the unscaled softmax over `rate_dims`
(`rate.py`), per seed: its exponent against the first-order law derived here.

Rows: `{"quantity", "scaling", "value", "dtype"}` with `quantity` "variance"
(and `predicted`), a statistic of `STATS` or "rate_jacobian_spectral" (and
`width`, `seed`); and `{"quantity", "scaling", "inputs", "seed", "dtype",
"values"}` with `quantity` "grad_query" / "grad_key" and `values` the
gradient norm of every sample.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import checks
from experiments.lab.workdir import RunDir
from experiments.softmax_scaling import gradients, rate
from experiments.softmax_scaling.constants import SCALINGS, STATS
from experiments.softmax_scaling.jacobian import softmax_stats
from experiments.softmax_scaling.sampling import _dot, float_dtype, map_samples

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run: `part` "dim" (the measurements at key width `d_k`), "limit" (the
    d_k -> infinity limit of the scaled case) or "rate" (the Jacobian rate); `d_k` None but for "dim"."""

    part: str
    d_k: Optional[int] = None

    @property
    def run_id(self) -> str:
        return f"d_k={self.d_k:05d}" if self.part == "dim" else self.part


# --------------------------------------------------------------------------
# Config checks (before any compute)


def _check_fraction(config, name: str, upper: float) -> None:
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < upper:
        raise ValueError(f"config.{name} must be a number in (0, {upper}), got {value!r}")


def _check_dims(config, name: str, minimum_count: int) -> None:
    dims = config[name]
    if not isinstance(dims, (tuple, list)) or len(dims) < minimum_count:
        kind = "a non-empty" if minimum_count == 1 else f"at least {minimum_count} values in a"
        raise ValueError(f"config.{name} must be {kind} tuple of ints, got {dims!r}")
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
            raise ValueError(
                f"config.{name}: every d_k must be an int >= 1, got {d!r} in {tuple(dims)}"
            )
    if len(set(dims)) != len(dims):
        raise ValueError(f"config.{name} has repeated values: {tuple(dims)}")


def specs(config) -> list[RunSpec]:
    """The limit run, then one run per d_k (ascending); raises ValueError naming the key of a bad value."""
    _check_dims(config, "dims", minimum_count=1)
    dims = config.dims
    checks.integer("config.seed", config.seed, 0)
    checks.integer("config.num_samples", config.num_samples, 2)
    checks.integer("config.num_keys", config.num_keys, 2)
    checks.integer("config.saturation_samples", config.saturation_samples, 1)
    checks.integer("config.chunk_size", config.chunk_size, 1)
    checks.integer("config.num_seeds", config.num_seeds, 1)
    checks.integer("config.gradient_samples", config.gradient_samples, 1)
    checks.integer("config.value_dim", config.value_dim, 1)
    checks.integer("config.low_rank", config.low_rank, 1)
    checks.integer("config.rate_samples", config.rate_samples, 1)
    _check_fraction(config, "variance_tolerance", 1.0)
    _check_fraction(config, "saturation_tolerance", math.inf)
    _check_dims(config, "rate_dims", minimum_count=2)
    a = rate.correction(config.num_keys)
    if min(config.rate_dims) <= a * a:
        raise ValueError(
            f"config.rate_dims: every width must be above a^2 = {a * a:.3g} (T = {config.num_keys}), "
            f"where the first-order law of rate.py is positive, got {tuple(config.rate_dims)}"
        )
    return [RunSpec("limit")] + [RunSpec("dim", int(d)) for d in sorted(dims)] + [RunSpec("rate")]


# --------------------------------------------------------------------------
# Measurements (pure, vectorised, jitted)


@functools.partial(jax.jit, static_argnames=("dim", "num_samples", "chunk_size"))
def dot_products(key: Array, *, dim: int, num_samples: int, chunk_size: int) -> Array:
    """`[num_samples]` samples of q.k, q and k `[dim]` with iid N(0, 1) components."""

    def one(k):
        kq, kk = jax.random.split(k)
        return _dot(
            jax.random.normal(kq, (dim,), float_dtype()),
            jax.random.normal(kk, (dim,), float_dtype()),
        )

    return map_samples(one, key, num_samples, chunk_size)


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
def limit_saturation(
    key: Array, *, num_keys: int, num_samples: int, chunk_size: int
) -> dict[str, Array]:
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
    dots = np.asarray(
        dot_products(k_var, dim=dim, num_samples=config.num_samples, chunk_size=config.chunk_size),
        np.float64,
    )
    variance = {
        "unscaled": float(np.var(dots, ddof=1)),
        "scaled": float(np.var(dots / math.sqrt(dim), ddof=1)),
    }
    stats = saturation(
        k_sat,
        dim=dim,
        num_keys=config.num_keys,
        num_samples=config.saturation_samples,
        chunk_size=config.chunk_size,
    )
    return {
        "d_k": dim,
        "dtype": str(np.dtype(float_dtype())),
        "variance": variance,
        "saturation": _means(stats),
    }


# --------------------------------------------------------------------------
# One run: its rows


def _dim_rows(record: dict) -> list[dict]:
    """One row per quantity and scaling; variance rows carry their prediction."""
    dim, dtype = record["d_k"], record["dtype"]
    rows = [
        {
            "quantity": "variance",
            "scaling": s,
            "value": record["variance"][s],
            "predicted": float(dim) if s == "unscaled" else 1.0,
            "dtype": dtype,
        }
        for s in SCALINGS
    ]
    return rows + [
        {"quantity": stat, "scaling": s, "value": record["saturation"][s][stat], "dtype": dtype}
        for stat in STATS
        for s in SCALINGS
    ]


def _limit_rows(config) -> list[dict]:
    """The scaled statistics in the d_k -> infinity limit; key fold_in(seed, 0) (a d_k run uses fold_in(seed, d_k))."""
    limit = _means(
        limit_saturation(
            jax.random.fold_in(jax.random.key(config.seed), 0),
            num_keys=config.num_keys,
            num_samples=config.saturation_samples,
            chunk_size=config.chunk_size,
        )
    )
    dtype = str(np.dtype(float_dtype()))
    return [
        {"quantity": stat, "scaling": "scaled", "value": limit[stat], "dtype": dtype}
        for stat in STATS
    ]


def seed_key(config, seed: int, stream: int) -> Array:
    """The key of seed `seed` < num_seeds for the gradient (stream 1) and rate (stream 2) runs: key(seed) of
    the config's seed folded with (seed, stream); the variance and saturation samples use key(seed) folded with d_k."""
    return jax.random.fold_in(
        jax.random.fold_in(jax.random.key(config.seed), 1_000_000 + seed), stream
    )


def _gradient_rows(config, dim: int) -> list[dict]:
    """||dL/dq|| and ||dL/dK||_F of every sample, per input family, seed and scaling."""
    rows, dtype = [], str(np.dtype(float_dtype()))
    for seed in range(config.num_seeds):
        norms = gradients.gradient_samples(
            jax.random.fold_in(seed_key(config, seed, 1), dim),
            jnp.asarray(dim),
            width=max(config.dims),
            num_keys=config.num_keys,
            value_dim=config.value_dim,
            rank=config.low_rank,
            num_samples=config.gradient_samples,
            chunk_size=config.chunk_size,
        )
        rows += [
            {
                "quantity": grad,
                "scaling": s,
                "inputs": inputs,
                "seed": seed,
                "dtype": dtype,
                "values": np.asarray(norms[inputs][s][grad], np.float64).tolist(),
            }
            for inputs in gradients.INPUTS
            for grad in gradients.GRADIENTS
            for s in SCALINGS
        ]
    return rows


def _rate_rows(config) -> list[dict]:
    """Mean over samples of the unscaled ||J||_2 at each width of `rate_dims`, per seed."""
    rows, dtype = [], str(np.dtype(float_dtype()))
    for seed in range(config.num_seeds):
        norms = rate.unscaled_spectral_norms(
            seed_key(config, seed, 2),
            jnp.asarray(config.rate_dims),
            num_keys=config.num_keys,
            num_samples=config.rate_samples,
            chunk_size=config.chunk_size,
        )
        means = np.mean(np.asarray(norms, np.float64), axis=1)
        rows += [
            {
                "quantity": "rate_jacobian_spectral",
                "scaling": "unscaled",
                "width": int(width),
                "seed": seed,
                "dtype": dtype,
                "value": float(mean),
            }
            for width, mean in zip(config.rate_dims, means)
        ]
    return rows


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    if spec.part == "limit":
        return _limit_rows(config)
    if spec.part == "rate":
        return _rate_rows(config)
    record = measure_dim(config, spec.d_k)
    var, sat = record["variance"], record["saturation"]
    run.log(
        f"  Var(q.k)={var['unscaled']:.4g} (pred {spec.d_k}), Var(q.k/sqrt(d_k))={var['scaled']:.4f} (pred 1), "
        f"max weight {sat['unscaled']['max_weight']:.3f} unscaled vs {sat['scaled']['max_weight']:.3f} scaled"
    )
    return _dim_rows(record) + _gradient_rows(config, spec.d_k)
