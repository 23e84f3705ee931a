"""The softmax-scaling study's checks: sanity (identities, constructions) apart from predictions that could fail.

Sanity (never counted as predictions): Var(q.k) = d_k is the footnote's
identity, checked by Monte Carlo; Var(q.k / sqrt(d_k)) = 1 is the same samples
divided by d_k; the scaled statistics tend to their d_k -> infinity limit by
construction (given q the scaled logits are iid N(0, |q|^2 / d_k)); the
unscaled softmax saturating is the regime the suspicion is about.

Predictions: Vaswani et al. 2017's suspicion, tested on the gradient that
reaches q and K through the softmax (`gradients.py`), in the footnote's
setting (gaussian) and beside it (laplace: same assumptions, other law);
where the footnote's independence fails (low_rank), the derivation in
`gradients.py` predicts the scale does not keep the gradient flat; and the
exponent -1/2 of E||J||_2, derived here (`rate.py`), with an interval over
seeds. Every threshold is a config value fixed before the run.
"""

from __future__ import annotations

from experiments.lab.study import config_of, prediction

VASWANI = "Vaswani et al. 2017, §3.2.1"
QUOTE = (
    '"for large values of d_k, the dot products grow large in magnitude, pushing the softmax function '
    'into regions where it has extremely small gradients"'
)
FAMILIES = {"gaussian": "iid N(0, 1) components", "laplace": "iid Laplace components, variance 1"}


def _interval(check: dict) -> str:
    return f"[{check['low']:.3g}, {check['high']:.3g}] over seeds and both gradients"


def sanity(summary: dict) -> list[dict]:
    c, config = summary["checks"], config_of(summary)
    var_u, var_s, sat = (
        c["variance_unscaled"],
        c["variance_scaled"],
        c["unscaled_softmax_saturates"],
    )
    return [
        prediction(
            "Var(q.k) = d_k",
            f"{VASWANI}, footnote (an identity)",
            f"|measured / d_k - 1| <= {var_u['tolerance']:g} at every d_k",
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
            f"max weight, entropy and Jacobian norms within {config.saturation_tolerance:.0%} of the limit",
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


def gradient_predictions(summary: dict) -> list[dict]:
    grads = summary["checks"]["gradients"]
    out = []
    for family, setting in FAMILIES.items():
        v, f = grads[family]["vanishes"], grads[family]["flat"]
        out += [
            prediction(
                f"without the scale the gradient to q, K vanishes ({family})",
                f"{VASWANI}: {QUOTE}",
                f"median ||dL/dq||, ||dL/dK|| at the largest d_k <= {v['threshold']:g} x at the smallest",
                v["high"],
                v["pass"],
                f"{setting}; ratio {_interval(v)}",
            ),
            prediction(
                f"with the scale the gradient to q, K stays flat ({family})",
                f"{VASWANI} (the remedy)",
                f"median within {f['tolerance']:.0%} of its value at the largest d_k, "
                f"d_k >= {config_of(summary).flat_min_dim}",
                f["high"],
                f["pass"],
                f"{setting}; deviation {_interval(f)}",
            ),
        ]
    f = grads["low_rank"]["flat"]
    rank = config_of(summary).low_rank
    out.append(
        prediction(
            "with the scale the gradient is NOT flat when q, k share a low-rank subspace",
            "derived here: Var(q.k / sqrt(d_k)) ~ d_k / r without independence",
            f"median deviates by more than {f['tolerance']:.0%} from its value at the largest d_k",
            f["low"],
            f["pass"],
            f"r = {rank}; deviation {_interval(f)}",
        )
    )
    return out


def rate_prediction(summary: dict) -> dict:
    r, dims = summary["checks"]["jacobian_rate"], summary["rate"]["dims"]
    return prediction(
        "E||J||_2 of the unscaled softmax ~ d_k^(-1/2)",
        "derived here (rate.py: gap of the two largest logits)",
        f"fitted log-log slope within {r['tolerance']:g} of -1/2 in every seed",
        summary["worst_slope"],
        r["pass"],
        f"slopes [{r['low']:.3f}, {r['high']:.3f}] over seeds, d_k from {dims[0]} to {dims[-1]}",
    )


def predictions(summary: dict) -> list[dict]:
    """The sanity records, then the predictions."""
    return sanity(summary) + gradient_predictions(summary) + [rate_prediction(summary)]
