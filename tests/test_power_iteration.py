import json
import math
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import power_iteration as config_lib
from experiments import cli
from experiments import power_iteration as study


def tiny_config():
    config = config_lib.get_config("smoke")
    config.fixed.update(temperatures=(1.0,), num_matrices=2, seq_len=8, head_dim=8, steps=120)
    config.products.update(architectures=("attention_only",), num_layers=2, num_seeds=1, measure_batch_size=2)
    config.products.model.update(features=8, num_heads=2)
    config.products.task.update(num_pairs=2, num_queries=2, vocab_size=8)
    config.products.train.update(steps=2, batch_size=4, warmup_steps=1, log_every=2, eval_batches=1)
    config.clusters.update(temperatures=(0.05, 4.0), num_tokens=8, dim=4, steps=30, num_seeds=2)
    return config


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pi")
    messages = []
    summary = study.run(tiny_config(), str(workdir), progress=messages.append)
    return workdir, summary, messages


def test_outputs_and_report(finished):
    workdir, summary, messages = finished
    for name in ("config.json", "metrics.jsonl", "summary.json", "report.md"):
        assert (workdir / name).exists(), name
    assert sorted(p.name for p in (workdir / "plots").glob("*.png")) == [
        "clusters.png", "fixed_matrix_rate.png", "products_dobrushin.png"]
    assert json.loads((workdir / "summary.json").read_text()) == json.loads(json.dumps(summary))
    rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
    assert {r["run"] for r in rows} == {s.run_id for s in study.run_specs(tiny_config())}
    assert messages[-1] == f"report: {workdir / 'report.md'}"
    report = (workdir / "report.md").read_text()
    assert "## (a)" in report and "## (b)" in report and "## (c)" in report


def test_fixed_matrix_rate_matches_slem(finished):
    _, summary, _ = finished
    check = next(p for p in summary["predictions"] if p["name"].startswith("fixed matrix"))
    assert check["passed"] is True and check["measured"] <= 0.1
    for m in summary["fixed"]["fixed-t1"]["matrices"]:
        assert m["floor_reached"] and abs(m["rate"] / m["slem"] - 1) <= 0.1


def test_dobrushin_and_cluster_checks_pass(finished):
    _, summary, _ = finished
    by_name = {p["name"]: p for p in summary["predictions"]}
    dobrushin = [p for name, p in by_name.items() if name.startswith("Dobrushin bound")]
    assert len(dobrushin) == 3 and all(p["passed"] for p in dobrushin)  # untrained, init, trained
    clusters = summary["clusters"]
    assert clusters["clusters-t4"]["final_clusters"] == [1.0, 1.0]
    assert min(clusters["clusters-t0.05"]["final_clusters"]) >= 2


def test_rerun_skips_finished_runs(finished, monkeypatch):
    workdir, summary, _ = finished
    for part in study.RUNNERS:
        monkeypatch.setitem(study.RUNNERS, part, lambda *a, **k: pytest.fail("finished run redone"))
    assert study.run(tiny_config(), str(workdir), progress=lambda m: None) == summary


def test_killed_study_resumes_to_the_same_summary(finished, tmp_path, monkeypatch):
    """A workdir as a kill during the last run leaves it: that run has no record, no summary yet."""
    workdir, uninterrupted, _ = finished
    killed = tmp_path / "killed"
    shutil.copytree(workdir, killed, ignore=shutil.ignore_patterns("summary.json", "report.md", "*.png"))
    os.remove(killed / "runs" / "clusters-t4.json")
    real = study.RUNNERS["clusters"]
    for part in study.RUNNERS:
        monkeypatch.setitem(study.RUNNERS, part, lambda *a, **k: pytest.fail("finished run redone"))
    monkeypatch.setitem(study.RUNNERS, "clusters", real)
    messages = []
    assert study.run(tiny_config(), str(killed), progress=messages.append) == uninterrupted
    total = len(study.run_specs(tiny_config()))
    assert messages[0].startswith(f"power_iteration: {total} runs ({total - 1} already done)")
    assert messages[1] == "[1/1] clusters-t4"
    assert (killed / "metrics.jsonl").read_text() == (workdir / "metrics.jsonl").read_text()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: setattr(c.fixed, "temperatures", (0.0,)), r"fixed.temperatures must be a number in \(0, inf\)"),
        (lambda c: setattr(c.fixed, "steps", 1), r"fixed.steps must be an int >= 2"),
        (lambda c: setattr(c.clusters, "threshold", 2.0), r"clusters.threshold must be a number in \(0, 1\)"),
        (lambda c: setattr(c.products, "architectures", ("attention",)), r"unknown 'attention'; valid"),
        (lambda c: setattr(c.products.model, "features", 9), r"features \(9\) must be divisible by num_heads \(2\)"),
        (lambda c: setattr(c.products.train, "warmup_steps", 2), r"warmup_steps < total_steps"),
    ],
)
def test_bad_configs_fail_before_any_compilation(edit, message, tmp_path, monkeypatch):
    for part in study.RUNNERS:
        monkeypatch.setitem(study.RUNNERS, part, lambda *a, **k: pytest.fail("ran before validating"))
    config = tiny_config()
    edit(config)
    with pytest.raises(ValueError, match=message):
        study.run(config, str(tmp_path), progress=lambda m: None)
    assert not os.path.exists(tmp_path / "config.json")


