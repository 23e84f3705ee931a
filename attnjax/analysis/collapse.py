"""Dong et al.'s rank-collapse theory, quantitatively: residuals, rate fits, the bound.

Dong, Cordonnier & Loukas (2021), "Attention is not all you need: pure
attention loses rank doubly exponentially with depth" (ICML), measure rank
collapse by the residual `res(X) = X - 1 xᵀ` in their "composite norm"
`‖M‖_{1,∞} = sqrt(‖M‖_1 ‖M‖_∞)` (`‖M‖_1` the largest column abs-sum,
`‖M‖_∞` the largest row abs-sum; not a norm, it fails the triangle
inequality: see `attnjax.analysis.residual.composite_norm`). Their theorem for one single-head
self-attention layer `SA(X) = softmax(X W_QK Xᵀ / sqrt(d_qk)) X W_V` is

    ‖res(SA(X))‖_{1,∞} <= (4 γ β / sqrt(d_qk)) ‖res(X)‖_{1,∞}^3,
    ‖W_QK‖_1 ‖W_V‖_{1,∞} <= β,

with `γ` a term that depends on the attention entries (a small constant in
most cases, see their appendix); for H heads whose outputs are summed
(`W_V^h` the value matrix times the head's slice of the output projection)
the corollary multiplies the constant by H, and stacking L layers gives
`‖res(X_L)‖ <= c^((3^L - 1)/2) ‖res(X_0)‖^(3^L)`: the logarithm of
`1/‖res‖` grows by a factor 3 per layer once the bound is below 1.

The residual itself, absolute and relative, in either norm, and the
composite quantity are defined in `attnjax.analysis.residual`
(`residual_norm`, `residual_ratio`, `composite_norm`; mean-centred, which
bounds the paper's `min_x ‖X - 1xᵀ‖` from above).

What is here: the layer constant of the bound from the
actual weights (`dong_constant`, `head_matrices`), the doubly exponential
prediction (`doubly_exponential_sequence`), least-squares fits of the
per-layer growth of `log(1/r_l)` and of a geometric rate with confidence
intervals (`fit_log_log`, `fit_geometric`, `is_doubly_exponential`), the
variance of the attention logits seen by the softmax (`logit_variance`),
and random single-head paths through a network's attention
(`sample_paths`, `path_products`) for the path-length experiment.

The fits are host-side statistics of a measured profile (NumPy, float64);
the other functions are pure and jit-able.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from attnjax.analysis._linalg import HIGHEST, as_matrix, max_column_sum
from attnjax.analysis.residual import composite_norm
from attnjax.result_repr import compact_repr

# Dong et al.'s exponent: log(1/r) grows by this factor per layer.
DONG_GROWTH = 3.0
# `is_doubly_exponential` asks every consecutive growth of log(1/r) over the
# resolved layers, and the lower end of the interval of the fitted growth
# factor, to reach this. A geometric sequence r_l = r_0 q^l with r_0 <= 1 has
# log(1/r_l) = a + b l (a >= 0), whose consecutive ratios
# (a + (l+1) b) / (a + l b) are <= 2 from l = 1 on and fall to 1, so with
# three resolved layers at least one of them is below 2. (From l = 0 the
# ratio (a + b) / a can be large, which is why one ratio is no test.)
DOUBLY_EXPONENTIAL_MIN_GROWTH = 2.0
# float64 rounding: a relative residual below this is not resolved.
FLOAT64_FLOOR = 1e-14


# --------------------------------------------------------------------------
# The bound of Dong et al. from the weights


def head_matrices(w_q, w_k, w_v, w_o, num_heads: int) -> tuple[jax.Array, jax.Array]:
    """Per-head `W_QK^h = W_q^h W_k^hᵀ` and `W_V^h = W_v^h W_o^h`, each `[H, D, D]`.

    Args:
      w_q: `[D, H Dh]` query projection kernel (`q = x W_q`), the columns of
        head h being `h Dh : (h + 1) Dh`.
      w_k: `[D, H Dh]` key projection kernel, laid out as `w_q`.
      w_v: `[D, H Dh]` value projection kernel, laid out as `w_q`.
      w_o: `[H Dh, D]` output kernel (rows of head h likewise).
      num_heads: H, dividing `H Dh`.

    Multi-head attention without biases is then `Σ_h P_h X W_V^h` with
    `P_h = softmax(X W_QK^h Xᵀ / sqrt(Dh))`. Biases do not change the
    residual: value and output biases add the same row to every token, a
    key bias shifts each row of logits by a constant, and a query bias adds a
    per-key shift, the kind of column term the bound already allows.
    """
    w_q, w_k, w_v, w_o = (jnp.asarray(w) for w in (w_q, w_k, w_v, w_o))
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        if w.ndim != 2:
            raise ValueError(f"{name} must be a matrix; got shape {w.shape}")
    d, width = w_q.shape
    if w_k.shape != (d, width) or w_v.shape != (d, width) or w_o.shape != (width, d):
        raise ValueError(
            f"need w_q, w_k, w_v [D, H Dh] and w_o [H Dh, D]; got {w_q.shape}, {w_k.shape}, "
            f"{w_v.shape}, {w_o.shape}"
        )
    if not isinstance(num_heads, int) or num_heads < 1 or width % num_heads:
        raise ValueError(
            f"num_heads must be a positive int dividing H Dh = {width}; got {num_heads!r}"
        )
    dh = width // num_heads

    def split(w):
        return jnp.moveaxis(w.reshape(d, num_heads, dh), 1, 0)

    q, k, v = split(w_q), split(w_k), split(w_v)
    o = w_o.reshape(num_heads, dh, d)
    w_qk = jnp.einsum("hdk,hek->hde", q, k, precision=HIGHEST)
    w_vo = jnp.einsum("hdk,hke->hde", v, o, precision=HIGHEST)
    return w_qk, w_vo


@jax.jit
def dong_constant(w_qk, w_v, head_dim, gamma=1.0) -> jax.Array:
    """The constant `c` of one layer's bound `‖res(SA(X))‖_{1,∞} <= c ‖res(X)‖_{1,∞}^3`.

    `c = 4 γ Σ_h ‖W_QK^h‖_1 ‖W_V^h‖_{1,∞} / sqrt(d_qk)`: Dong et al. 2021,
    Theorem 2.2, for one head; for H heads, the sum of the per-head
    constants, which is at most the corollary's `4 γ H β / sqrt(d_qk)` with
    `β = max_h ‖W_QK^h‖_1 ‖W_V^h‖_{1,∞}`. The sum does not follow from a
    triangle inequality over the summed heads: `‖·‖_{1,∞}` has none (see
    `attnjax.analysis.residual.composite_norm`); a bound on a sum of heads
    goes through `‖·‖_1` and `‖·‖_∞` separately. A softmax temperature τ
    divides `W_QK` by τ.

    Args:
      w_qk: `[..., H, D, D]`; w_v: `[..., H, D, D]` (see `head_matrices`).
      head_dim: `d_qk`, the key width the logits are scaled by.
      gamma: Dong et al.'s `γ`; 1 unless given.

    Returns:
      `[...]`.
    """
    w_qk, w_v = as_matrix(w_qk, "w_qk", square=True), as_matrix(w_v, "w_v", square=True)
    if w_qk.ndim < 3 or w_qk.shape != w_v.shape:
        raise ValueError(
            f"w_qk and w_v must both be [..., H, D, D]; got {w_qk.shape} and {w_v.shape}"
        )
    beta = max_column_sum(w_qk) * composite_norm(w_v)
    return 4.0 * gamma * jnp.sum(beta, axis=-1) / jnp.sqrt(head_dim)


def doubly_exponential_sequence(
    r0: float, num_layers: int, growth: float = DONG_GROWTH, constant: float = 1.0
) -> np.ndarray:
    """The doubly exponential prediction `r_l`, `l = 0..L`: `[L + 1]` float64.

    Iterates `r_l = constant · r_(l-1)^growth`, i.e. `r_l =
    constant^((g^l - 1)/(g - 1)) r_0^(g^l)`, Dong et al.'s L-layer bound for
    `g = 3` and `constant = 4 γ β / sqrt(d_qk)`. Computed in log space; values
    below the smallest float64 become 0.
    """
    if not r0 > 0:
        raise ValueError(f"r0 must be > 0; got {r0!r}")
    if not isinstance(num_layers, int) or num_layers < 0:
        raise ValueError(f"num_layers must be an int >= 0; got {num_layers!r}")
    if not growth > 0 or not constant > 0:
        raise ValueError(
            f"growth and constant must be > 0; got growth={growth!r}, constant={constant!r}"
        )
    logs = [math.log(r0)]
    for _ in range(num_layers):
        logs.append(math.log(constant) + growth * logs[-1])
    return np.exp(np.asarray(logs, dtype=np.float64))


# --------------------------------------------------------------------------
# Fits of a measured profile


class RateFit(NamedTuple):
    """A least-squares line `y_l = intercept + slope · l` over the resolved layers.

    `rate = exp(slope)` and its interval `[rate_low, rate_high]` (from the
    slope's Student-t interval at the requested confidence; NaN with fewer
    than 3 points). `layers`: the layers used; `num_points`: observations
    (layers times replicates). `step_growth`: for `fit_log_log`, the
    consecutive ratios `log(1/r_(l+1)) / log(1/r_l)` over `layers` of the
    replicates' mean `log(1/r)` (empty for `fit_geometric`).
    """

    slope: float
    intercept: float
    stderr: float
    rate: float
    rate_low: float
    rate_high: float
    layers: tuple
    num_points: int
    step_growth: tuple = ()

    __repr__ = compact_repr


def _as_profiles(residuals, name: str) -> np.ndarray:
    r = np.asarray(residuals, dtype=np.float64)
    if r.ndim == 1:
        r = r[None]
    if r.ndim != 2 or r.shape[1] < 2:
        raise ValueError(
            f"{name} must be [L + 1] or [N, L + 1] with L >= 1; got shape {np.shape(residuals)}"
        )
    return r


def _line_fit(x: np.ndarray, y: np.ndarray, layers: tuple, confidence: float) -> RateFit:
    nan = float("nan")
    n = x.size
    if len(set(x.tolist())) < 2:
        return RateFit(nan, nan, nan, nan, nan, nan, layers, n)
    slope, intercept = np.polyfit(x, y, 1)
    if n < 3:
        return RateFit(
            float(slope), float(intercept), nan, float(np.exp(slope)), nan, nan, layers, n
        )
    from scipy import stats

    resid = y - (intercept + slope * x)
    s2 = float(np.sum(resid**2)) / (n - 2)
    stderr = math.sqrt(s2 / float(np.sum((x - x.mean()) ** 2)))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 2)) * stderr
    return RateFit(
        float(slope),
        float(intercept),
        stderr,
        float(np.exp(slope)),
        float(np.exp(slope - half)),
        float(np.exp(slope + half)),
        layers,
        n,
    )


def _resolved_layers(r: np.ndarray, floor: float, upper: float) -> tuple:
    """The consecutive layers from the first with every replicate in (floor, upper)."""
    ok = np.all((r > floor) & (r < upper), axis=0)
    layers = []
    for layer in range(r.shape[1]):
        if ok[layer]:
            layers.append(layer)
        elif layers:
            break
    return tuple(layers)


def _check_fit_args(floor, confidence):
    if not floor > 0:
        raise ValueError(f"floor must be > 0; got {floor!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence!r}")


def fit_log_log(residuals, *, floor: float = FLOAT64_FLOOR, confidence: float = 0.95) -> RateFit:
    """Per-layer growth factor of `log(1/r_l)`: fit `log log(1/r_l) = a + s l`.

    Doubly exponential decay `r_l = c^(...) r_0^(g^l)` makes `log(1/r_l)` grow
    like `g^l`, so `rate = exp(s)` estimates `g` (Dong et al.: 3); geometric
    decay `r_l = r_0 q^l` makes it grow linearly and gives a rate that falls
    towards 1 as more layers are fitted.

    Args:
      residuals: `[L + 1]` or `[N, L + 1]` (N replicates, e.g. examples),
        relative residuals per layer (index 0 the input).
      floor: layers where any replicate is at or below this are not resolved
        (float64 rounding: ~1e-14; float32: ~1e-6); layers with `r >= 1`
        have no `log(1/r) > 0`. The fit uses the first run of consecutive
        layers inside `(floor, 1)`.
      confidence: of the interval `[rate_low, rate_high]`.
    """
    _check_fit_args(floor, confidence)
    r = _as_profiles(residuals, "residuals")
    layers = _resolved_layers(r, floor, 1.0)
    x = np.repeat(np.asarray(layers, dtype=np.float64)[None], r.shape[0], axis=0).ravel()
    logs = np.log(1.0 / r[:, list(layers)]) if layers else np.zeros((r.shape[0], 0))
    mean_logs = logs.mean(axis=0)
    step_growth = tuple(float(b / a) for a, b in zip(mean_logs[:-1], mean_logs[1:]))
    return _line_fit(x, np.log(logs).ravel(), layers, confidence)._replace(step_growth=step_growth)


def fit_geometric(
    residuals, *, floor: float = FLOAT64_FLOOR, confidence: float = 0.95, start: int = 0
) -> RateFit:
    """Geometric rate of decay: fit `log r_l = a + s l`; `rate = exp(s)` is `q` in `r_l ~ q^l`.

    Same arguments as `fit_log_log` (layers from `start` on, every replicate
    above `floor`; no upper limit), e.g. to compare with the per-layer
    Dobrushin coefficient τ, which bounds the contraction of one
    row-stochastic layer.
    """
    _check_fit_args(floor, confidence)
    r = _as_profiles(residuals, "residuals")
    if not isinstance(start, int) or not 0 <= start < r.shape[1]:
        raise ValueError(f"start must be an int in [0, {r.shape[1]}); got {start!r}")
    layers = tuple(start + layer for layer in _resolved_layers(r[:, start:], floor, np.inf))
    x = np.repeat(np.asarray(layers, dtype=np.float64)[None], r.shape[0], axis=0).ravel()
    y = np.log(r[:, list(layers)]).ravel() if layers else np.zeros(0)
    return _line_fit(x, y, layers, confidence)


def is_doubly_exponential(fit: RateFit, min_growth: float = DOUBLY_EXPONENTIAL_MIN_GROWTH) -> bool:
    """Whether a `fit_log_log` fit supports doubly exponential decay.

    Needs at least 3 resolved layers, every consecutive growth of `log(1/r)`
    (`fit.step_growth`) and the lower end of the fitted growth factor's
    interval at or above `min_growth` (default 2: geometric decay cannot
    reach it, see `DOUBLY_EXPONENTIAL_MIN_GROWTH`).
    """
    return (
        len(fit.layers) >= 3
        and bool(np.isfinite(fit.rate_low))
        and fit.rate_low >= min_growth
        and min(fit.step_growth) >= min_growth
    )


# --------------------------------------------------------------------------
# Attention statistics


@jax.jit
def logit_variance(weights) -> jax.Array:
    """Variance across keys of the logits behind attention weights, mean over queries.

    Softmax is invariant to a per-query shift, so `log a_ij` are the logits
    up to that shift and `Var_j log a_ij` (over the keys with `a_ij > 0`) is
    the variance of `q_i · k_j / sqrt(d)` across keys. With unit-variance
    independent query and key entries it is 1 (the scaling argument of
    Vaswani et al. 2017). `weights [..., T, S]` -> `[...]`; rows with fewer
    than two positive weights are left out (0 if none is left).

    Invalid input is not checked: negative entries count like zeros (no logit); NaN entries give
    NaN.
    """
    weights = as_matrix(weights, "weights")
    positive = weights > 0
    logs = jnp.where(positive, jnp.log(jnp.where(positive, weights, 1)), 0)
    count = jnp.sum(positive, axis=-1)
    mean = jnp.sum(logs, axis=-1) / jnp.maximum(count, 1)
    var = jnp.sum(
        jnp.where(positive, jnp.square(logs - mean[..., None]), 0), axis=-1
    ) / jnp.maximum(count, 1)
    rows = count > 1
    return jnp.sum(jnp.where(rows, var, 0), axis=-1) / jnp.maximum(jnp.sum(rows, axis=-1), 1)


def sample_paths(
    key, *, num_layers: int, num_heads: int, length: int, num_paths: int, num_examples: int = 1
) -> dict[str, jax.Array]:
    """Random single-head paths of `length` layers (Dong et al. 2021, §4.2).

    Each path picks `length` distinct layers (sorted), one head per chosen
    layer and one example, uniformly. Returns `{"layers": [N, k] int32,
    "heads": [N, k] int32, "examples": [N] int32}`.
    """
    for name, value in (
        ("num_layers", num_layers),
        ("num_heads", num_heads),
        ("num_paths", num_paths),
        ("num_examples", num_examples),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int; got {value!r}")
    if not isinstance(length, int) or not 1 <= length <= num_layers:
        raise ValueError(f"length must be an int in [1, num_layers={num_layers}]; got {length!r}")
    k_layers, k_heads, k_examples = jax.random.split(key, 3)
    order = jax.vmap(lambda k: jax.random.permutation(k, num_layers))(
        jax.random.split(k_layers, num_paths)
    )
    layers = jnp.sort(order[:, :length], axis=-1).astype(jnp.int32)
    heads = jax.random.randint(k_heads, (num_paths, length), 0, num_heads, dtype=jnp.int32)
    examples = jax.random.randint(k_examples, (num_paths,), 0, num_examples, dtype=jnp.int32)
    return {"layers": layers, "heads": heads, "examples": examples}


@jax.jit
def path_products(attention, layers, heads, examples) -> jax.Array:
    """Products `A_(l_k) ... A_(l_1)` of the single-head attention matrices along paths.

    Args:
      attention: `[L, B, H, T, T]` row-stochastic.
      layers: `[N, k]`, ascending along k (see `sample_paths`).
      heads: `[N, k]`.
      examples: `[N]`.

    Returns:
      `[N, T, T]`, row-stochastic: the first chosen layer acts first, as in
      the network (`X_l = A_l X_(l-1) ...`).
    """
    attention = jnp.asarray(attention)
    if attention.ndim != 5 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(f"attention must be [L, B, H, T, T]; got shape {attention.shape}")
    mats = attention[layers, examples[:, None], heads]  # [N, k, T, T]

    def step(p, a):
        return jnp.matmul(a, p, precision=HIGHEST), None

    eye = jnp.broadcast_to(
        jnp.eye(attention.shape[-1], dtype=attention.dtype), mats.shape[:1] + mats.shape[2:]
    )
    out, _ = jax.lax.scan(step, eye, jnp.moveaxis(mats, 1, 0))
    return out
