"""The spectra study (`experiments.spectra`): a run's metrics against the dense maps of the same model
(NumPy from the equations), the aggregation over the right axes, and each sanity row failing where its
identity is broken."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from experiments.lab import causal_lm as model_lib
from experiments.spectra import checks, summary
from experiments.spectra.study import METRICS
from tests.experiments.lab.test_studies import finished, spectra_test_config


def _dense_metrics(weights: np.ndarray) -> dict:
    """The study's metrics of dense causal maps `[L, H, T, T]` from the equations (float64)."""
    length = weights.shape[-1]
    sigma = np.linalg.svd(weights, compute_uv=False)
    mass = weights.sum(axis=-2)  # [L, H, T]
    logs = np.log(np.where(weights > 0, weights, 1.0))
    diagonal = np.sort(np.diagonal(weights, axis1=-2, axis2=-1), axis=-1)
    entropy = -np.sum(weights * logs, axis=-1)  # [L, H, T]
    return {
        "sigma_1": sigma[..., 0],
        "sigma_2": sigma[..., 1],
        "sigma_3": sigma[..., 2],
        "slem": diagonal[..., -2],
        "sink_mass": mass[..., 0] / length,
        "top_mass": mass.max(axis=-1) / length,
        "top_key": mass.argmax(axis=-1),
        "entropy": entropy[..., 1:].mean(axis=-1),
        # a causal row i sees i + 1 keys (without a window; no test reads it for a windowed map)
        "normalized_entropy": (entropy[..., 1:] / np.log(np.arange(2, length + 1))).mean(axis=-1),
    }


def test_a_runs_metrics_are_those_of_the_dense_maps():
    """Every layer, head and metric of one run (segment 1, T = 32, layers out of order) against the dense
    maps the model itself returns (`capture=("weights",)`)."""
    config = spectra_test_config()
    run = finished("spectra")
    rows = [json.loads(line) for line in (run.workdir / "metrics.jsonl").read_text().splitlines()]
    model, _ = model_lib.load(config)
    tokens = model_lib.segments(config, 32)[1][None]
    _, captured = model(jnp.asarray(tokens), capture=("weights",))
    weights = np.asarray(captured["weights"], np.float64)[:, 0]  # [L, H, T, T]
    want = _dense_metrics(weights[list(config.layers)])
    got = {
        (r["layer"], r["head"], r["metric"]): r["value"] for r in rows if r["run"] == "seg1-n00032"
    }
    for i, layer in enumerate(config.layers):
        for head in range(weights.shape[1]):
            for metric, values in want.items():
                np.testing.assert_allclose(
                    got[(layer, head, metric)],
                    values[i, head],
                    rtol=2e-5,
                    atol=1e-6,
                    err_msg=metric,
                )
            # The bounds are the subspace iteration's: the dense values lie within them (float32 maps).
            for k in (1, 2):
                error = abs(got[(layer, head, f"sigma_{k}")] - want[f"sigma_{k}"][i, head])
                assert error <= got[(layer, head, f"bound_{k}")] + 1e-5


WINDOW = 5  # the sliding window of the synthetic maps' second layer


def _synthetic(rng, lengths=(16, 32), segments=3, layers=(5, 2), heads=4) -> dict:
    """An aggregate (JSON form) of random causal maps with a sink on token 0, the second layer's within a
    sliding window of `WINDOW` keys, measured densely: each segment's logits drawn at the longest length,
    a shorter map their leading block (as a run reads a segment's first T tokens); distinct counts per
    axis."""
    size = max(lengths)
    logits = rng.normal(size=(segments, len(layers), heads, size, size)) * 2
    logits[..., 0] += 3.0
    rows, keys = np.arange(size)[:, None], np.arange(size)[None, :]
    logits[:, 1] = np.where(keys > rows - WINDOW, logits[:, 1], -np.inf)
    values = {m: [] for m in METRICS}
    for n in lengths:
        per = {m: [] for m in METRICS}
        for s in range(segments):
            x = np.where(np.tril(np.ones((n, n), bool)), logits[s, ..., :n, :n], -np.inf)
            weights = np.exp(x - x.max(axis=-1, keepdims=True))
            weights /= weights.sum(axis=-1, keepdims=True)
            dense = _dense_metrics(weights)
            zeros = np.zeros((len(layers), heads))
            window = zeros + np.array([[0], [WINDOW]])
            dense.update(bound_1=zeros, bound_2=zeros, window=window, max_len=zeros + 64)
            for m in METRICS:
                per[m].append(np.asarray(dense[m], np.float64).tolist())
        for m in METRICS:
            values[m].append(per[m])
    return {
        "lengths": list(lengths),
        "segments": segments,
        "layers": list(layers),
        "heads": heads,
        "values": values,
    }


