"""The spectra study's rows, each of one kind (`experiments.lab.study.KINDS`), from the summary.

Naderi, Nait Saada and Tanner's claims (rank collapse in width, the spectral
gap as its cause, the outlier's removal as a fix) are statements about one
attention layer at initialisation, tested in their setting by the width study
(`experiments.width`). A pretrained causal LM is not that setting: trained
weights, causal maps with rotary positions, many layers with skips and norms.
Here they are *not applicable* rows, and what the model's maps do is measured
(the report's tables), not judged.

Sanity rows, identities of any causal row-stochastic map A `[T, T]`, with
m_j = sum_i a_ij the mass key j receives (a lower limit is checked at the
computed value plus its subspace-iteration bound, an upper one at the value,
which never exceeds the true one; the float32 rounding of a sum of T terms,
T eps, is allowed):

* 1 <= sigma_1 <= sqrt(max_j m_j): ||A|| >= ||A 1|| / ||1|| = 1, and
  ||A||^2 <= ||A||_1 ||A||_inf;
* sigma_1 >= m_j / sqrt(c_j), c_j the rows that see key j (T - j; min(W, T - j)
  with a sliding window W): ||A|| >= ||A e_j|| (Cauchy-Schwarz);
* |lambda_2| <= sigma_1 sigma_2: Weyl's inequality |lambda_1 lambda_2| <=
  sigma_1 sigma_2 with lambda_1 = a_00 = 1 (row 0 sees only itself, and no
  diagonal entry exceeds 1); it also needs sigma_2 resolved within its bound;
* sigma_1 and |lambda_2| do not fall as T grows: a run reads a segment's first
  T tokens, so the shorter map is the leading block of the longer one.
"""

from __future__ import annotations

from experiments.lab.study import prediction

PAPER = "Naderi, Nait Saada and Tanner 2025, abstract"
CLAIMS = (
    (
        "rank collapse in width as the context length grows",
        '"(iii) rank collapse in width, which occurs as the context length increases"',
    ),
    (
        "a spectral gap between sigma_1 and sigma_2 as its cause",
        '"a spectral gap between the two largest singular values of the attention matrix as the '
        'cause of (iii)"',
    ),
    (
        "removing the outlier mitigates it",
        '"mitigate rank collapse in width by removing the outlier eigenvalue(s)"',
    ),
)
NOT_THEIR_SETTING = (
    "the claim is about one softmax attention layer at initialisation (tested in that setting by the "
    "width study), whose outlier is the direction 1 of a nearly uniform map (sigma_1 near 1, a bulk "
    "of order n^(-1/2)); this is a trained causal LM (trained weights, causal maps with rotary "
    "positions, many layers with skips and norms), whose outlier, where there is one, is a sink's "
    "column (sigma_1 >> 1): its maps are measured in the report, not judged"
)


def sanity_rows(summary: dict) -> list[dict]:
    """The four identities of causal row-stochastic maps (see the module docstring)."""
    s = summary["statistics"]["sanity"]
    tol = s["tolerance"]
    where = f"every layer, head, segment and length (T up to {max(summary['lengths'])})"

    def row(name, source, rule, value, passed, note):
        return prediction(name, source, rule, value, passed, note, kind="sanity")

    low, high = s["sigma_1_min"], s["norm_ratio_max"]
    return [
        row(
            "1 <= sigma_1(A) <= sqrt(max_j m_j)",
            "A is row-stochastic: ||A|| >= ||A 1|| / ||1|| = 1, and ||A||^2 <= ||A||_1 ||A||_inf = "
            "max_j m_j, m_j = sum_i a_ij (identities)",
            f"over {where}: min (sigma_1 + bound) >= 1 - T eps and max sigma_1 / sqrt(max_j m_j) <= "
            f"1 + T eps, T eps = {tol:.3g}",
            low,
            low >= 1 - tol and high <= 1 + tol,
            f"min sigma_1 + bound = {low:.6f}; max sigma_1 / sqrt(max_j m_j) = {high:.6f}",
        ),
        row(
            "sigma_1(A) >= m_j / sqrt(c_j) for the key j that receives the most",
            "||A|| >= ||A e_j|| >= m_j / sqrt(c_j), c_j the rows that see key j: T - j, or min(W, T - j) "
            "in a layer of sliding window W (Cauchy-Schwarz)",
            f"min over {where} of (sigma_1 + bound) sqrt(c_j) / m_j >= 1 - T eps",
            s["column_ratio_min"],
            s["column_ratio_min"] >= 1 - tol,
            f"min ratio = {s['column_ratio_min']:.6f}",
        ),
        row(
            "|lambda_2(A)| <= sigma_1 sigma_2",
            "Weyl's inequality |lambda_1 lambda_2| <= sigma_1 sigma_2, lambda_1 = a_00 = 1 for a causal "
            "map; the computed sigma_2 is a Rayleigh-Ritz value, below the true one until it has "
            "converged, so the row also asks sigma_2 to be resolved within its bound",
            f"max over {where} of |lambda_2| / ((sigma_1 + bound) (sigma_2 + bound)) <= 1 + T eps",
            s["weyl_ratio_max"],
            s["weyl_ratio_max"] <= 1 + tol,
            f"max ratio = {s['weyl_ratio_max']:.6f}",
        ),
        row(
            "sigma_1 and |lambda_2| do not fall as T grows",
            "the map of a segment's first T tokens is the leading T x T block of that of its first "
            "T' > T (causal rows see only earlier keys): its singular values interlace below, its "
            "diagonal is a subset",
            "per head and segment, from each length to the next: the largest relative fall of "
            "sigma_1 (beyond the longer map's bound) and of |lambda_2| <= T eps",
            s["growth_excess"],
            s["growth_excess"] <= tol,
            f"largest relative fall = {s['growth_excess']:.3g}",
        ),
    ]


def predictions(summary: dict) -> list[dict]:
    """The sanity rows, then the paper's three claims as not applicable."""
    rows = sanity_rows(summary)
    for name, quote in CLAIMS:
        rows.append(
            prediction(
                name, f"{PAPER}: {quote}", "-", None, None, NOT_THEIR_SETTING, kind="not applicable"
            )
        )
    return rows
