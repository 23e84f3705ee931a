"""The softmax-scaling study: its measurements and their pieces (the contract: test_studies.py)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import softmax_scaling as config_lib
from experiments.softmax_scaling import study
from tests.test_studies import finished

DIMS = (4, 64, 1024)


@pytest.fixture(scope="module")
def run():
    return finished("softmax_scaling")


def test_rows_plots_and_report(run):
    assert run.summary["plots"] == ["jacobian.png", "saturation.png", "variance.png"]
    rows = [json.loads(line) for line in open(run.workdir / "metrics.jsonl")]
    assert len(rows) == len(DIMS) * 2 * (1 + len(study.STATS)) + len(study.STATS)  # d_k x scaling x quantity, limit
    assert {(r["d_k"], r["quantity"], r["scaling"]) for r in rows} == {
        (d, q, s) for d in DIMS for q in ("variance",) + study.STATS for s in study.SCALINGS} | {
        (None, q, "scaled") for q in study.STATS}
    report = (run.workdir / "report.md").read_text()
    assert "| 1024 |" in report and "PASS" in report and "plots/variance.png" in report


def test_report_tables_are_aligned_markdown(run):
    from experiments.report_util import markdown_table

    assert markdown_table(["a", "b"], [[1, ""], ["x|y", 2]], align="rc", pad_empty=False) == [
        "| a | b |", "|---:|:---:|", "| 1 | |", "| x\\|y | 2 |"]
    assert markdown_table(["a", "b"], [[1, ""]]) == ["| a | b |", "|---|---|", "| 1 |  |"]
    with pytest.raises(ValueError, match="align must give one of l, r, c for each of the 2 columns"):
        markdown_table(["a", "b"], [], align="rx")
    report = (run.workdir / "report.md").read_text()
    assert "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|" in report
    limit = run.summary["limit"]
    assert (f"| ∞ (scaled) | | {limit['max_weight']:.4f} | | {limit['entropy']:.4f} | | "
            f"{limit['jacobian_spectral']:.4g} | | {limit['jacobian_frobenius']:.4g} |") in report


def test_smoke_variances_match_the_predictions(run):
    summary = run.summary
    assert summary["checks"]["variance_unscaled"]["pass"]
    assert summary["checks"]["variance_scaled"]["pass"]
    assert [row["d_k"] for row in summary["variance"]] == list(DIMS)
    for row in summary["variance"]:
        assert row["unscaled"] == pytest.approx(row["d_k"], rel=0.05)
        assert row["scaled"] == pytest.approx(1.0, rel=0.05)
        assert row["pass"]


def test_smoke_saturation_follows_the_predictions(run):
    summary = run.summary
    checks = summary["checks"]
    assert checks["scaled_saturation_constant"]["pass"]
    assert checks["unscaled_softmax_saturates"]["pass"]
    assert checks["unscaled_jacobian_vanishes"]["pass"]
    assert [p["verdict"] for p in summary["predictions"]] == ["pass"] * 5
    rows = {r["d_k"]: r for r in summary["saturation"]}
    log_t = np.log(summary["num_keys"])
    for row in rows.values():
        assert 0 < row["scaled"]["entropy"] < log_t
        assert row["scaled"]["jacobian_spectral"] <= row["scaled"]["jacobian_frobenius"] + 1e-12
    # By d_k = 1024 the unscaled softmax passes back less gradient than the scaled one.
    assert rows[1024]["unscaled"]["jacobian_spectral"] < rows[1024]["scaled"]["jacobian_spectral"]
    assert rows[1024]["unscaled"]["max_weight"] > 5 * rows[1024]["scaled"]["max_weight"]


def test_softmax_jacobian_and_norms_against_numpy():
    p = jax.nn.softmax(jnp.asarray([2.0, -1.0, 0.5, 0.0, 3.0], jnp.float64))
    jac = np.asarray(study.softmax_jacobian(p))
    reference = np.asarray(jax.jacobian(jax.nn.softmax)(jnp.log(p)))
    np.testing.assert_allclose(jac, reference, atol=1e-12)
    spectral, frobenius = study.jacobian_norms(p)
    assert float(spectral) == pytest.approx(np.linalg.norm(jac, 2), rel=1e-10)
    assert float(frobenius) == pytest.approx(np.linalg.norm(jac), rel=1e-10)
    # Saturated: p = (1 - e, e) has ||J||_2 = 2 e (1 - e), even when 1 - e rounds to 1.
    eps = 1e-20
    spectral, _ = study.jacobian_norms(jnp.asarray([1.0, eps], jnp.float64))
    assert float(spectral) == pytest.approx(2 * eps, rel=1e-10)
    spectral, frobenius = study.jacobian_norms(jnp.asarray([1.0, 0.0, 0.0], jnp.float64))
    assert float(spectral) == 0.0 and float(frobenius) == 0.0


def test_results_do_not_depend_on_chunk_size():
    key = jax.random.key(3)
    a = study.dot_products(key, dim=8, num_samples=100, chunk_size=7)
    b = study.dot_products(key, dim=8, num_samples=100, chunk_size=100)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)


def test_config_variants():
    default, smoke = config_lib.get_config(), config_lib.get_config("smoke")
    study.specs(default)
    study.specs(smoke)
    assert min(default.dims) == 4 and max(default.dims) == 1024
    # 5% must be at least 5 standard errors of the sample variance at every d_k.
    for config in (default, smoke):
        assert all(config.variance_tolerance >= 5 * study.relative_standard_error(d, config.num_samples)
                   for d in config.dims)
