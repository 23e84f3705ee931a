"""Pure, jit-able metrics of attention matrices and hidden states.

* `residual`: the mean-centred residual `X - 1 x̄ᵀ` of hidden states
  `X [..., T, D]`, absolute and relative, in the Frobenius norm or Dong et
  al.'s composite quantity (`residual_norm`, `residual_ratio`, `shared_norm`,
  `composite_norm`).
* `rank`: rank collapse of hidden states (token cosine similarity,
  stable/effective/numerical rank, spectral entropy, participation ratio,
  condition number, `rank_report`).
* `markov`: the attention matrix `A [..., n, n]` as a Markov chain
  (stationary distribution, slem and spectral gap, Dobrushin coefficient,
  products across depth, rank-one residuals); `power`: power iteration.
* `stochastic`: whether maps are row-stochastic (`is_row_stochastic`, jit-able)
  and `check_stochastic`, which raises with the offending rows.
* `heads`: per-head statistics of weights `[..., H, T, S]` (entropy,
  mean distance, redundancy between heads, pattern classes).
* `massive`: Sun et al.'s massive activations of hidden states (`massive_activations`).
* `sinks`: attention sinks (normalised entropy over the visible keys, sink
  mass and its uniform baseline, distance to e_1, Gu et al.'s sink rate).
* `collapse`: Dong et al. 2021's theory quantitatively (the layer bound from
  the weights, fits of the per-layer growth of log(1/r) and of geometric
  rates, logit variance, single-head paths).
* `streaming`: per-row statistics of softmax attention without the `[T, S]`
  matrix (`attention_statistics`).
* `causal_spectrum`: the eigenvalues of causal maps (their diagonal) and
  |lambda_2|, exactly, from q, k and the rows' lse, without the matrix.
* `products`: A v, A^T u, the mass each key receives (with its top keys) and
  the leading singular values (subspace iteration, with error bounds), from
  q, k and the rows' lse, without the matrix.
* `depth`: all of the above per layer of one forward pass.
"""

from attnjax.analysis._linalg import spectral_radius_by_squaring
from attnjax.analysis.causal_spectrum import causal_eigenvalues, causal_slem
from attnjax.analysis.collapse import (
    RateFit,
    dong_constant,
    doubly_exponential_sequence,
    fit_geometric,
    fit_log_log,
    head_matrices,
    is_doubly_exponential,
    logit_variance,
    path_products,
    sample_paths,
)
from attnjax.analysis.heads import (
    PATTERN_NAMES,
    PatternFeatures,
    attention_entropy,
    classify_pattern,
    head_redundancy,
    mean_attention_distance,
    pattern_features,
)
from attnjax.analysis.markov import (
    MarkovReport,
    RankOneResidual,
    default_squarings,
    dobrushin,
    markov_report,
    path_product,
    rank_one_residual,
    slem,
    spectral_gap,
    stationary_distribution,
    stationary_residual,
    triangular_slem,
)
from attnjax.analysis.massive import massive_activations
from attnjax.analysis.power import PowerIteration, power_iteration
from attnjax.analysis.products import (
    LeadingSingularValues,
    ReceivedMass,
    attention_matvec,
    attention_rmatvec,
    leading_singular_values,
    received_mass,
)
from attnjax.analysis.rank import (
    RankReport,
    condition_number,
    effective_rank,
    numerical_rank,
    participation_ratio,
    rank_report,
    spectral_entropy,
    stable_rank,
    token_cosine_similarity,
)
from attnjax.analysis.residual import (
    NORMS,
    composite_norm,
    residual_norm,
    residual_ratio,
    shared_norm,
)
from attnjax.analysis.sinks import (
    distance_to_first,
    mean_normalized_entropy,
    normalized_entropy,
    sink_mass,
    sink_rate,
    uniform_sink_mass,
)
from attnjax.analysis.stochastic import check_stochastic, is_row_stochastic
from attnjax.analysis.streaming import AttentionStatistics, attention_statistics

__all__ = [
    "AttentionStatistics",
    "LeadingSingularValues",
    "MarkovReport",
    "NORMS",
    "PATTERN_NAMES",
    "PatternFeatures",
    "PowerIteration",
    "RankOneResidual",
    "RankReport",
    "RateFit",
    "ReceivedMass",
    "attention_entropy",
    "attention_matvec",
    "attention_rmatvec",
    "attention_statistics",
    "causal_eigenvalues",
    "causal_slem",
    "check_stochastic",
    "classify_pattern",
    "composite_norm",
    "condition_number",
    "default_squarings",
    "distance_to_first",
    "dobrushin",
    "dong_constant",
    "doubly_exponential_sequence",
    "effective_rank",
    "fit_geometric",
    "fit_log_log",
    "head_matrices",
    "head_redundancy",
    "is_doubly_exponential",
    "is_row_stochastic",
    "leading_singular_values",
    "logit_variance",
    "markov_report",
    "massive_activations",
    "mean_attention_distance",
    "mean_normalized_entropy",
    "normalized_entropy",
    "numerical_rank",
    "participation_ratio",
    "path_product",
    "path_products",
    "pattern_features",
    "power_iteration",
    "rank_one_residual",
    "rank_report",
    "received_mass",
    "residual_norm",
    "residual_ratio",
    "sample_paths",
    "shared_norm",
    "sink_mass",
    "sink_rate",
    "slem",
    "spectral_entropy",
    "spectral_gap",
    "spectral_radius_by_squaring",
    "stable_rank",
    "stationary_distribution",
    "stationary_residual",
    "token_cosine_similarity",
    "triangular_slem",
    "uniform_sink_mass",
]
