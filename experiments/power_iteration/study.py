r"""Attention as power iteration, and self-attention dynamics on the sphere.

    python -m experiments.power_iteration --config configs/power_iteration.py --workdir runs/pi
    python -m experiments.power_iteration --config configs/power_iteration.py:smoke --workdir runs/pi_smoke

A row-stochastic attention matrix A (A >= 0, A 1 = 1) has spectral radius 1,
right eigenvector 1 and a left Perron vector pi (pi A = pi, sum pi = 1).
Applying it repeatedly, v <- A v, is power iteration; the study measures three
consequences (Seneta 2006, "Non-negative Matrices and Markov Chains"):

(a) `fixed`: one matrix A = softmax(Q K^T / (sqrt(d) tau)), Q, K [T, d] with
    iid N(0, 1) entries (the same draws at every temperature tau). Since
    A^k - 1 pi^T = (A - 1 pi^T)^k, the distance
        d(k) = max_i 1/2 ||e_i^T A^k - pi||_1          (worst-case total variation)
    decays like |lambda_2|^k, lambda_2 the second eigenvalue of A (`slem`).
    The measured rate is exp(slope) of a least-squares line through log d(k)
    over the second half of the steps above rounding level (see `fit_rate`),
    checked within `fixed.tolerance` of |lambda_2|. The rate of the seed's
    vector iteration v <- A v (`attnjax.analysis.power_iteration`) is reported
    alongside.
(b) `products`: the attention of a network is an inhomogeneous product
    P_l = A_l ... A_1 (`path_product`). Dobrushin's coefficient
    tau(A) = 1/2 max_ij ||a_i - a_j||_1 is sub-multiplicative (Dobrushin 1956;
    Seneta 2006, §3.1), so
        delta(P_l) := tau(P_l) <= prod_{i<=l} tau(A_i)   and   delta(P_l) <= delta(P_{l-1}),
    and the rows of P_l approach a common row p_l (weak ergodicity). Measured
    for the head-averaged chain A_l = mean_h A_l^h and for each head's own
    chain A_l^h ... A_1^h, with the total-variation distance between p_l
    (the mean row of P_l) and each layer's Perron vector pi_l. Untrained
    models (`products.untrained_layers` deep) are measured with and without
    the causal mask, with the same parameters; trained ones
    (`products.num_layers` deep) are causal, since associative recall is
    next-token prediction, and their held-out accuracy is reported beside
    that of predicting the most frequent value of the context
    (`mode_accuracy`). A causal A is lower-triangular with a_11 = 1, so its
    only stationary distribution is e_1 and the products converge to the
    first token. Dong, Cordonnier & Loukas (2021) for the link with rank
    collapse. These are theorems (sanity checks). The hypothesis of this
    codebase (no theorem covers a product of different maps) is that each
    layer contracts the product at its own |lambda_2|:
    delta(P_l) / delta(P_(l-1)) ~ |lambda_2(A_l)| once the transient is over,
    tested over the second half of the layers against the exactly uniform
    causal chain computed alongside (`products.uniform_causal_chain`).
(c) `clusters`: Geshkovski, Letrouit, Polyanskiy & Rigollet 2023 ("A
    mathematical perspective on Transformers"), as they state it: n tokens on
    the unit sphere S^{d-1}, Q = K = V = I, inverse temperature beta,
        dx_i/dt = P_{x_i}( (1/Z_i) sum_j exp(beta <x_i, x_j>) x_j )      (SA)
    (or Z_i = n: USA), P_x y = y - <x, y> x, integrated by projected Euler
    with step `clusters.dt` (see `dynamics.py`) from tokens uniform on the
    sphere. Clusters: tokens closer than `clusters.radius` are linked, and
    clusters are the connected components (`dynamics.count_clusters`). The
    paper proves convergence to a single cluster for almost every start in
    several regimes of beta and d and describes long-lived (metastable)
    multi-cluster states at large beta; the study measures the number of
    clusters over time and the time to reach one cluster per beta.

Each temperature of (a), each beta of (c) and each model of (b) is one run; a killed
study, re-run with the same command, skips finished runs (an unfinished
training run restarts from step 0 and, being deterministic, gives the same
numbers) and ends with the same `summary.json`.

Rows: (a) `{"matrix", "metric", "value"}` per matrix (`slem`, the fitted
`rate` and its range, `vector_rate`) and `{"matrix", "metric": "distance",
"values": d(0..steps)}`; (b) `{"phase", "seed", "chain": "mean" | "head",
"metric", "values"}` (see `product_metrics`), and for the trained model
`{"phase": "trained", "seed", "metric", "value"}` (held-out accuracy and loss,
the mode-of-context accuracy on the same examples, chance accuracy,
divergence); (c) `{"seed", "metric", "values": [measures + 1]}`
(`clusters`, `min_cosine` every `clusters.measure_every` steps).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import attnjax
from attnjax import checks, training
from attnjax.analysis import (
    power_iteration,
    slem,
    stationary_distribution,
)
from experiments import architectures
from experiments.lab import models
from experiments.lab.workdir import RunDir
from experiments.power_iteration import dynamics
from experiments.power_iteration.products import attention_products, worst_cases

HIGHEST = lax.Precision.HIGHEST
PARTS = ("fixed", "products", "clusters")
# Rates are fitted to d(k) above FLOOR_FACTOR * T * eps: the rounding error
# of one row of a product of T x T stochastic matrices is about T * eps, and
# d(k) flattens there.
FLOOR_FACTOR = 100.0


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run: a temperature of `fixed`, a model of `products` or an inverse temperature of `clusters`."""

    part: str
    temperature: float = 1.0
    architecture: str = ""
    trained: bool = False
    beta: float = 0.0

    @property
    def run_id(self) -> str:
        if self.part == "products":
            setting = "trained-causal" if self.trained else "untrained"
            return f"products-{setting}-{self.architecture}"
        if self.part == "clusters":
            return f"clusters-b{self.beta:g}"
        return f"fixed-t{self.temperature:g}"