def test_unknown_override_key_lists_valid_keys(capsys):
    parse = cli.flags_parser(config_lib.get_config)
    with pytest.raises(SystemExit):
        parse(["power_iteration", "--config", "configs/power_iteration.py", "--config.fixed.stepz=3"])
    err = capsys.readouterr().err
    assert "unknown config key 'fixed.stepz'" in err and "'fixed.steps'" in err


def test_config_variants():
    assert config_lib.get_config().fixed.tolerance == 0.1
    assert config_lib.get_config("smoke").products.train.steps < config_lib.get_config().products.train.steps
    with pytest.raises(ValueError, match="unknown config variant"):
        config_lib.get_config("big")


# --------------------------------------------------------------------------
# The pieces, against float64 NumPy references


def test_fit_rate_recovers_a_geometric_rate():
    k = np.arange(120, dtype=np.float64)
    fit = study.fit_rate(3.0 * 0.7**k + 0.5 * 0.2**k, floor=1e-12)
    # 3 * 0.7^k first falls below 1e-12 at k = 81: the fit spans k = 40..80.
    assert fit["floor_reached"] and (fit["fit_start"], fit["fit_end"]) == (40, 80)
    assert abs(fit["rate"] - 0.7) < 1e-6
    assert math.isnan(study.fit_rate(np.array([1.0, 1e-20, 0.0]), floor=1e-12)["rate"])


def test_distance_to_limit_matches_matrix_powers():
    rng = np.random.default_rng(0)
    a = rng.random((5, 5))
    a /= a.sum(axis=1, keepdims=True)
    w, v = np.linalg.eig(a.T)
    pi = np.real(v[:, np.argmax(np.real(w))])
    pi /= pi.sum()
    got = study.distance_to_limit(jnp.asarray(a), jnp.asarray(pi), 6)
    want = [0.5 * np.max(np.abs(np.linalg.matrix_power(a, k) - pi[None, :]).sum(axis=1)) for k in range(7)]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-14)


def test_self_attention_step_matches_reference():
    x = np.random.default_rng(1).normal(size=(6, 3))
    logits = x @ x.T / np.sqrt(3) / 0.5
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    want = (weights / weights.sum(axis=1, keepdims=True)) @ x
    np.testing.assert_allclose(np.asarray(study.self_attention_step(jnp.asarray(x), 0.5)), want, rtol=1e-10)


def test_count_clusters_uses_single_linkage():
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = np.repeat(centres, 3, axis=0) + 1e-3 * np.arange(9, dtype=np.float64)[:, None]
    assert int(study.count_clusters(jnp.asarray(x), 0.1)) == 3
    chain = np.array([[0.0], [0.5], [1.0], [1.5], [5.0]])  # 0-1.5 linked step by step, 5 alone
    assert int(study.count_clusters(jnp.asarray(chain), 0.6)) == 2
    assert int(study.count_clusters(jnp.asarray(chain), 0.4)) == 5


def test_attention_products_bound_and_causal_limit():
    key = jax.random.key(0)
    logits = 3.0 * jax.random.normal(key, (4, 2, 3, 6, 6), jnp.float64)  # [L, B, H, T, T]
    causal = jnp.tril(jnp.ones((6, 6), bool))
    for mask in (None, causal):
        weights = jax.nn.softmax(logits if mask is None else jnp.where(mask, logits, -jnp.inf), axis=-1)
        out = {k: np.asarray(v) for k, v in study.attention_products(weights, jnp.float64).items()}
        assert out["mean/delta"].shape == (2, 4) and out["head/delta"].shape == (2, 3, 4)
        for chain in ("mean", "head"):
            assert np.all(out[f"{chain}/delta"] <= out[f"{chain}/bound"] + 1e-12)
            assert np.all(np.diff(out[f"{chain}/delta"], axis=-1) <= 1e-12)
        if mask is not None:
            assert np.all(out["mean/absorbing"] == 1)
            np.testing.assert_allclose(out["mean/pi_first"], 1.0, atol=1e-10)