def test_statistics_are_medians_over_heads_and_segments_per_length_and_layer():
    aggregated = _synthetic(np.random.default_rng(0))
    derived = summary.derive(aggregated)
    sigma = np.asarray(aggregated["values"]["sigma_1"])  # [n, s, l, h]
    gap = np.asarray(aggregated["values"]["sigma_2"]) / sigma
    per = derived["statistics"]["per_length"]
    np.testing.assert_allclose(per["sigma_1"]["median"], np.median(sigma, axis=(1, 3)), rtol=1e-12)
    np.testing.assert_allclose(per["gap_ratio"]["max"], gap.max(axis=(1, 3)), rtol=1e-12)
    slope = (np.log(sigma[1]) - np.log(sigma[0])) / np.log(2)  # two lengths: the secant
    np.testing.assert_allclose(
        derived["statistics"]["slopes"]["sigma_1"]["median"],
        np.median(slope, axis=(0, 2)),
        rtol=1e-10,
    )
    top = np.asarray(aggregated["values"]["top_key"])[-1]
    np.testing.assert_allclose(derived["statistics"]["sink_is_top"], np.mean(top == 0, axis=(0, 2)))


def _verdicts(aggregated) -> list[str]:
    return [row["verdict"] for row in checks.predictions(summary.derive(aggregated))[:4]]


def test_the_identities_hold_on_true_causal_maps():
    assert _verdicts(_synthetic(np.random.default_rng(1))) == ["pass"] * 4


def _break(values: dict, metric: str, index: tuple) -> float:
    """A value of `metric` for the map at `index` `(n, s, l, h)` that breaks its identity."""
    at = {m: np.asarray(values[m])[index] for m in ("sigma_1", "sigma_2", "top_mass", "top_key")}
    n = (16, 32)[index[0]]
    longer = np.asarray(values["sigma_1"])[1][index[1:]]
    seen = n - at["top_key"] if index[2] == 0 else min(WINDOW, n - at["top_key"])  # rows that see j
    column = at["sigma_1"] * np.sqrt(seen) / n  # max_j m_j / n at the column bound
    return {
        "sigma_1": 0.99,  # a row-stochastic map's norm is at least 1
        "top_mass": 1.01 * column,  # a column heavier than the norm allows
        "slem": 1.01 * at["sigma_1"] * at["sigma_2"],  # |lambda_2| above sigma_1 sigma_2
        "sigma_1_top": 1.01 * np.sqrt(at["top_mass"] * n),  # the norm above sqrt(max_j m_j)
        "sigma_1_fall": 1.01 * longer,  # the shorter map's norm above the longer one's
    }[metric]


@pytest.mark.parametrize(
    "metric, index, failing",
    [
        ("sigma_1", (0, 0, 0, 0), 0),
        ("sigma_1_top", (1, 2, 1, 3), 0),
        ("top_mass", (1, 1, 0, 2), 1),
        ("top_mass", (1, 0, 1, 1), 1),  # in the windowed layer: its rows that see the key, not T
        ("slem", (0, 0, 1, 1), 2),
        ("sigma_1_fall", (0, 2, 1, 0), 3),
    ],
)
def test_each_identity_fails_where_it_is_broken(metric, index, failing):
    """One map's value set just past its identity's limit, beyond the float32 allowance T eps."""
    aggregated = _synthetic(np.random.default_rng(2))
    name = metric.removesuffix("_top").removesuffix("_fall")
    values = np.asarray(aggregated["values"][name])
    values[index] = _break(aggregated["values"], metric, index)
    aggregated["values"][name] = values.tolist()
    assert _verdicts(aggregated)[failing] == "fail"


def test_the_papers_claims_are_not_applicable_rows():
    rows = checks.predictions(summary.derive(_synthetic(np.random.default_rng(3))))
    assert [r["kind"] for r in rows] == ["sanity"] * 4 + ["not applicable"] * 3
    assert all("initialisation" in r["note"] for r in rows[4:])
