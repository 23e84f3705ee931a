"""Attention sinks, and the measurements read beside them.

A sink is a key that receives far more attention than its share: BERT's
[CLS], [SEP] and punctuation (Clark et al. 2019, "What does BERT look at?"),
the first token of a causal language model (Xiao et al. 2023, "Efficient
streaming language models with attention sinks"). Weights follow
`jax.nn.dot_product_attention`: one map is `[T, S]` (rows = queries), heads
`[..., H, T, S]`; `visible [T, S]` (bool, broadcastable) marks the keys a
query may attend to (all of them, or the causal triangle). Functions act on
the trailing axes, broadcast over leading ones and work under `jax.jit` and
`jax.vmap`.

* `normalized_entropy`: row entropy over the log of the number of visible keys.
* `sink_mass`, `uniform_sink_mass`: attention on a set of keys, and what
  uniform attention over the visible keys would give it.
* `distance_to_first`: how far each row of a stochastic matrix is from e_1,
  the limit of products of causal attention.
* `sink_rate`: Gu et al. 2024's metric, the share of heads whose mean
  attention on the first token exceeds epsilon (0.3 in the paper).

Read beside them: `attnjax.analysis.markov.triangular_slem` (|lambda_2| of a
triangular stochastic matrix, read off its diagonal), and
`attnjax.analysis.residual.residual_norm` with `shared_norm` (the absolute
residual ||X - 1 x_bar^T||_F beside the norm of the shared component
||1 x_bar^T||_F, so that growth of the shared component, a sink's massive
activation, is not mistaken for collapse).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import xlogy

from attnjax.analysis._linalg import HIGHEST, as_matrix, lift, safe_divide


def _visible(visible, weights: jax.Array) -> jax.Array:
    """`visible` as a float array broadcastable to `weights [..., T, S]` (None: every key)."""
    if visible is None:
        return jnp.ones((1,) * weights.ndim, weights.dtype)
    visible = jnp.asarray(visible)
    if not 2 <= visible.ndim <= weights.ndim or visible.shape[-2:] != weights.shape[-2:]:
        raise ValueError(
            f"visible must have shape [..., {weights.shape[-2]}, {weights.shape[-1]}]; "
            f"got {visible.shape} for weights shape {weights.shape}"
        )
    return lift(visible.astype(weights.dtype), weights.ndim)


@jax.jit
def normalized_entropy(weights, visible=None) -> jax.Array:
    """Row entropy over the log of the number of visible keys: `[..., T, S]` -> `[..., T]`.

    `h_i = -Σ_j a_ij log a_ij / log k_i`, `k_i = Σ_j visible_ij`, with
    `0 log 0 = 0`; in `[0, 1]` when the weights vanish off the visible keys
    (1: uniform over them). Queries with `k_i <= 1` have no choice and get 0;
    leave them out of means (`k_i > 1`). For causal attention `k_i = i + 1`,
    so each query is compared with its own maximum, not with `log T`.

    Invalid input: as for `attention_entropy` (negative entries give NaN; not checked).
    """
    weights = as_matrix(weights, "weights")
    keys = jnp.sum(jnp.broadcast_to(_visible(visible, weights), weights.shape), axis=-1)
    h = -jnp.sum(xlogy(weights, weights), axis=-1)
    log_k = jnp.log(jnp.maximum(keys, 1))
    return jnp.where(keys > 1, h / jnp.where(keys > 1, log_k, 1), 0)


@jax.jit
def mean_normalized_entropy(weights, visible=None) -> jax.Array:
    """`normalized_entropy` averaged over the queries with a choice (more than one visible key):
    `[..., T, S]` -> `[...]` (0 when no query has one)."""
    weights = as_matrix(weights, "weights")
    entropy = normalized_entropy(weights, visible)  # [..., T]; checks visible's shape
    keys = jnp.sum(jnp.broadcast_to(_visible(visible, weights), weights.shape), axis=-1)
    choice = keys > 1
    return jnp.sum(jnp.where(choice, entropy, 0), axis=-1) / jnp.maximum(
        jnp.sum(choice, axis=-1), 1
    )


@jax.jit
def sink_mass(weights, sink) -> jax.Array:
    """Attention each query puts on the sink keys: `Σ_j a_ij s_j`, `[..., T, S]`, sink `[..., S]` -> `[..., T]`.

    The leading axes of `weights` and `sink` broadcast against each other
    (e.g. one causal `[T, S]` pattern against sinks `[B, S]` gives `[B, T]`).

    Invalid input is not checked: the sum is formed for any weights; NaN entries give NaN.
    """
    weights = as_matrix(weights, "weights")
    sink = jnp.asarray(sink)
    if sink.ndim < 1 or sink.shape[-1] != weights.shape[-1]:
        raise ValueError(
            f"sink must have shape [..., {weights.shape[-1]}]; got {sink.shape} "
            f"for weights shape {weights.shape}"
        )
    batch = max(weights.ndim - 2, sink.ndim - 1)  # leading axes, broadcast against each other
    weights, sink = lift(weights, batch + 2), lift(sink.astype(weights.dtype), batch + 1)
    # A matmul, not a broadcast product and a sum: XLA:CPU (jax 0.10.2) fused the latter, followed by a
    # weighted sum over queries, into a loop that read only the first entry of a broadcast sink axis.
    return jnp.matmul(weights, sink[..., :, None], precision=HIGHEST)[..., 0]


@jax.jit
def uniform_sink_mass(visible, sink) -> jax.Array:
    """The sink mass of uniform attention over the visible keys: `|S ∩ V_i| / |V_i|`.

    `visible [..., T, S]` (bool), `sink [..., S]` (bool) -> `[..., T]`; 0 for
    a query that sees no key. The baseline a measured `sink_mass` is compared with.
    """
    visible = as_matrix(jnp.asarray(visible).astype(jnp.float32), "visible")
    mass = sink_mass(visible, sink)
    return safe_divide(mass, lift(jnp.sum(visible, axis=-1), mass.ndim))


@jax.jit
def distance_to_first(p) -> jax.Array:
    """Total-variation distance of each row of stochastic `p [..., T, S]` from e_1: `1 - p_i1`, `[..., T]`.

    `½ ‖p_i - e_1‖_1 = ½ (1 - p_i1 + Σ_(j>1) p_ij) = 1 - p_i1`. Products of
    causal (lower-triangular) attention matrices converge to `1 e_1ᵀ` when
    the first token is the only absorbing one (Wu et al. 2024, "On the role
    of attention masks and LayerNorm in transformers").

    Invalid input is not checked: `1 - p_i1` is returned for any `p` (a distance only for
    distributions); NaN gives NaN.
    """
    p = as_matrix(p, "p")
    return 1 - p[..., 0]


GU_EPSILON = 0.3  # Gu et al. 2024's threshold on a head's mean attention to the first token


def sink_rate(first_token_mass, epsilon: float = GU_EPSILON, *, valid=None) -> jax.Array:
    """The sink rate of Gu et al. 2024 ("When attention sink emerges in language models"):

        alpha^(l,h) = (1 / T) sum_i a^(l,h)_(i,1),      rate = (1 / (L H)) sum_(l,h) [alpha^(l,h) > epsilon]

    the mean attention each head puts on the first token over its query rows, and the share
    of the L x H heads whose mean exceeds `epsilon` (the paper: 0.3, on 64-token inputs).

    Args:
      first_token_mass: `[..., L, H, T]`, each row's weight on the first key: `weights[..., 0]`
        of maps `[..., L, H, T, S]`, or the `sink_mass` of `attention_statistics` with
        `sink_positions=(0,)`, layers stacked first.
      epsilon: the threshold, in (0, 1).
      valid: `[..., T]` bool, the query rows to average over (padding left out); None: all.

    Returns:
      `[...]`: the share of heads, in [0, 1], in `first_token_mass`'s dtype (at least float32).
    """
    mass = jnp.asarray(first_token_mass)
    if mass.ndim < 3:
        raise ValueError(
            f"first_token_mass must be [..., L, H, T] (layers, heads, rows); got shape {mass.shape}"
        )
    if not (isinstance(epsilon, (int, float)) and 0 < epsilon < 1):
        raise ValueError(f"epsilon must be a number in (0, 1), got {epsilon!r}")
    rows = jnp.ones(mass.shape[-1], bool) if valid is None else jnp.asarray(valid, bool)
    if rows.shape[-1] != mass.shape[-1] or rows.ndim > mass.ndim - 2:
        raise ValueError(
            f"valid must be [..., T] = [..., {mass.shape[-1]}] with the leading axes of "
            f"first_token_mass {mass.shape[:-3]}; got shape {rows.shape}"
        )
    rows = jnp.broadcast_to(rows.reshape(rows.shape[:-1] + (1, 1, rows.shape[-1])), mass.shape)
    alpha = jnp.sum(jnp.where(rows, mass, 0), axis=-1) / jnp.maximum(jnp.sum(rows, axis=-1), 1)
    dtype = jnp.promote_types(alpha.dtype, jnp.float32)
    return jnp.mean((alpha > epsilon).astype(dtype), axis=(-2, -1))
