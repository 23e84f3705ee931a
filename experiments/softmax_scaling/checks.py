"""The softmax-scaling study's rows, each of one kind (`experiments.lab.study.KINDS`), from the summary.

Sanity (identities and constructions; they fail only on a bug): Var(q.k) = d_k
is the footnote's identity, checked by Monte Carlo; Var(q.k / sqrt(d_k)) = 1 is
the same samples divided by d_k; the scaled statistics tend to their
d_k -> infinity limit by construction (given q the scaled logits are iid
N(0, |q|^2 / d_k)); the unscaled softmax saturating is the regime the
suspicion is about; and the remedy, 1/sqrt(d_k), keeps the gradient from
vanishing where the footnote's assumptions hold (the scaled logits then have
variance 1 at every d_k: a construction, not a finding).

Prediction: Vaswani et al. 2017's suspicion, stated in §3.2.1 as the reason for
the scale: "for large values of d_k, the dot products grow large in magnitude,
pushing the softmax function into regions where it has extremely small
gradients". Its setting is the footnote's: components of q and k independent,
mean 0, variance 1 (gaussian, and laplace: the same assumptions, another law).
Measured on the gradient that reaches q and K through one softmax
(`gradients.py`), not on a trained Transformer: "extremely small gradients" is
read as the share of queries whose gradient exceeds tau, the typical (median)
gradient of the scaled softmax in the footnote's setting, falling as d_k grows.

Hypotheses (derived in this codebase, not in the paper): without independence
(low_rank) the scale does not stop the fall; E||J||_2 of the unscaled softmax
falls like d_k^(-1/2) (`rate.py`).

Every threshold is 0 (the sign of a paired difference, with the unscaled case as
the baseline) or the predicted exponent; every verdict needs `MIN_UNITS` seeds.
"""

from __future__ import annotations

from experiments.lab.render import interval_text
from experiments.lab.study import config_of, prediction
from experiments.softmax_scaling.constants import MIN_UNITS

VASWANI = "Vaswani et al. 2017, §3.2.1"
QUOTE = (
    '"for large values of d_k, the dot products grow large in magnitude, pushing the softmax function '
    'into regions where it has extremely small gradients"'
)
FAMILIES = {"gaussian": "iid N(0, 1) components", "laplace": "iid Laplace components, variance 1"}
NAMES = {"grad_query": "||dL/dq||", "grad_key": "||dL/dK||"}


def _differences(check: dict) -> str:
    """Both gradients' paired differences over seeds, as 'name: mean [low, high]'."""
    text = "; ".join(f"{NAMES[g]}: {interval_text(d)}" for g, d in check["differences"].items())
    few = check["units"] < MIN_UNITS
    return text + (
        f"; not measured: {check['units']} seeds, a verdict needs {MIN_UNITS}" if few else ""
    )


