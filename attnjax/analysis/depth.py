"""Rank-collapse metrics of a whole network, layer by layer.

`depth_profile(hidden, attention)` bundles what depth studies measure on one
forward pass: token-representation metrics of every hidden state and
Markov metrics of every layer's attention and of their products across
depth. Inputs are what `attnjax.nn.Transformer(..., return_intermediates=True)`
returns; outputs are means over the batch (and heads), one value per layer.
Everything is computed in the input dtype (float64 resolves residuals down
to ~1e-15; float32 only to ~1e-7; half precision is promoted to float32).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from attnjax.analysis.collapse import logit_variance
from attnjax.analysis.heads import attention_entropy
from attnjax.analysis.markov import dobrushin, path_product, rank_one_residual, slem
from attnjax.analysis.rank import rank_report
from attnjax.analysis.residual import residual_norm, shared_norm
from attnjax.analysis.sinks import mean_normalized_entropy

HIDDEN_METRICS = (
    "residual_fro",
    "residual_l1inf",
    "residual_abs_fro",
    "residual_abs_l1inf",
    "mean_token_norm",
    "token_cosine",
    "stable_rank",
    "effective_rank",
)
ATTENTION_METRICS = (
    "attention_entropy",
    "attention_entropy_normalized",
    "logit_variance",
    "slem",
    "dobrushin",
    "path_rank_one_residual",
)


@partial(jax.jit, static_argnames=("causal",))
def depth_profile(
    hidden: jax.Array, attention: jax.Array, causal: bool = False
) -> dict[str, jax.Array]:
    """Per-layer metrics of a network's forward pass.

    Args:
      hidden: `[L + 1, B, T, D]`, index 0 the input of the first layer.
      attention: `[L, B, H, T, T]`, row-stochastic.
      causal: whether the attention is causal (query i sees keys <= i), for
        the normalised entropy.

    Returns:
      A dict of arrays in the input dtype:
      * `[L + 1]`: `residual_fro`, `residual_l1inf` (Dong et al. 2021
        relative residual ||X - 1 x_bar^T|| / ||X|| in the Frobenius and the
        composite l1,inf quantity, x_bar the mean token), `residual_abs_fro`,
        `residual_abs_l1inf` (the numerators), `mean_token_norm`
        (`shared_norm`: ||1 x_bar^T||_F = sqrt(T) ||x_bar||, the shared component: with
        skip connections it grows while the absolute residual stays put, so
        the relative residual falls without the tokens contracting),
        `token_cosine` (Noci et al. 2022), `stable_rank`, `effective_rank`
        (Roy & Vetterli 2007);
      * `[L]`: `attention_entropy` (nats, mean over heads and queries),
        `attention_entropy_normalized` (each query's entropy over the log of
        its number of visible keys, in [0, 1], 1 uniform; mean over heads and
        the queries with more than one key), `logit_variance` (variance of
        the logits across keys, `analysis.collapse.logit_variance`; mean over
        heads), `slem` and `dobrushin` (mean over heads), and
        `path_rank_one_residual`: ||P_l - best rank-1|| / ||P_l|| of the
        product P_l = A_l ... A_1 of head-averaged attention matrices (each
        row-stochastic), which -> 0 as the products act like power iteration.
    """
    hidden, attention = jnp.asarray(hidden), jnp.asarray(attention)
    if hidden.ndim != 4 or attention.ndim != 5 or attention.shape[0] + 1 != hidden.shape[0]:
        raise ValueError(
            f"need hidden [L + 1, B, T, D] and attention [L, B, H, T, T]; got {hidden.shape} "
            f"and {attention.shape}"
        )
    if not jnp.issubdtype(hidden.dtype, jnp.floating) or hidden.dtype.itemsize < 4:
        hidden = hidden.astype(jnp.float32)
    if not jnp.issubdtype(attention.dtype, jnp.floating) or attention.dtype.itemsize < 4:
        attention = attention.astype(jnp.float32)
    t = attention.shape[-1]
    visible = jnp.tril(jnp.ones((t, t), bool)) if causal else jnp.ones((t, t), bool)

    def mean_over_batch(x):
        return jnp.mean(x, axis=1)

    ranks = rank_report(hidden)  # one SVD shared by every rank metric
    profile = {
        "residual_fro": mean_over_batch(ranks.residual_ratio),
        "residual_l1inf": mean_over_batch(ranks.residual_ratio_l1inf),
        "residual_abs_fro": mean_over_batch(residual_norm(hidden, "fro")),
        "residual_abs_l1inf": mean_over_batch(residual_norm(hidden, "l1inf")),
        "mean_token_norm": mean_over_batch(shared_norm(hidden)),
        "token_cosine": mean_over_batch(ranks.token_cosine_similarity),
        "stable_rank": mean_over_batch(ranks.stable_rank),
        "effective_rank": mean_over_batch(ranks.effective_rank),
        "attention_entropy": jnp.mean(attention_entropy(attention), axis=(1, 2, 3)),
        "attention_entropy_normalized": jnp.mean(
            mean_normalized_entropy(attention, visible), axis=(1, 2)
        ),
        "logit_variance": jnp.mean(logit_variance(attention), axis=(1, 2)),
        "slem": jnp.mean(slem(attention), axis=(1, 2)),
        "dobrushin": jnp.mean(dobrushin(attention), axis=(1, 2)),
    }
    head_mean = jnp.swapaxes(
        jnp.mean(attention, axis=2), 0, 1
    )  # [B, L, T, T], still row-stochastic
    products = path_product(head_mean)  # [B, L, T, T]: A_l ... A_1
    profile["path_rank_one_residual"] = jnp.mean(rank_one_residual(products).best, axis=0)
    return profile
