"""Per-head attention statistics: entropy, distance, redundancy, pattern class.

Attention weights follow `jax.nn.dot_product_attention`: one map is `[T, S]`
(rows = queries, each a distribution over keys), heads are `[..., H, T, S]`.
Functions act on the trailing axes, broadcast over leading ones, and work
under `jax.jit` and `jax.vmap`; results keep the input dtype.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import xlogy

from attnjax.analysis._linalg import HIGHEST, as_matrix, lift, safe_divide
from attnjax.analysis.sinks import mean_normalized_entropy
from attnjax.result_repr import compact_repr


@jax.jit
def attention_entropy(weights) -> jax.Array:
    """Shannon entropy (nats) of each query's attention distribution.

    `H_i = -Σ_j a_ij log a_ij`, with `0 log 0 = 0` (masked keys contribute
    nothing, no `eps` needed). `H_i ∈ [0, log k_i]` for a query that sees `k_i`
    keys: 0 for one-hot rows, `log k_i` for uniform ones. The entropy as a
    fraction of that maximum, comparable across lengths and between
    bidirectional and causal maps, is `normalized_entropy(weights, visible)`
    (`attnjax.analysis.sinks`), the one normalisation attnjax uses: dividing by
    `log S` instead would rate a uniform causal map below 1 (query `i` sees
    `i + 1` keys, not `S`).

    Args:
      weights: `[..., T, S]` row-stochastic.

    Returns:
      `[..., T]`.

    Invalid input is not checked: a negative entry gives NaN for its row (`log` of a negative
    number), rows not summing to 1 give `-Σ a log a` without the meaning of an entropy, NaN
    entries give NaN. Validate with `check_stochastic` (raises, outside jit) or
    `is_row_stochastic`.
    """
    weights = as_matrix(weights, "weights")
    return -jnp.sum(xlogy(weights, weights), axis=-1)


@partial(jax.jit, static_argnames=("query_offset",))
def mean_attention_distance(weights, *, query_offset: int = 0) -> jax.Array:
    """Expected distance between a query and the keys it attends to.

    `d_i = Σ_j a_ij |i + query_offset - j|`, in token positions: the "mean
    attention distance" of Dosovitskiy et al. (2021), "An image is worth 16x16
    words", over sequence positions. `query_offset` places query `i` at key
    position `i + query_offset` (e.g. `S - T` when queries are the last `T`
    tokens). Average over queries with `.mean(-1)`.

    Args:
      weights: `[..., T, S]`.

    Returns:
      `[..., T]`.

    Invalid input is not checked: the weighted sum is formed for any weights (an expected
    distance only for distributions); NaN entries give NaN.
    """
    weights = as_matrix(weights, "weights")
    t, s = weights.shape[-2:]
    q_pos = jnp.arange(t, dtype=weights.dtype) + query_offset
    k_pos = jnp.arange(s, dtype=weights.dtype)
    dist = jnp.abs(q_pos[:, None] - k_pos[None, :])
    return jnp.sum(weights * lift(dist, weights.ndim), axis=-1)


@partial(jax.jit, static_argnames=("pooled", "centered"))
def head_redundancy(weights, *, pooled: bool = False, centered: bool = False) -> jax.Array:
    """Cosine similarity between the attention maps of every pair of heads.

    `R_hk = ⟨vec A_h, vec A_k⟩ / (‖A_h‖_F ‖A_k‖_F)`, one einsum for all pairs
    (the vectorised form of the seed's double loop, §6.3). Values near 1 flag
    redundant heads; for non-negative maps `R ∈ [0, 1]`. A head whose map is
    all zeros has similarity 0 with every head, itself included.

    Args:
      weights: `[..., H, T, S]`.
      pooled: False: one `[H, H]` matrix per example, `[..., H, H]`. True: the
        seed's version, which flattens all leading axes into each head's
        vector (a single `[H, H]` over the whole batch).
      centered: subtract each head's mean first, giving the Pearson
        correlation (what the seed's docstring describes but its code does not
        compute).

    Returns:
      `[..., H, H]` (or `[H, H]` when pooled), symmetric.

    Invalid input is not checked: the cosine is defined for any maps (in `[0, 1]` only for
    non-negative ones); NaN entries give NaN.
    """
    weights = as_matrix(weights, "weights")
    if weights.ndim < 3:
        raise ValueError(f"weights must have shape [..., H, T, S]; got shape {weights.shape}")
    h = weights.shape[-3]
    if pooled:
        vecs = jnp.moveaxis(weights, -3, 0).reshape(h, -1)  # [H, N]
    else:
        vecs = weights.reshape(weights.shape[:-2] + (-1,))  # [..., H, T*S]
    if centered:
        vecs = vecs - jnp.mean(vecs, axis=-1, keepdims=True)
    norms = jnp.sqrt(jnp.sum(jnp.square(vecs), axis=-1, keepdims=True))
    unit = safe_divide(vecs, norms)
    return jnp.einsum("...hn,...kn->...hk", unit, unit, precision=HIGHEST)


# ---- pattern classes ---------------------------------------------------------

PATTERN_NAMES = ("uniform", "one-hot", "diagonal", "local", "global", "hierarchical")
UNIFORM, ONE_HOT, DIAGONAL, LOCAL, GLOBAL, HIERARCHICAL = range(len(PATTERN_NAMES))


class PatternFeatures(NamedTuple):
    """Scale-free features of a square map `[..., T, T]`, each `[...]` in `[0, 1]`.

    * `entropy`: mean normalised row entropy `mean_i H_i / log k_i`
      (`normalized_entropy`; `k_i` the keys query `i` sees), over the queries
      with a choice (`k_i > 1`).
    * `diagonal`: mean attention to oneself, `mean_i a_ii`.
    * `local`: mean mass within the band `|i - j| <= r`, `r = max(1, ⌊fT/2⌋)`
      (about a fraction `f` of the keys, at least the neighbours).
    * `global`: share of all attention that lands on the `k = max(1, ⌊fT⌋)`
      keys receiving the most attention, `Σ_{top k} c_j`, `c_j = mean_i a_ij`:
      high when all queries look at the same few keys (e.g. a first-token
      sink).
    """

    entropy: jax.Array
    diagonal: jax.Array
    local: jax.Array
    global_: jax.Array

    __repr__ = compact_repr


@partial(jax.jit, static_argnames=("key_fraction",))
def pattern_features(weights, *, key_fraction: float = 0.1, visible=None) -> PatternFeatures:
    """The features `classify_pattern` thresholds; `weights [..., T, T]` -> each `[...]`.

    `visible`: which keys each query may see, `[..., T, T]` (True visible; e.g.
    `attnjax.masks.causal_mask(T)` for a causal map); None: every key.

    Invalid input: as for `attention_entropy` (negative entries make `entropy` NaN); not
    checked.
    """
    weights = as_matrix(weights, "weights", square=True)
    if not 0 < key_fraction <= 1:
        raise ValueError(f"key_fraction must be in (0, 1]; got {key_fraction}")
    t = weights.shape[-1]
    radius = max(1, math.floor(key_fraction * t / 2))
    top = max(1, math.floor(key_fraction * t))
    idx = jnp.arange(t)
    band = (jnp.abs(idx[:, None] - idx[None, :]) <= radius).astype(weights.dtype)
    column_share = jnp.mean(weights, axis=-2)  # [..., T]
    return PatternFeatures(
        entropy=mean_normalized_entropy(weights, visible),
        diagonal=jnp.mean(jnp.diagonal(weights, axis1=-2, axis2=-1), axis=-1),
        local=jnp.mean(jnp.sum(weights * lift(band, weights.ndim), axis=-1), axis=-1),
        global_=jnp.sum(lax.top_k(column_share, top)[0], axis=-1),
    )


@partial(jax.jit, static_argnames=("uniform", "one_hot", "majority", "key_fraction"))
def classify_pattern(
    weights,
    *,
    uniform: float = 0.9,
    one_hot: float = 0.1,
    majority: float = 0.5,
    key_fraction: float = 0.1,
    visible=None,
) -> jax.Array:
    """Pattern class of each square self-attention map, as int32 codes.

    `weights [..., T, T]` -> `[...]` int32, an index into `PATTERN_NAMES`.
    Rules, on `pattern_features`, first match wins:

    1. `uniform`: mean normalised entropy `>= uniform` (0.9): rows are
       within 10% of their maximum entropy `log k_i` (`k_i` visible keys:
       `T` bidirectional, `i + 1` causal, given `visible`), i.e. perplexity at
       least `k_i^0.9`; the map barely distinguishes keys.
    2. `diagonal`: mean self-attention `>= majority` (0.5): on average most of
       each query's mass is on itself (the seed's "token-local" rule, whose
       0.5 now has a reason: a majority).
    3. `local`: a majority of the mass within the band of about
       `key_fraction` (10%) of the keys around each query.
    4. `global`: a majority of all attention on the same `key_fraction` of the
       keys for every query.
    5. `one-hot`: mean normalised entropy `<= one_hot` (0.1): sharp rows
       (perplexity at most `T^0.1`) pointing at varying, non-local keys.
    6. `hierarchical`: none of the above (mixed or multi-scale), the seed's
       fallback class.

    `visible`: the keys each query may see, as in `pattern_features`; pass
    the causal mask for a causal map, or a uniform causal map is not rated
    uniform. All thresholds are fractions of their maxima, so they do not depend on
    T. Under uniform attention the band and top-key shares are about
    `key_fraction`, so `majority = 0.5` is five times chance. For `T < 10` the
    band and the top keys cannot be as small as 10% and the local and global
    classes become easier to reach. The seed's "global" rule (mean off-diagonal
    weight > 0.3) can never fire for `T >= 5`, since that mean is at most
    `1/(T-1)`.

    Invalid input is not checked: NaN features (from NaN or negative entries) fail every
    threshold, so such a map gets the first rule its other features meet, or `hierarchical`.
    Validate with `check_stochastic` (raises, outside jit) or `is_row_stochastic`.
    """
    f = pattern_features(weights, key_fraction=key_fraction, visible=visible)
    return jnp.select(
        [
            f.entropy >= uniform,
            f.diagonal >= majority,
            f.local >= majority,
            f.global_ >= majority,
            f.entropy <= one_hot,
        ],
        [
            jnp.int32(UNIFORM),
            jnp.int32(DIAGONAL),
            jnp.int32(LOCAL),
            jnp.int32(GLOBAL),
            jnp.int32(ONE_HOT),
        ],
        default=jnp.int32(HIERARCHICAL),
    )