def sanity(summary: dict) -> list[dict]:
    c, config = summary["checks"], config_of(summary)
    var_u, var_s, sat = (
        c["variance_unscaled"],
        c["variance_scaled"],
        c["unscaled_softmax_saturates"],
    )
    rows = [
        prediction(
            "Var(q.k) = d_k",
            f"{VASWANI}, footnote (an identity)",
            f"|measured / d_k - 1| <= {var_u['tolerance']:g} at every d_k "
            f"({summary['tolerance_in_standard_errors']:.1f} standard errors or more)",
            var_u["worst_rel_error"],
            var_u["pass"],
            kind="sanity",
        ),
        prediction(
            "Var(q.k / sqrt(d_k)) = 1",
            "the same samples divided by d_k",
            f"|measured - 1| <= {var_s['tolerance']:g} at every d_k",
            var_s["worst_rel_error"],
            var_s["pass"],
            kind="sanity",
        ),
        prediction(
            "scaled saturation tends to its d_k -> infinity limit",
            "by construction (iid Gaussian q, k)",
            f"max weight, entropy and Jacobian norms within {config.saturation_tolerance:.0%} of "
            "the limit (a sanity tolerance: configs/softmax_scaling.py)",
            c["scaled_saturation_constant"]["worst_rel_deviation"],
            c["scaled_saturation_constant"]["pass"],
            kind="sanity",
        ),
        prediction(
            "without the scale the softmax saturates",
            "the regime of the suspicion",
            "max weight rises and entropy falls at every step in d_k",
            None,
            sat["pass"],
            f"max weight rises: {sat['max_weight_rises']}; entropy falls: {sat['entropy_falls']}",
            kind="sanity",
        ),
    ]
    for family, setting in FAMILIES.items():
        r = summary["checks"]["gradients"][family]["remedy"]
        rows.append(
            prediction(
                f"with the scale the gradient to q, K does not vanish ({family})",
                f"{VASWANI} (the remedy; a construction where the footnote's assumptions hold)",
                "share above tau, (largest d_k - smallest d_k) scaled minus the same unscaled: "
                "the lower end of its 95% interval over seeds above 0",
                r["low"],
                r["pass"],
                f"{setting}; {_differences(r)}",
                kind="sanity",
            )
        )
    return rows


def gradient_predictions(summary: dict) -> list[dict]:
    grads, tau = summary["checks"]["gradients"], summary["tau"]
    taus = ", ".join(f"{NAMES[g]} {t:.3g}" for g, t in tau.items())
    dims = summary["dims"]
    out = []
    for family, setting in FAMILIES.items():
        v = grads[family]["vanishes"]
        out.append(
            prediction(
                f"without the scale the typical gradient to q, K vanishes ({family})",
                f"{VASWANI}: {QUOTE}",
                f"share of queries with gradient above tau (the scaled softmax's median gradient, "
                f"footnote's setting, d_k = {dims[-1]}), d_k = {dims[-1]} minus d_k = {dims[0]}: "
                "the upper end of its 95% interval over seeds below 0",
                v["high"],
                v["pass"],
                f"{setting}; tau: {taus}; {_differences(v)}",
            )
        )
    v = grads["low_rank"]["scaled_vanishes"]
    rank = config_of(summary).low_rank
    out.append(
        prediction(
            "with the scale the typical gradient still vanishes when q, k share a low-rank subspace",
            "this codebase (gradients.py: Var(q.k / sqrt(d_k)) ~ d_k / r without independence)",
            f"scaled, share above tau, d_k = {dims[-1]} minus d_k = {dims[0]}: the upper end of "
            "its 95% interval over seeds below 0",
            v["high"],
            v["pass"],
            f"r = {rank}; {_differences(v)}",
            kind="hypothesis",
        )
    )
    return out


def rate_prediction(summary: dict) -> dict:
    r, full, rate = (
        summary["checks"]["jacobian_rate"],
        summary["checks"]["jacobian_rate_full"],
        summary["rate"],
    )
    window, dims = rate["window"], rate["dims"]
    note = (
        f"slope {interval_text(r)} over {r['n']} seeds, d_k from {window[0]} to {window[-1]} (the "
        f"upper half of the widths: summary.rate_window); over every width from {dims[0]}: "
        f"{interval_text(full)} (flattened by the O(d_k^(-1/2)) correction, pre-asymptotic)"
    )
    if r["n"] < MIN_UNITS:
        note += f"; not measured: a verdict needs {MIN_UNITS} seeds"
    return prediction(
        "E||J||_2 of the unscaled softmax ~ d_k^(-1/2)",
        "this codebase (rate.py: the gap of the two largest logits)",
        "fitted log-log slope over the upper half of the widths: its 95% interval over seeds "
        "contains -1/2 (two-sided: an equality)",
        r["mean"],
        r["pass"],
        note,
        kind="hypothesis",
    )


def predictions(summary: dict) -> list[dict]:
    """The sanity records, then the prediction and the hypotheses."""
    return sanity(summary) + gradient_predictions(summary) + [rate_prediction(summary)]
