"""The pretrained study's checks of Sun, Chen, Kolter & Liu 2024, "Massive activations in large language models".

Their claims (for LLaMA2, Mixtral, GPT-2 and others): a few activations are
massive, >= 100 in size and about 1000x the median |activation| of their
hidden state or more (up to about 10^5x); they sit on the starting token and
on delimiter tokens (the first period or newline); they lie in a few fixed
feature dimensions; their values are largely constant across inputs. Each
check returns (measured, passed) from arrays; `predictions` names them.
"""

from __future__ import annotations

import numpy as np

from experiments.lab.render import fmt
from experiments.lab.study import prediction
from experiments.pretrained.study import MASSIVE_FACTOR, MASSIVE_VALUE
from experiments.pretrained.summary import array, massive

# On the starting token or a delimiter in 90% of sentences; 90% of the sentences' largest activations in the
# same 3 dimensions; spread (std / mean) of the largest activation over inputs <= 25%.
MASSIVE_SHARE = 0.9
FEW_DIMS = 3
MASSIVE_SPREAD = 0.25


def massive_layers(
    ratio, value, factor: float = MASSIVE_FACTOR, minimum: float = MASSIVE_VALUE
) -> list[int]:
    """Hidden states 1..L (0: the embeddings, left out) whose largest |a| is massive: >= minimum and >= factor x
    the median (means over sentences)."""
    r, v = array(ratio), array(value)
    return [layer for layer in range(1, len(r)) if r[layer] >= factor and v[layer] >= minimum]


def massive_exist_check(ratio, value) -> tuple[float, bool, list]:
    """(largest ratio of layers 1..L, some layer is massive, the massive layers)."""
    layers = massive_layers(ratio, value)
    return float(np.max(array(ratio)[1:])), bool(layers), layers


def massive_location_check(
    first, delimiter, layers, share: float = MASSIVE_SHARE
) -> tuple[float | None, bool | None]:
    """Over the massive layers, the mean share of sentences whose largest |a| is on the first token or a
    delimiter >= share; None without massive layers."""
    if not layers:
        return None, None
    value = float(np.mean((array(first) + array(delimiter))[layers]))
    return value, bool(value >= share)


def massive_dims_check(
    dims, layers, few: int = FEW_DIMS, share: float = MASSIVE_SHARE
) -> tuple[float | None, bool | None, list]:
    """Pooled over the massive layers, the share of sentences' largest |a| in the `few` most frequent
    dimensions >= share; `dims[l]`: `[dimension, sentences]` pairs. Returns (share, passed, those dimensions)."""
    if not layers:
        return None, None, []
    counts = {}
    for layer in layers:
        for dim, n in dims[layer]:
            counts[int(dim)] = counts.get(int(dim), 0) + n
    top = sorted(counts, key=lambda d: -counts[d])[:few]
    value = sum(counts[d] for d in top) / sum(counts.values())
    return float(value), bool(value >= share), top


def massive_constant_check(
    spread, layers, bound: float = MASSIVE_SPREAD
) -> tuple[float | None, bool | None]:
    """The median over the massive layers of std / mean of the largest |a| over sentences <= bound."""
    if not layers:
        return None, None
    value = float(np.median(array(spread)[layers]))
    return value, bool(value <= bound)


def predictions(full: dict) -> list[dict]:
    """Sun et al.'s four claims on the full model's hidden states."""
    m, source = massive(full), "Sun et al. 2024"
    ratio, passed, layers = massive_exist_check(m["ratio"], m["value"])
    named = ", ".join(str(a) for a in layers) or "none"
    checks = [
        prediction(
            "massive activations exist",
            source,
            f"some layer's largest |a| >= {MASSIVE_VALUE:g} and >= {MASSIVE_FACTOR:g} x the median |a| "
            "(means over sentences)",
            ratio,
            passed,
            f"largest ratio over layers 1..L; largest |a| {fmt(float(np.max(m['value'][1:])))}; "
            f"massive layers: {named}",
        )
    ]
    absent = "" if layers else "not measured: no massive layer"
    share, passed = massive_location_check(m["first"], m["delimiter"], layers)
    checks.append(
        prediction(
            "massive activations sit on the first token or delimiters",
            source,
            f"share of sentences >= {MASSIVE_SHARE:g} (mean over the massive layers)",
            share,
            passed,
            absent
            or f"first token {fmt(float(np.mean(m['first'][layers])))}, delimiters "
            f"{fmt(float(np.mean(m['delimiter'][layers])))}",
        )
    )
    share, passed, dims = massive_dims_check(m["dims"], layers)
    checks.append(
        prediction(
            "massive activations in a few fixed dimensions",
            source,
            f"share of sentences' largest |a| in the {FEW_DIMS} most frequent dimensions >= "
            f"{MASSIVE_SHARE:g} (pooled over the massive layers)",
            share,
            passed,
            absent or "dimensions " + ", ".join(str(d) for d in dims),
        )
    )
    spread, passed = massive_constant_check(m["spread"], layers)
    checks.append(
        prediction(
            "massive activations constant across inputs",
            source,
            f"std / mean of the largest |a| over sentences <= {MASSIVE_SPREAD:g} (median over the "
            "massive layers)",
            spread,
            passed,
            absent,
        )
    )
    return checks
