"""Rank-collapse metrics of a whole network, layer by layer.

`depth_profile(hidden, attention)` bundles what depth studies measure on one
forward pass: token-representation metrics of every hidden state and
Markov metrics of every layer's attention and of their products across
depth. Inputs are what `attnjax.nn.Transformer(..., return_intermediates=True)`
returns; outputs are means over the batch (and heads), one value per layer.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from attnjax.analysis.heads import attention_entropy
from attnjax.analysis.markov import dobrushin, path_product, rank_one_residual, slem
from attnjax.analysis.rank import rank_report

HIDDEN_METRICS = ("residual_fro", "residual_l1inf", "token_cosine", "stable_rank", "effective_rank")
ATTENTION_METRICS = ("attention_entropy", "slem", "dobrushin", "path_rank_one_residual")


@jax.jit
def depth_profile(hidden: jax.Array, attention: jax.Array) -> dict[str, jax.Array]:
    """Per-layer metrics of a network's forward pass.

    Args:
      hidden: `[L + 1, B, T, D]`, index 0 the input of the first layer.
      attention: `[L, B, H, T, T]`, row-stochastic.

    Returns:
      A dict of float32 arrays:
      * `[L + 1]`: `residual_fro`, `residual_l1inf` (Dong et al. 2021
        relative residual ||X - 1 x_bar^T|| / ||X|| in the Frobenius and the
        composite l1,inf norm), `token_cosine` (Noci et al. 2022),
        `stable_rank`, `effective_rank` (Roy & Vetterli 2007);
      * `[L]`: `attention_entropy` (nats, mean over heads and queries),
        `slem` and `dobrushin` (mean over heads), and
        `path_rank_one_residual`: ||P_l - best rank-1|| / ||P_l|| of the
        product P_l = A_l ... A_1 of head-averaged attention matrices (each
        row-stochastic), which -> 0 as the products act like power iteration.
    """
    hidden = hidden.astype(jnp.float32)
    attention = attention.astype(jnp.float32)
    mean_over_batch = lambda x: jnp.mean(x, axis=1)  # noqa: E731
    ranks = rank_report(hidden)  # one SVD shared by every rank metric
    profile = {
        "residual_fro": mean_over_batch(ranks.residual_ratio),
        "residual_l1inf": mean_over_batch(ranks.residual_ratio_l1inf),
        "token_cosine": mean_over_batch(ranks.token_cosine_similarity),
        "stable_rank": mean_over_batch(ranks.stable_rank),
        "effective_rank": mean_over_batch(ranks.effective_rank),
        "attention_entropy": jnp.mean(attention_entropy(attention), axis=(1, 2, 3)),
        "slem": jnp.mean(slem(attention), axis=(1, 2)),
        "dobrushin": jnp.mean(dobrushin(attention), axis=(1, 2)),
    }
    head_mean = jnp.swapaxes(jnp.mean(attention, axis=2), 0, 1)  # [B, L, T, T], still row-stochastic
    products = path_product(head_mean)  # [B, L, T, T]: A_l ... A_1
    profile["path_rank_one_residual"] = jnp.mean(rank_one_residual(products).best, axis=0)
    return profile
