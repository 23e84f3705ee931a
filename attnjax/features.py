"""Feature maps for kernelized (linear) attention, and random projections.

Linear attention replaces the softmax similarity exp(q.k / sqrt(D)) by a
kernel sim(q, k) = phi(q) . phi(k) with a feature map phi: R^D -> R^M
(Katharopoulos et al. 2020, "Transformers are RNNs"). Then

    out_t = sum_s sim(q_t, k_s) v_s / sum_s sim(q_t, k_s)
          = phi(q_t)^T (sum_s phi(k_s) v_s^T) / phi(q_t)^T (sum_s phi(k_s)),

which costs O(T M Dv) instead of O(T S Dv) (see `attnjax.linear`).

The feature-map contract
------------------------
A feature map is a pure callable

    phi(x, *, is_query: bool = False) -> features

taking `x` `[..., D]` to `[..., M]`. `is_query` tells it whether `x` holds
queries or keys; only `favor_plus` uses it (its stabiliser, see there). Random
feature maps are closed over an explicit `[M, D]` projection matrix: drawing
new features means building a new map from a new PRNG key; nothing is hidden or
mutable. `call_feature_map` also accepts plain `phi(x)` callables.

A positive map built from exp may also carry its logarithm as an attribute,
`phi.log(x, *, is_query=False)` = log phi(x) `[..., M]` (`elu_plus_one` and
`favor_plus` do; read it with `call_log_feature_map`). exp underflows to 0 or
overflows where the log is still an ordinary number (exp(-1e4)), and linear
attention's output is unchanged by a common factor on the features (see
`attnjax.linear`), so `attnjax.linear` rescales in log space before taking exp
and such features never vanish there.

Maps provided:

* `elu_plus_one`: elu(x) + 1 > 0, M = D (Katharopoulos et al. 2020).
* `relu`: max(x, 0) >= 0, M = D.
* `relu_random(W)`: max(W x, 0) / sqrt(M) >= 0, ReLU random features
  (Choromanski et al. 2021); E[phi(q).phi(k)] is the first-order arc-cosine kernel (Cho & Saul
  2009), not the softmax kernel.
* `favor_plus(W)`: positive random features for the softmax kernel,
  E[phi(q).phi(k)] = exp(q.k / sqrt(D)) (Choromanski et al. 2021, "Rethinking
  attention with Performers").
* `trig_random(W)`: sin/cos random features for the same softmax kernel
  (Rahimi & Recht 2007); NOT positive, see its docstring.

Random projections: `gaussian_random_matrix` (iid N(0, 1) rows) and
`orthogonal_random_matrix` (block-orthogonal rows, lower estimator variance).
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Callable, Optional, Protocol

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

# Cap on the exponent of a stabilised FAVOR+ key feature: exp(40) ~ 2e17 leaves
# float32 (max ~3e38) room for sums of 1e15 such terms times values up to 1e6.
_KEY_EXPONENT_CAP = 40.0


class FeatureMap(Protocol):
    """phi(x `[..., D]`, *, is_query) -> `[..., M]`; positive maps may add `log` (module doc)."""

    def __call__(self, x: Array, *, is_query: bool = False) -> Array: ...


# --------------------------------------------------------------------------
# Calling a feature map


def _accepts_is_query(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return False
    return any(p.name == "is_query" or p.kind is p.VAR_KEYWORD for p in params)


def _call(fn: Callable, x: Array, is_query: bool, name: str) -> Array:
    """fn(x) `[..., M]` (with `is_query` when fn takes it), checked: floating, leading dims kept."""
    out = fn(x, is_query=is_query) if _accepts_is_query(fn) else fn(x)
    if not hasattr(out, "shape") or not jnp.issubdtype(out.dtype, jnp.floating):
        raise TypeError(f"{name} must return a floating-point array, got {out!r:.80}")
    if out.ndim != x.ndim or out.shape[:-1] != x.shape[:-1]:
        raise ValueError(
            f"{name} must map [..., D] to [..., M] keeping the leading dims "
            f"(input shape {tuple(x.shape)}, output shape {tuple(out.shape)})"
        )
    return out


def call_feature_map(feature_map: Callable, x: Array, *, is_query: bool) -> Array:
    """Applies `feature_map` to `x` `[..., D]` and checks the result `[..., M]`.

    Maps that take no `is_query` keyword are called as `feature_map(x)`.

    Raises:
      TypeError: `feature_map` is not callable or returns a non-float array.
      ValueError: the result does not keep the leading dims of `x`.
    """
    if not callable(feature_map):
        raise TypeError(f"feature_map must be callable, got {type(feature_map).__name__}")
    return _call(feature_map, x, is_query, "feature_map")


def call_log_feature_map(feature_map: Callable, x: Array, *, is_query: bool) -> Optional[Array]:
    """log phi(x) `[..., M]` from the map's `log` attribute, or None if it has none.

    Checked as `call_feature_map` checks phi(x). A map without `log` (relu, the
    random maps other than FAVOR+, any plain callable) gives None: its features
    are only available as phi(x).
    """
    log = getattr(feature_map, "log", None)
    if log is None:
        return None
    if not callable(log):
        raise TypeError(f"feature_map.log must be callable, got {type(log).__name__}")
    return _call(log, x, is_query, "feature_map.log")


def num_features(feature_map: Callable, dim: int) -> int:
    """M, the number of features `feature_map` gives for inputs of size `dim` (no compute)."""
    spec = jax.ShapeDtypeStruct((dim,), jnp.float32)
    return int(
        jax.eval_shape(lambda x: call_feature_map(feature_map, x, is_query=False), spec).shape[-1]
    )


# --------------------------------------------------------------------------
# Deterministic feature maps (M = D)


def elu_plus_one(x: Array, *, is_query: bool = False) -> Array:
    """phi(x) = elu(x) + 1 > 0, elementwise; `[..., D]` -> `[..., D]`.

    The feature map of Katharopoulos et al. 2020 ("Transformers are RNNs"):
    x + 1 for x > 0, exp(x) otherwise. Computed as exp(x), not as
    expm1(x) + 1, which in float32 loses every digit below x ~ -17. exp(x)
    itself underflows to 0 below x ~ -87 (float32); `elu_plus_one.log` (x for
    x <= 0, log1p(x) above) does not, and `attnjax.linear` uses it.
    `is_query` is ignored.
    """
    del is_query
    return jnp.where(x > 0, x + jnp.ones((), x.dtype), jnp.exp(jnp.minimum(x, 0)))


def _log_elu_plus_one(x: Array, *, is_query: bool = False) -> Array:
    """log(elu(x) + 1): x for x <= 0, log1p(x) above; `[..., D]` -> `[..., D]`."""
    del is_query
    return jnp.where(x > 0, jnp.log1p(jnp.maximum(x, 0)), x)


elu_plus_one.log = _log_elu_plus_one


def relu(x: Array, *, is_query: bool = False) -> Array:
    """phi(x) = max(x, 0) >= 0, elementwise; `[..., D]` -> `[..., D]`.

    A query with no positive coordinate has phi(q) = 0 and attends to nothing
    (zero output). `is_query` is ignored.
    """
    del is_query
    return jax.nn.relu(x)


# --------------------------------------------------------------------------
# Random feature maps


def _check_projection(projection: Array) -> Array:
    if not hasattr(projection, "shape") or not hasattr(projection, "dtype"):
        raise TypeError(f"projection must be an array [M, D], got {type(projection).__name__}")
    if projection.ndim != 2:
        raise ValueError(f"projection must have shape [M, D], got shape {tuple(projection.shape)}")
    if not jnp.issubdtype(projection.dtype, jnp.floating):
        raise TypeError(f"projection must be floating-point, got dtype {projection.dtype}")
    return projection


def _project(x: Array, projection: Array, scale: float = 1.0) -> tuple[Array, Array]:
    """x `[..., D]` -> (x' = scale * x, W x' `[..., M]`), both in at least float32."""
    if x.shape[-1] != projection.shape[-1]:
        raise ValueError(
            f"input dim D={x.shape[-1]} does not match the projection's "
            f"(x.shape={tuple(x.shape)}, projection.shape={tuple(projection.shape)})"
        )
    dtype = jnp.promote_types(jnp.promote_types(x.dtype, projection.dtype), jnp.float32)
    x = x.astype(dtype) * jnp.asarray(scale, dtype)
    wx = jnp.einsum(
        "...d,md->...m", x, projection.astype(dtype), precision=jax.lax.Precision.HIGHEST
    )
    return x, wx


def relu_random(projection: Array) -> FeatureMap:
    """ReLU random features phi(x) = max(W x, 0) / sqrt(M); `[..., D]` -> `[..., M]`.

    The ReLU random features of the Performer's generalized attention
    (Choromanski et al. 2021, "Rethinking attention with Performers"), with W `[M, D]` (e.g. from
    `gaussian_random_matrix`). With Gaussian rows, E[phi(q).phi(k)] is the
    first-order arc-cosine kernel |q||k| (sin t + (pi - t) cos t) / (2 pi),
    t = angle(q, k) (Cho & Saul 2009): positive, but not the softmax kernel.
    Computed in at least float32.
    """
    projection = _check_projection(projection)
    scale = 1.0 / math.sqrt(projection.shape[0])

    def phi(x: Array, *, is_query: bool = False) -> Array:
        del is_query
        _, wx = _project(x, projection)
        return jax.nn.relu(wx) * jnp.asarray(scale, wx.dtype)

    return phi


def favor_plus(projection: Array, *, stabilize: bool = True) -> FeatureMap:
    """FAVOR+ positive random features for the softmax kernel; `[..., D]` -> `[..., M]`.

    With x' = x / D^(1/4) (the scaling lives here, so the kernel is the one of
    `dot_product_attention` with its default scale 1/sqrt(D)) and rows w_i of
    W `[M, D]` distributed as N(0, I_D) (`gaussian_random_matrix`, or
    `orthogonal_random_matrix` with 'chi' norms),

        phi(x)_i = exp(w_i . x' - |x'|^2 / 2) / sqrt(M),
        E[phi(q) . phi(k)] = exp(q . k / sqrt(D))

    (Choromanski et al. 2021, Lemma 1), and every feature is > 0, so the
    linear-attention normaliser is positive.

    Stabiliser (`stabilize=True`, the default). The exponent can be large or
    very negative. The query shift below multiplies phi(q) by a factor that
    cancels between the numerator and the normaliser of linear attention, so
    the attention output and weights are unchanged (up to rounding), though
    raw kernel values phi(q).phi(k) are rescaled (use `stabilize=False` to
    estimate the kernel itself):

    * queries (`is_query=True`): subtract the row maximum of the exponent over
      features, max_i w_i . q' - |q'|^2 / 2. It depends on that query alone,
      and a per-query factor cancels in that query's output row. The largest
      feature is then exactly 1 / sqrt(M), so queries never underflow.
    * keys: a per-key factor would NOT cancel (it reweights that key), and the
      Performer choice, subtracting a maximum over all positions, lets a
      future key change the scale (and so the rounding and underflow) of past
      ones. Keys get no shift: the -|k'|^2/2 term already bounds the exponent,
      w . k' - |k'|^2 / 2 <= |w|^2 / 2, so typical keys give features of order
      one at any D (no underflow). The exponent is only clipped at 40, so a
      feature never exceeds exp(40) / sqrt(M) and float32 sums cannot
      overflow. The clip reads that key alone, so no information flows between
      positions. It is exact whenever |w_i|^2 <= 80 (always, for 'sqrt_d'
      rows and D <= 80) and otherwise only touches keys that nearly align with
      a long w_i (|k| around |w_i| D^(1/4)), far outside moderate logits.

    The query shift is held out of the gradient (it cancels in the outputs).

    In linear attention (`attnjax.linear`) neither the shift nor the clip is
    used: it reads `phi.log`, the exact log phi(x) = w_i . x' - |x'|^2 / 2 -
    log(M) / 2 (no stabiliser), and rescales every query and every set of keys
    by powers of two before taking exp, so keys whose features are all below
    exp(-87) (float32: keys 100x the scale of the queries) still count.

    Args:
      projection: W `[M, D]`.
      stabilize: apply the stabiliser described above to phi(x).

    Returns:
      phi(x, *, is_query=False) -> `[..., M]` in at least float32, with
      `phi.log(x, *, is_query=False)` -> log phi(x) `[..., M]`.
    """
    projection = _check_projection(projection)
    num, dim = projection.shape
    log_scale = -0.5 * math.log(num)

    def log_phi(x: Array, *, is_query: bool = False) -> Array:
        del is_query
        x, wx = _project(x, projection, dim**-0.25)
        exponent = wx - 0.5 * jnp.sum(jnp.square(x), axis=-1, keepdims=True)
        return exponent + jnp.asarray(log_scale, exponent.dtype)

    def phi(x: Array, *, is_query: bool = False) -> Array:
        exponent = log_phi(x)
        if stabilize and is_query:
            exponent = exponent - jax.lax.stop_gradient(jnp.max(exponent, axis=-1, keepdims=True))
            exponent = exponent + jnp.asarray(log_scale, exponent.dtype)
        elif stabilize:
            cap = _KEY_EXPONENT_CAP + log_scale
            exponent = jnp.minimum(exponent, jnp.asarray(cap, exponent.dtype))
        return jnp.exp(exponent)

    phi.log = log_phi
    return phi


def trig_random(projection: Array) -> FeatureMap:
    """Trigonometric random features for the softmax kernel; `[..., D]` -> `[..., 2M]`.

    Random Fourier features (Rahimi & Recht 2007) estimate the Gaussian kernel,
    E[cos(w.(a - b))] = exp(-|a - b|^2 / 2) for w ~ N(0, I); multiplying by
    exp(|a|^2/2) exp(|b|^2/2) turns it into the softmax kernel. With
    x' = x / D^(1/4) and W `[M, D]`,

        phi(x) = exp(|x'|^2 / 2) [cos(W x'), sin(W x')] / sqrt(M),
        E[phi(q) . phi(k)] = exp(q . k / sqrt(D)).

    These features are NOT positive: phi(q).phi(k) can be negative, and the
    linear-attention normaliser sum_s phi(q).phi(k_s) can vanish or change
    sign, making outputs arbitrarily large. They are provided to compare kernel
    estimators with `favor_plus` (Choromanski et al. 2021 §2.3), not for
    training. Computed in at least float32; `is_query` is ignored.
    """
    projection = _check_projection(projection)
    num, dim = projection.shape
    scale = 1.0 / math.sqrt(num)

    def phi(x: Array, *, is_query: bool = False) -> Array:
        del is_query
        x, wx = _project(x, projection, dim**-0.25)
        radial = jnp.exp(0.5 * jnp.sum(jnp.square(x), axis=-1, keepdims=True)) * jnp.asarray(
            scale, x.dtype
        )
        return jnp.concatenate([jnp.cos(wx), jnp.sin(wx)], axis=-1) * radial

    return phi


# --------------------------------------------------------------------------
# Random projection matrices


def _check_sizes(num_features, dim) -> None:
    for name, value in (("num_features", num_features), ("dim", dim)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def gaussian_random_matrix(key: Array, num_features: int, dim: int, *, dtype=jnp.float32) -> Array:
    """W `[M, D]` with iid N(0, 1) entries (M = num_features, D = dim)."""
    _check_sizes(num_features, dim)
    return jax.random.normal(key, (num_features, dim), dtype)


def orthogonal_random_matrix(
    key: Array, num_features: int, dim: int, *, scaling: str = "chi", dtype=jnp.float32
) -> Array:
    """Block-orthogonal random projection W `[M, D]` (Choromanski et al. 2021 §2.4).

    Stacks ceil(M / D) independent Haar-random orthogonal D x D blocks (QR of
    a Gaussian matrix, signs fixed by diag(R)) and keeps the first M rows, so
    rows within a block are exactly orthogonal and each row is uniform on the
    sphere. Row norms:

    * 'chi': independent chi(D) norms (norms of fresh Gaussian vectors), so
      each row is marginally N(0, I_D) and FAVOR+ stays unbiased;
    * 'sqrt_d': every norm is sqrt(D) (slightly biased kernel, lower variance).

    Orthogonal rows give lower-variance kernel estimates than iid rows at the
    same M (tested in tests/attnjax/test_features.py).
    """
    _check_sizes(num_features, dim)
    if scaling not in ("chi", "sqrt_d"):
        raise ValueError(f"scaling must be 'chi' or 'sqrt_d', got {scaling!r}")
    return _orthogonal_rows(key, num_features, dim, scaling, jnp.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _orthogonal_rows(key: Array, num_features: int, dim: int, scaling: str, dtype) -> Array:
    num_blocks = -(-num_features // dim)
    block_key, norm_key = jax.random.split(key)
    gaussians = jax.random.normal(block_key, (num_blocks, dim, dim), dtype)
    q, r = jnp.linalg.qr(gaussians)
    signs = jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1))
    signs = jnp.where(signs == 0, jnp.ones_like(signs), signs)
    # Columns of q (times signs) are orthonormal; use them as rows.
    rows = jnp.swapaxes(q * signs[:, None, :], -1, -2)
    rows = jnp.reshape(rows, (num_blocks * dim, dim))[:num_features]
    if scaling == "chi":
        norms = jnp.linalg.norm(jax.random.normal(norm_key, (num_features, dim), dtype), axis=-1)
    else:
        norms = jnp.full((num_features,), math.sqrt(dim), dtype)
    return rows * norms[:, None]
