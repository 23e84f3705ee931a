"""Pure, jit-able metrics of attention matrices and hidden states.

* `rank`: rank collapse of hidden states `X [..., T, D]` (residual ratio,
  token cosine similarity, stable/effective/numerical rank, spectral entropy,
  participation ratio, condition number, `rank_report`).
* `markov`: the attention matrix `A [..., n, n]` as a Markov chain
  (stationary distribution, slem and spectral gap, Dobrushin coefficient,
  products across depth, rank-one residuals); `power`: power iteration.
* `stochastic`: whether maps are row-stochastic (`is_row_stochastic`, jit-able)
  and `check_stochastic`, which raises with the offending rows.
* `heads`: per-head statistics of weights `[..., H, T, S]` (entropy,
  mean distance, redundancy between heads, pattern classes).
* `collapse`: Dong et al. 2021's theory quantitatively (composite-norm
  residuals, the layer bound from the weights, fits of the per-layer growth
  of log(1/r) and of geometric rates, logit variance, single-head paths).
* `depth`: all of the above per layer of one forward pass.
"""

from attnjax.analysis._linalg import spectral_radius_by_squaring
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
    PowerIteration,
    RankOneResidual,
    default_squarings,
    dobrushin,
    markov_report,
    path_product,
    power_iteration,
    rank_one_residual,
    slem,
    spectral_gap,
    stationary_distribution,
    stationary_residual,
)
from attnjax.analysis.rank import (
    RankReport,
    condition_number,
    effective_rank,
    numerical_rank,
    participation_ratio,
    rank_report,
    residual_ratio,
    spectral_entropy,
    stable_rank,
    token_cosine_similarity,
)
from attnjax.analysis.stochastic import check_stochastic, is_row_stochastic

__all__ = [
    "default_squarings",
    "spectral_radius_by_squaring",
    "PATTERN_NAMES",
    "MarkovReport",
    "PatternFeatures",
    "PowerIteration",
    "RankOneResidual",
    "RankReport",
    "attention_entropy",
    "check_stochastic",
    "classify_pattern",
    "condition_number",
    "dobrushin",
    "effective_rank",
    "head_redundancy",
    "is_row_stochastic",
    "markov_report",
    "mean_attention_distance",
    "numerical_rank",
    "participation_ratio",
    "path_product",
    "pattern_features",
    "power_iteration",
    "rank_one_residual",
    "rank_report",
    "residual_ratio",
    "slem",
    "spectral_entropy",
    "spectral_gap",
    "stable_rank",
    "stationary_distribution",
    "stationary_residual",
    "token_cosine_similarity",
]
from attnjax.analysis.sinks import (  # noqa: E402
    distance_to_first,
    normalized_entropy,
    residual_norms,
    sink_mass,
    triangular_slem,
    uniform_sink_mass,
)

__all__ += [
    "distance_to_first",
    "normalized_entropy",
    "residual_norms",
    "sink_mass",
    "triangular_slem",
    "uniform_sink_mass",
]

from attnjax.analysis.collapse import (  # noqa: E402
    RateFit,
    composite_norm,
    dong_constant,
    doubly_exponential_sequence,
    fit_geometric,
    fit_log_log,
    head_matrices,
    is_doubly_exponential,
    logit_variance,
    path_products,
    residual_norm,
    sample_paths,
)

__all__ += [
    "RateFit",
    "composite_norm",
    "dong_constant",
    "doubly_exponential_sequence",
    "fit_geometric",
    "fit_log_log",
    "head_matrices",
    "is_doubly_exponential",
    "logit_variance",
    "path_products",
    "residual_norm",
    "sample_paths",
]

from attnjax.analysis.streaming import AttentionStatistics, attention_statistics  # noqa: E402

__all__ += ["AttentionStatistics", "attention_statistics"]
