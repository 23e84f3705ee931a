r"""Rank collapse in width (Naderi, Nait Saada and Tanner 2025, "Mind the gap: a spectral analysis of rank
collapse and signal propagation in attention layers", ICML).

    python -m experiments.width --config configs/width.py --workdir runs/width

Their abstract: "we identify an additional and previously unknown challenge
unique to softmax attention layers: (iii) rank collapse in width, which occurs
as the context length increases. Using Random Matrix Theory, we conduct a
rigorous analysis that uncovers a spectral gap between the two largest singular
values of the attention matrix as the cause of (iii), which in turn exacerbates
(i) and (ii) [vanishing/exploding gradients, rank collapse in depth]. Building
on this insight, we propose a novel yet simple practical solution to mitigate
rank collapse in width by removing the outlier eigenvalue(s)."

Runs (each resumable): one per model (`maps.MODELS`) and context length n,
each over `num_seeds` seeds. A seed draws the map A `[n, n]` at
initialisation and the values Z = X W_V `[n, d]` (d = n / width_ratio), in
float64, and measures

* the singular values sigma_1 >= sigma_2 >= sigma_3 of A (a dense SVD) and its
  stable rank ||A||_F^2 / sigma_1^2;
* the stable rank of the layer's output A Z, of the output with the paper's
  fix, (A - (1/n) 1 1^T) Z, and of Z itself (attention replaced by the
  identity);
* the relative residual ||A Z - 1 zbar^T||_F / ||A Z||_F, the measure of rank
  collapse in depth that the other studies use;
* the realised logit variance (within rows), and the identity A 1 = 1 as
  max |A 1 - 1| (the same number is max |(A - (1/n) 1 1^T) 1|).

Rows: `{"seed", "metric", "value"}`.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

from attnjax import analysis, checks
from experiments.lab.workdir import RunDir
from experiments.width import maps

METRICS = (
    "sigma_1",
    "sigma_2",
    "sigma_3",
    "stable_rank_map",
    "stable_rank_output",
    "stable_rank_fixed",
    "stable_rank_values",
    "residual_output",
    "logit_variance",
    "row_sum_error",
)


MAX_LOGIT_STD = 58.0  # 12 x 58 < 700: exp(-700) is still a normal float64


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One model (`maps.MODELS`) at one context length."""

    model: str
    length: int

    @property
    def run_id(self) -> str:
        return f"{self.model}-n{self.length:05d}"


def width_of(config, length: int) -> int:
    """The tokens' width d = n / gamma, rounded up."""
    return math.ceil(length / config.width_ratio)


def specs(config) -> list[RunSpec]:
    """One run per model and length (models in config order, lengths ascending); raises ValueError naming
    the key of a bad value, before anything compiles."""
    checks.integer("config.seed", config.seed, 0)
    checks.integer("config.num_seeds", config.num_seeds, 2)
    lengths = config.lengths
    if not isinstance(lengths, (tuple, list)) or len(lengths) < 2:
        raise ValueError(f"config.lengths must hold at least 2 lengths, got {lengths!r}")
    for n in lengths:
        checks.integer("config.lengths (each)", n, 4)
    if len(set(lengths)) != len(lengths):
        raise ValueError(f"config.lengths has repeated values: {tuple(lengths)}")
    models = tuple(config.models)
    if not models or any(m not in maps.MODELS for m in models) or len(set(models)) != len(models):
        raise ValueError(f"config.models must be distinct names from {maps.MODELS}, got {models!r}")
    checks.positive_number("config.logit_variance", config.logit_variance)
    checks.positive_number("config.weight_std", config.weight_std)
    # Every entry of A must stay a positive float64 (its log gives the logit variance): logits within
    # 12 standard deviations of each other, as n <= 10^6 iid Gaussians are, stay within exp(-700) of the row's
    # largest when the logits' standard deviation is at most MAX_LOGIT_STD.
    for name, std in (
        ("logit_variance", math.sqrt(config.logit_variance)),
        ("weight_std", config.weight_std**2),
    ):
        if std > MAX_LOGIT_STD:
            raise ValueError(
                f"config.{name} = {config[name]!r} gives logits of standard deviation {std:.4g}, above "
                f"{MAX_LOGIT_STD}: softmax weights would underflow to 0 in float64"
            )
    ratio = config.width_ratio
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ValueError(
            f"config.width_ratio (gamma = n / d) must be in (0, 1]: orthonormal tokens need d >= n; "
            f"got {ratio!r}"
        )
    return [RunSpec(m, int(n)) for m in models for n in sorted(lengths)]


def metrics(a: jax.Array, z: jax.Array) -> dict:
    """Every metric of `METRICS` of a map A `[n, n]` and values Z `[n, d]` (scalars, A's dtype)."""
    n = a.shape[-1]
    output = a @ z
    fixed = maps.without_outlier(output, z)
    sigma = jnp.linalg.svd(a, compute_uv=False)
    logits = jnp.log(a)
    centred = logits - jnp.mean(logits, axis=-1, keepdims=True)
    return {
        "sigma_1": sigma[0],
        "sigma_2": sigma[1],
        "sigma_3": sigma[2],
        "stable_rank_map": jnp.sum(sigma**2) / sigma[0] ** 2,
        "stable_rank_output": analysis.stable_rank(output),
        "stable_rank_fixed": analysis.stable_rank(fixed),
        "stable_rank_values": analysis.stable_rank(z),
        "residual_output": analysis.residual_ratio(output, "fro"),
        # Each row's logits up to their shift (softmax forgets it): variance within rows, averaged.
        "logit_variance": jnp.mean(jnp.sum(centred**2, axis=-1) / (n - 1)),
        # max |A 1 - 1|, which is also max |(A - (1/n) 1 1^T) 1|: the fix removes the direction 1 exactly.
        "row_sum_error": jnp.max(jnp.abs(jnp.sum(a, axis=-1) - 1)),
    }


@functools.partial(jax.jit, static_argnames=("model", "length", "width"))
def _measure(key, logit_variance, weight_std, *, model, length, width) -> dict:
    k_map, k_values = jax.random.split(key)
    a = maps.attention_map(k_map, model, length, width, logit_variance, weight_std)
    return metrics(a, maps.values(k_values, length, width))


def measure(key: jax.Array, model: str, length: int, config) -> dict:
    """Every metric of `METRICS` for one seed's map and values (float64 scalars)."""
    with jax.enable_x64(True):
        out = _measure(
            key,
            jnp.asarray(config.logit_variance, jnp.float64),
            jnp.asarray(config.weight_std, jnp.float64),
            model=model,
            length=length,
            width=width_of(config, length),
        )
        return {name: float(value) for name, value in out.items()}


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    """`num_seeds` rows per metric: seed s draws from fold_in(fold_in(key(seed), model), length) and s."""
    base = jax.random.fold_in(
        jax.random.fold_in(jax.random.key(config.seed), maps.MODELS.index(spec.model)), spec.length
    )
    rows = []
    for seed in range(config.num_seeds):
        measured = measure(jax.random.fold_in(base, seed), spec.model, spec.length, config)
        rows += [{"seed": seed, "metric": m, "value": measured[m]} for m in METRICS]
        run.log(f"{spec.run_id}: seed {seed + 1}/{config.num_seeds}")
    return rows
