import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import softmax_scaling as config_lib
from experiments import softmax_scaling as study

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _smoke(**overrides):
    config = config_lib.get_config("smoke")
    config.dims = (4, 64, 1024)
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("softmax_scaling"))
    return workdir, study.run(_smoke(), workdir)


def test_smoke_run_writes_every_output(smoke_run):
    workdir, summary = smoke_run
    for name in ("config.json", "metrics.jsonl", "summary.json", "report.md"):
        assert os.path.getsize(os.path.join(workdir, name)) > 0, name
    pngs = sorted(os.listdir(os.path.join(workdir, "plots")))
    assert pngs == ["jacobian.png", "saturation.png", "variance.png"]
    for png in pngs:
        with open(os.path.join(workdir, "plots", png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    assert len(rows) == 3 * 2 * (1 + len(study.STATS))  # d_k x scaling x quantity
    assert {(r["d_k"], r["quantity"], r["scaling"]) for r in rows} == {
        (d, q, s) for d in (4, 64, 1024) for q in ("variance",) + study.STATS for s in study.SCALINGS}
    with open(os.path.join(workdir, "summary.json")) as f:
        assert json.load(f) == json.loads(json.dumps(summary))
    report = open(os.path.join(workdir, "report.md")).read()
    assert "| 1024 |" in report and "PASS" in report and "plots/variance.png" in report


def test_smoke_variances_match_the_predictions(smoke_run):
    _, summary = smoke_run
    assert summary["checks"]["variance_unscaled"]["pass"]
    assert summary["checks"]["variance_scaled"]["pass"]
    for row in summary["variance"]:
        assert row["unscaled"] == pytest.approx(row["d_k"], rel=0.05)
        assert row["scaled"] == pytest.approx(1.0, rel=0.05)
        assert row["pass"]


def test_smoke_saturation_follows_the_predictions(smoke_run):
    _, summary = smoke_run
    checks = summary["checks"]
    assert checks["scaled_saturation_constant"]["pass"]
    assert checks["unscaled_softmax_saturates"]["pass"]
    assert checks["unscaled_jacobian_vanishes"]["pass"]
    rows = {r["d_k"]: r for r in summary["saturation"]}
    log_t = np.log(summary["num_keys"])
    for row in rows.values():
        assert 0 < row["scaled"]["entropy"] < log_t
        assert row["scaled"]["jacobian_spectral"] <= row["scaled"]["jacobian_frobenius"] + 1e-12
    # By d_k = 1024 the unscaled softmax passes back less gradient than the scaled one.
    assert rows[1024]["unscaled"]["jacobian_spectral"] < rows[1024]["scaled"]["jacobian_spectral"]
    assert rows[1024]["unscaled"]["max_weight"] > 5 * rows[1024]["scaled"]["max_weight"]


def test_second_run_skips_finished_runs(smoke_run, monkeypatch):
    workdir, summary = smoke_run

    def measure_again(config, dim):
        raise AssertionError(f"d_k={dim} was measured again")

    monkeypatch.setattr(study, "measure_dim", measure_again)
    assert study.run(_smoke(), workdir) == summary


def test_resume_measures_only_missing_runs(smoke_run, tmp_path, monkeypatch):
    workdir, summary = smoke_run
    config = _smoke()
    study.validate_config(config)
    # A workdir where the d_k = 64 run was killed: only that one is redone.
    for name in ("config.json",):
        (tmp_path / name).write_text(open(os.path.join(workdir, name)).read())
    (tmp_path / "runs").mkdir()
    for run in ("d_k=00004", "d_k=01024"):
        (tmp_path / "runs" / f"{run}.json").write_text(open(os.path.join(workdir, "runs", f"{run}.json")).read())
    measured = []
    original = study.measure_dim
    monkeypatch.setattr(study, "measure_dim", lambda c, d: measured.append(d) or original(c, d))
    assert study.run(config, str(tmp_path)) == summary
    assert measured == [64]


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


def test_unknown_config_key_lists_the_valid_keys(tmp_path):
    config = _smoke()
    config.unlock()
    config.num_sample = 10
    with pytest.raises(ValueError, match=r"unknown config keys \['num_sample'\].*valid keys: .*'num_samples'"):
        study.run(config, str(tmp_path))
    locked = _smoke()
    locked.lock()
    with pytest.raises(AttributeError, match="num_samples"):  # ml_collections lists the fields present
        locked.num_sample = 10
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("num_samples", -5, "config.num_samples must be >= 2"),
        ("saturation_samples", 0, "config.saturation_samples must be >= 1"),
        ("dims", (4, 0), "config.dims: every d_k must be an int >= 1"),
        ("dims", (), "config.dims must be a non-empty"),
        ("variance_tolerance", 1.5, "config.variance_tolerance must be a number in"),
    ],
)
def test_bad_values_fail_before_any_compute(tmp_path, monkeypatch, field, value, message):
    monkeypatch.setattr(study, "measure_dim", lambda *a: pytest.fail("computed before validating"))
    config = _smoke()
    setattr(config, field, value)
    with pytest.raises(ValueError, match=message):
        study.run(config, str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_command_line_typo_lists_the_valid_keys(tmp_path):
    cmd = [sys.executable, "-m", "experiments.softmax_scaling", "--config", "configs/softmax_scaling.py:smoke",
           "--config.num_sample=3", "--workdir", str(tmp_path / "out")]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "unknown config key 'num_sample'" in result.stderr and "'num_samples'" in result.stderr
    assert not (tmp_path / "out").exists()


def test_config_variants():
    default, smoke = config_lib.get_config(), config_lib.get_config("smoke")
    study.validate_config(default)
    study.validate_config(smoke)
    assert min(default.dims) == 4 and max(default.dims) == 1024
    # 5% must be at least 5 standard errors of the sample variance at every d_k.
    for config in (default, smoke):
        assert all(config.variance_tolerance >= 5 * study.relative_standard_error(d, config.num_samples)
                   for d in config.dims)
    with pytest.raises(ValueError, match="unknown config variant"):
        config_lib.get_config("fast")