def dtype_of(config):
    return jnp.float64 if config.float64 else jnp.float32


def rounding_floor(config) -> float:
    """The level `fit_rate` stops at: FLOOR_FACTOR x T x eps of the analysis dtype."""
    return FLOOR_FACTOR * config.fixed.seq_len * float(jnp.finfo(dtype_of(config)).eps)


def precision_context(config):
    """float64 for the analysis when `config.float64`, whatever the global x64 setting."""
    return jax.enable_x64(True) if config.float64 else contextlib.nullcontext()


# --------------------------------------------------------------------------
# Config -> runs (all validation happens here, before anything compiles)


def _check_number(name: str, value, low: float, high: float = math.inf) -> None:
    """`low < value < high`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < high:
        raise ValueError(f"{name} must be a number in ({low:g}, {high:g}), got {value!r}")


def _check_temperatures(name: str, temperatures) -> None:
    temperatures = tuple(temperatures)
    if not temperatures:
        raise ValueError(f"{name} must name at least one temperature")
    for t in temperatures:
        _check_number(name, t, 0.0)
    if len({f"{t:g}" for t in temperatures}) != len(temperatures):
        raise ValueError(f"{name} must be distinct, got {temperatures}")


def _check_betas(betas) -> None:
    betas = tuple(betas)
    if not betas:
        raise ValueError("clusters.betas must name at least one beta")
    for b in betas:
        _check_number("clusters.betas", b, 0.0)
    if list(betas) != sorted(set(betas)):
        raise ValueError(f"clusters.betas must be distinct and increasing, got {betas}")


def make_trainer(config, spec: RunSpec, task, causal: bool) -> training.Trainer:
    """The trainer of a products run: `products.num_layers` deep if trained, else
    `products.untrained_layers`."""
    p = config.products
    return models.make_trainer(
        p.model,
        p.train,
        task,
        architecture=spec.architecture,
        depth=p.num_layers if spec.trained else p.untrained_layers,
        causal=causal,
    )


def _grid(config) -> list[RunSpec]:
    grid = [RunSpec("fixed", temperature=float(t)) for t in config.fixed.temperatures]
    for arch in config.products.architectures:
        grid += [
            RunSpec("products", architecture=arch, trained=trained) for trained in (False, True)
        ]
    return grid + [RunSpec("clusters", beta=float(b)) for b in config.clusters.betas]


def specs(config) -> list[RunSpec]:
    """Every run of the study; raises ValueError on a bad config, before any compilation."""
    f, p, c = config.fixed, config.products, config.clusters
    checks.integer("seed", config.seed, 0)
    if not isinstance(config.float64, bool):
        raise ValueError(f"float64 must be True or False, got {config.float64!r}")
    _check_temperatures("fixed.temperatures", f.temperatures)
    checks.integer("fixed.num_matrices", f.num_matrices, 1)
    checks.integer("fixed.seq_len", f.seq_len, 2)
    checks.integer("fixed.head_dim", f.head_dim, 1)
    checks.integer("fixed.steps", f.steps, 2)
    _check_number("fixed.tolerance", f.tolerance, 0.0, 1.0)
    architectures.check_architectures("products.architectures", p.architectures)
    if len(set(p.architectures)) != len(p.architectures):
        raise ValueError(f"products.architectures must be distinct, got {tuple(p.architectures)}")
    checks.integer("products.num_seeds", p.num_seeds, 1)
    checks.integer("products.untrained_layers", p.untrained_layers, 1)
    checks.integer("products.measure_batch_size", p.measure_batch_size, 1)
    checks.integer("products.train.steps", p.train.steps, 1)
    checks.integer("products.train.log_every", p.train.log_every, 1)
    checks.integer("products.train.eval_batches", p.train.eval_batches, 1)
    if c.variant not in dynamics.VARIANTS:
        raise ValueError(f"clusters.variant must be one of {dynamics.VARIANTS}, got {c.variant!r}")
    _check_betas(c.betas)
    checks.integer("clusters.num_tokens", c.num_tokens, 2)
    checks.integer("clusters.dim", c.dim, 2)
    _check_number("clusters.dt", c.dt, 0.0, 1.0)
    checks.integer("clusters.measure_every", c.measure_every, 1)
    checks.integer("clusters.steps", c.steps, c.measure_every)
    if c.steps % c.measure_every:
        raise ValueError(
            f"clusters.steps ({c.steps}) must be a multiple of clusters.measure_every ({c.measure_every})"
        )
    checks.integer("clusters.num_seeds", c.num_seeds, 1)
    _check_number("clusters.radius", c.radius, 0.0, 2.0)
    _check_number("clusters.probe_time", c.probe_time, 0.0, c.steps * c.dt + 1e-9)
    grid = _grid(config)
    task = models.make_task(p.task)
    for spec in grid:
        if spec.part == "products":
            make_trainer(config, spec, task, causal=True)  # raises on a bad model/optimiser config
    return grid


def _key(config, part: str):
    return jax.random.fold_in(jax.random.key(config.seed), PARTS.index(part))


# --------------------------------------------------------------------------
# (a) One fixed matrix, iterated


def random_attention(key, seq_len: int, head_dim: int, temperature: float, dtype) -> jax.Array:
    """`A = softmax(Q Kᵀ / (√d τ))` `[T, T]` for Q, K `[T, d]` with iid N(0, 1) entries (one head)."""
    kq, kk = jax.random.split(key)
    q = jax.random.normal(kq, (seq_len, 1, head_dim), dtype)
    k = jax.random.normal(kk, (seq_len, 1, head_dim), dtype)
    return attnjax.attention_weights(q, k, temperature=temperature)[0].astype(dtype)


def distance_to_limit(a: jax.Array, pi: jax.Array, steps: int) -> jax.Array:
    """`d(k) = max_i ½ ‖e_iᵀ Aᵏ − π‖₁` for k = 0..steps: `a [T, T]`, `pi [T]` -> `[steps + 1]`.

    The worst-case total-variation distance of the chain from stationarity
    after k steps (Levin, Peres & Wilmer 2009, ch. 4), non-increasing in k
    and ~ C |λ₂|^k for large k. The rows of `Aᵏ` are renormalised after each
    product (an identity in exact arithmetic): a rounded softmax has row sums
    1 + O(eps), and without it `Aᵏ 1` would drift linearly in k.
    """

    def tv(m):
        return 0.5 * jnp.max(jnp.sum(jnp.abs(m - pi[None, :]), axis=-1))

    def step(m, _):
        m = jnp.matmul(m, a, precision=HIGHEST)
        m = m / jnp.sum(m, axis=-1, keepdims=True)
        return m, tv(m)

    eye = jnp.eye(a.shape[-1], dtype=a.dtype)
    _, distances = lax.scan(step, eye, None, length=steps)
    return jnp.concatenate([tv(eye)[None], distances])


@functools.partial(
    jax.jit, static_argnames=("seq_len", "head_dim", "temperature", "steps", "dtype")
)
def fixed_matrices(keys, *, seq_len: int, head_dim: int, temperature: float, steps: int, dtype):
    """For keys `[M]`: |λ₂| `[M]`, d(k) `[M, steps + 1]`, the v <- A v rate `[M]` and π `[M, T]`."""
    a = jax.vmap(lambda key: random_attention(key, seq_len, head_dim, temperature, dtype))(keys)
    pi = stationary_distribution(a)
    v0 = jax.vmap(lambda key: jax.random.normal(jax.random.fold_in(key, 1), (seq_len,), dtype))(
        keys
    )
    return {
        "slem": slem(a, pi=pi),
        "distance": jax.vmap(distance_to_limit, in_axes=(0, 0, None))(a, pi, steps),
        "vector_rate": power_iteration(a, v0, steps).rate,
        "pi": pi,
    }


def fit_rate(distance, floor: float) -> dict:
    """Geometric decay rate of `distance [K + 1]` (d(0), ..., d(K)).

    With k₁ the last step before d(k) first falls to `floor` (or K), fit
    `log d(k) ≈ c + k log r` by least squares over k ∈ [⌊k₁/2⌋, k₁]: the
    first half carries the transient of the other eigenvalues (their
    share decays like |λ₃/λ₂|^k), the second half the asymptotic rate.
    A complex pair ±λ₂ makes d(k) oscillate around C |λ₂|^k with a bounded
    factor, whose effect on the slope falls like 1/k₁. Returns the rate
    (NaN when fewer than three steps are above `floor`) and the fit range.
    """
    d = np.asarray(distance, dtype=np.float64)
    below = np.nonzero(d <= floor)[0]
    k1 = int(below[0]) - 1 if below.size else len(d) - 1
    if k1 < 2:
        return {"rate": math.nan, "fit_start": 0, "fit_end": k1, "floor_reached": bool(below.size)}
    ks = np.arange(k1 // 2, k1 + 1)
    slope = np.polyfit(ks, np.log(d[ks]), 1)[0]
    return {
        "rate": float(np.exp(slope)),
        "fit_start": int(ks[0]),
        "fit_end": k1,
        "floor_reached": bool(below.size),
    }


def fixed_run(config, spec: RunSpec, run: RunDir) -> list[dict]:
    f = config.fixed
    keys = jax.random.split(
        _key(config, "fixed"), f.num_matrices
    )  # the same Q, K at every temperature
    with precision_context(config):
        out = fixed_matrices(
            keys,
            seq_len=f.seq_len,
            head_dim=f.head_dim,
            temperature=spec.temperature,
            steps=f.steps,
            dtype=dtype_of(config),
        )
        out = jax.tree.map(np.asarray, out)
    rows = []
    for i in range(f.num_matrices):
        fit = fit_rate(out["distance"][i], rounding_floor(config))
        values = {"slem": out["slem"][i], "vector_rate": out["vector_rate"][i], **fit}
        rows += [{"matrix": i, "metric": k, "value": v} for k, v in values.items()]
        rows.append({"matrix": i, "metric": "distance", "values": out["distance"][i]})
    return rows


# --------------------------------------------------------------------------
# (b) Inhomogeneous products across depth


def _product_rows(metrics: dict, phase: str) -> list[dict]:
    """Per seed and chain: batch-mean values (`[L]` head-averaged, `[H, L]` per head) and
    the worst cases over the batch (and heads) of `_worst`."""
    rows = []
    for seed in range(metrics["mean"]["delta"].shape[0]):
        for chain in ("mean", "head"):
            m = {k: np.asarray(v[seed], np.float64) for k, v in metrics[chain].items()}
            base = {"phase": phase, "seed": seed, "chain": chain}
            for name, values in m.items():
                rows.append({**base, "metric": name, "values": values.mean(axis=0)})
            for name, values in worst_cases(m).items():
                rows.append({**base, "metric": name, "values": values})
    return rows


def _forward_fn(trainer: training.Trainer):
    """state `[S, ...]`, inputs `[B, T]` -> attention `[S, L, B, H, T, T]`."""

    def forward(state, inputs):
        _, inter = trainer.model(state)(inputs, return_intermediates=True)
        return inter["attention"]

    return jax.jit(jax.vmap(forward, in_axes=(0, None)))


def _measure_products(config, forward, state, inputs, phase: str, causal: bool) -> list[dict]:
    """Metrics `[S, B, ...]` of every seed's attention, seeds folded into the batch axis.

    Folded rather than vmapped: a vmap of `attention_products` inside
    `jax.enable_x64` deadlocked on CPU (jax 0.10.2) for causal attention.
    """
    attention = forward(state, inputs)  # [S, L, B, H, T, T]
    seeds, layers, batch = attention.shape[:3]
    folded = jnp.moveaxis(attention, 0, 1).reshape((layers, seeds * batch) + attention.shape[3:])
    with precision_context(config):
        metrics = attention_products(folded, dtype_of(config), causal)
        metrics = jax.tree.map(
            lambda v: np.asarray(v).reshape((seeds, batch) + v.shape[1:]), metrics
        )
    return _product_rows(metrics, phase)


def mode_accuracy(inputs, targets, weights, num_pairs: int) -> np.ndarray:
    """Per example `[B]`: the accuracy of predicting, at every scored position, the most frequent
    value among the context's pairs (ties: the smallest id), the best answer that ignores the
    query. `inputs`, `targets`, `weights` `[B, T]` of `attnjax.tasks.AssociativeRecall`, whose
    values sit at positions 1, 3, ..., 2N - 1."""
    values = np.asarray(inputs)[:, 1 : 2 * num_pairs : 2]
    mode = np.array([np.bincount(row).argmax() for row in values])
    weights = np.asarray(weights, np.float64)
    hits = (np.asarray(targets) == mode[:, None]) * weights
    return hits.sum(axis=1) / weights.sum(axis=1)


def _mode_baseline(trainer: training.Trainer, eval_keys, num_pairs: int) -> np.ndarray:
    """`[S]`: the mode-of-context accuracy (`mode_accuracy`) on each seed's held-out batches, the
    ones `SeedsRunner.evaluate` scores (one batch per key of `eval_keys [N, S]`; a batch drawn
    from a key alone is the same batch as inside the runner's vmap)."""
    n, s = eval_keys.shape
    per_seed = []
    for seed in range(s):
        accs = []
        for i in range(n):
            batch = trainer.task.batch(eval_keys[i, seed], trainer.batch_size)
            accs.append(mode_accuracy(batch.inputs, batch.targets, batch.weights, num_pairs))
        per_seed.append(np.mean(accs))
    return np.asarray(per_seed)


def products_run(config, spec: RunSpec, run: RunDir) -> list[dict]:
    """An untrained model measured without and with the causal mask (the same parameters), or a
    causal one after training."""
    p = config.products
    task = models.make_task(p.task)
    root = _key(config, "products")
    init_keys = jax.random.split(jax.random.fold_in(root, 0), p.num_seeds)
    data_keys = jax.random.split(jax.random.fold_in(root, 1), p.num_seeds)
    eval_keys = jax.random.split(jax.random.fold_in(root, 2), p.num_seeds)
    inputs = task.batch(jax.random.fold_in(root, 3), p.measure_batch_size).inputs
    if not spec.trained:
        # One initialisation; the mask is a flag of the model, not of its parameters.
        state = training.SeedsRunner(make_trainer(config, spec, task, causal=True)).init(init_keys)
        rows = []
        for phase, causal in (("untrained", False), ("init", True)):
            forward = _forward_fn(make_trainer(config, spec, task, causal=causal))
            rows += _measure_products(config, forward, state, inputs, phase, causal=causal)
        return rows
    trainer = make_trainer(config, spec, task, causal=True)
    runner = training.SeedsRunner(trainer)
    state = training.fit(
        runner,
        runner.init(init_keys),
        data_keys,
        total_steps=p.train.steps,
        log_every=p.train.log_every,
        progress=run.log,
    )
    rows = _measure_products(config, _forward_fn(trainer), state, inputs, "trained", causal=True)
    batch_keys = training.batch_keys(eval_keys, 0, p.train.eval_batches)
    evaluation = runner.evaluate(state, batch_keys)
    final = {
        "eval_accuracy": evaluation["eval_accuracy"],
        "eval_loss": evaluation["eval_loss"],
        "mode_accuracy": _mode_baseline(trainer, batch_keys, p.task.num_pairs),
        "chance_accuracy": np.full(p.num_seeds, task.chance_accuracy),
        "diverged": np.asarray(state.diverged),
    }
    return rows + [
        {"phase": "trained", "seed": seed, "metric": name, "value": np.asarray(values)[seed]}
        for name, values in final.items()
        for seed in range(p.num_seeds)
    ]


# --------------------------------------------------------------------------
# (c) Self-attention dynamics on the sphere (Geshkovski et al. 2023)


def clusters_run(config, spec: RunSpec, run: RunDir) -> list[dict]:
    c = config.clusters
    dtype = dtype_of(config)
    keys = jax.random.split(_key(config, "clusters"), c.num_seeds)  # the same x(0) at every beta
    with precision_context(config):
        x0 = jax.vmap(lambda key: dynamics.unit_tokens(key, c.num_tokens, c.dim, dtype))(keys)
        integrate = functools.partial(
            dynamics.sphere_dynamics,
            variant=c.variant,
            num_measures=c.steps // c.measure_every,
            measure_every=c.measure_every,
        )
        scalars = [jnp.asarray(v, dtype) for v in (spec.beta, c.dt, c.radius)]
        out = jax.tree.map(
            np.asarray, jax.vmap(integrate, in_axes=(0, None, None, None))(x0, *scalars)
        )
    return [
        {"seed": s, "metric": name, "values": values[s]}
        for name, values in out.items()
        for s in range(c.num_seeds)
    ]


# --------------------------------------------------------------------------
# The study

RUNNERS = {"fixed": fixed_run, "products": products_run, "clusters": clusters_run}


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    return RUNNERS[spec.part](config, spec, run)
