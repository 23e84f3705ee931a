"""The softmax-scaling study's predictions: the five outcomes of `summary["checks"]` as prediction records.

The predictions (Vaswani et al. 2017, "Attention is all you need", §3.2.1:
dot products of unit-variance components have variance d_k, and large logits
push the softmax into regions with extremely small gradients) are checked as
listed in `study.py`; `summary.summarize` computes the verdicts.
"""
from __future__ import annotations

from attnjax.study import prediction
from experiments.softmax_scaling.summary import config_of

SOURCE = "Vaswani et al. 2017"


def predictions(summary: dict) -> list[dict]:
    """The five checks of `summary["checks"]` as prediction records."""
    c = summary["checks"]
    var_u, var_s = c["variance_unscaled"], c["variance_scaled"]
    sat, jac = c["unscaled_softmax_saturates"], c["unscaled_jacobian_vanishes"]
    return [
        prediction("Var(q.k) = d_k", SOURCE, f"|measured / d_k - 1| <= {var_u['tolerance']:g} at every d_k",
                   var_u["worst_rel_error"], var_u["pass"]),
        prediction("Var(q.k / sqrt(d_k)) = 1", SOURCE, f"|measured - 1| <= {var_s['tolerance']:g} at every d_k",
                   var_s["worst_rel_error"], var_s["pass"]),
        prediction("with the scale, saturation does not depend on d_k", SOURCE,
                   f"max weight, entropy and Jacobian norms within {config_of(summary).saturation_tolerance:.0%} "
                   "of their d_k -> infinity limit",
                   c["scaled_saturation_constant"]["worst_rel_deviation"], c["scaled_saturation_constant"]["pass"]),
        prediction("without it the softmax saturates", SOURCE,
                   "max weight rises and entropy falls at every step in d_k", None, sat["pass"],
                   f"max weight rises: {sat['max_weight_rises']}; entropy falls: {sat['entropy_falls']}"),
        prediction("without it the Jacobian vanishes", f"{SOURCE}; exponent from the gap of the top two logits",
                   "log-log slope of E||J||_2 within 0.25 of -1/2", jac["slope"], jac["pass"],
                   f"fitted over d_k >= {jac['fit_min_dim']}"),
    ]
