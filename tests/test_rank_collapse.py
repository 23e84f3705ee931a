"""The rank-collapse study: what it measures and how its training runs resume (the contract: test_studies.py)."""
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import study as study_lib
from attnjax import training, workdir
from configs import rank_collapse as config_lib
from experiments.rank_collapse import STUDY
from experiments.rank_collapse import study as rank_collapse_study
from tests.test_nn_params import _models
from tests.test_studies import finished, rank_collapse_test_config

TRAIN_RUN = "train-softmax-skip_mlp-L01-t1-edefault"
INIT_RUN = "init-softmax-attention_only-L04-t1-e1"


@pytest.fixture(scope="module")
def run():
    return finished("rank_collapse")


def _phases(summary, run_id):
    return {(p["phase"], p["step"]): p["metrics"] for p in summary["runs"][run_id]["phases"]}


def test_rows_hold_per_layer_profiles(run):
    rows = [json.loads(line) for line in open(run.workdir / "metrics.jsonl")]
    # Per-layer profiles have L + 1 hidden-state values and L attention values.
    row = next(r for r in rows if r["run"] == INIT_RUN and r["metric"] == "residual_fro")
    assert len(row["values"]) == 5 and row["depth"] == 4 and row["phase"] == "init" and row["step"] == 0
    row = next(r for r in rows if r["run"] == INIT_RUN and r["metric"] == "slem")
    assert len(row["values"]) == 4
    # Attention-only runs carry Dong et al.'s per-example residuals and bound, in float64.
    row = next(r for r in rows if r["run"] == INIT_RUN and r["metric"] == "dong/residual")
    assert len(row["values"]) == rank_collapse_test_config().measure_batch_size and len(row["values"][0]) == 5
    assert min(min(v) for v in row["values"]) < 1e-9  # below float32 resolution: measured in float64
    report = (run.workdir / "report.md").read_text()
    assert "Literature predictions" in report and "Dong et al. 2021" in report


def test_pure_attention_collapses_at_initialisation(run):
    names = {p["name"].rsplit(" (", 1)[0]: p for p in run.summary["predictions"]}
    verdicts = {name: (p["kind"], p["verdict"]) for name, p in names.items()}
    assert verdicts["attention at initialisation is not uniform"] == ("sanity", "pass")
    assert verdicts["float64 profile resolved"] == ("sanity", "pass")
    assert names["float64 profile resolved"]["measured"] >= 4
    assert verdicts["Dong's cubic exponent"] == ("prediction", "pass")
    assert "over 10 seeds" in names["Dong's cubic exponent"]["note"]
    assert verdicts["residual <= Dong's bound at every resolved layer"] == ("sanity", "pass")
    assert verdicts["causal pure attention collapses exponentially"] == ("prediction", "pass")
    # At width 16, L = 4 (the test config) the causal residual falls 1.2-1.4x slower than its maps' |lambda_2|.
    assert verdicts["the causal collapse rate is the maps' |lambda_2|"] == ("prediction", "fail")
    assert "10 seeds" in names["causal pure attention collapses exponentially"]["name"]
    assert verdicts["the causal mask slows the collapse"] == ("prediction", "pass")
    assert verdicts["layer-1 logit variance = (std_e^2 + std_p^2)^2"] == ("sanity", "pass")
    noci = names["skip scaled by 1/sqrt(L) keeps rank"]
    # Measured at width 16, L = 4 (the test config): the scaled skips end below r_L = 0.9.
    assert (noci["kind"], noci["verdict"]) == ("prediction", "fail"), noci["note"]
    phases = _phases(run.summary, TRAIN_RUN)
    assert {("init", 0), ("train", 2), ("train", 4), ("final", 4)} == set(phases)
    assert {"eval_accuracy", "diverged", "chance_accuracy", "path_residual"} <= set(phases[("final", 4)])


def test_gradient_check_compares_one_architecture_at_two_depths(run):
    check = next(p for p in run.summary["predictions"] if p["name"].startswith("query/key gradients"))
    assert check["verdict"] == "pass" and "L=1" in check["note"] and "L=4" in check["note"]
    assert "grad_norm/query" in _phases(run.summary, "grad-softmax-attention_only-L04-t1-e1")[("init", 0)]
    assert "grad_norm/query" not in _phases(run.summary, INIT_RUN)[("init", 0)]


def test_report_has_the_regime_and_the_figures(run):
    report = (run.workdir / "report.md").read_text()
    for text in ("entropy / log S", "tau", "logit variance", "Dong's bound", "Causal mask x LayerNorm",
                 "path-length"):
        assert text in report, text
    assert {"init_residual.png", "dong_fit.png", "causal_layernorm.png", "path_length.png"} <= set(run.summary["plots"])


def test_training_check_needs_every_seed():
    from experiments.rank_collapse import checks

    def summary_with(accs):
        phases = [{"phase": "train", "step": 100, "metrics": {"accuracy": [0.2] * len(accs)}},
                  {"phase": "final", "step": 100, "metrics": {"eval_accuracy": accs, "chance_accuracy": [0.1] * 2}}]
        spec = {"sweep": "train", "kind": "softmax", "architecture": "skip_mlp", "depth": 4, "temperature": 1.0,
                "causal": True, "embedding_std": None}
        return {"runs": {"r": {"spec": spec, "phases": phases}}}

    assert checks.training_checks(summary_with([1.0, 0.95]))[0]["verdict"] == "pass"
    # The mean (0.63) was the old test; one seed on the plateau now fails it.
    assert checks.training_checks(summary_with([1.0, 0.26]))[0]["verdict"] == "fail"


def _with_every_run_but_training(run, path):
    """A workdir holding the finished study's config and the records of every run but the training run:
    a re-run skips those runs and does only the training run."""
    shutil.copy(run.workdir / "config.json", path / "config.json")
    (path / "runs").mkdir()
    for record in (run.workdir / "runs").glob("*.json"):
        if record.stem != TRAIN_RUN:
            shutil.copy(record, path / "runs" / record.name)


def _run(path, progress=lambda line: None):
    return study_lib.run(STUDY, rank_collapse_test_config(), str(path), progress=progress)


def test_killed_training_resumes_to_the_same_summary(run, tmp_path, monkeypatch, figures_not_rendered):
    _with_every_run_but_training(run, tmp_path)
    real_save = training.Checkpointer.save

    def save_then_die(self, step, state):
        real_save(self, step, state)
        if step == 2:
            raise KeyboardInterrupt("simulated kill after the first checkpoint")

    monkeypatch.setattr(training.Checkpointer, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    assert (tmp_path / "checkpoints" / TRAIN_RUN).exists()
    monkeypatch.setattr(training.Checkpointer, "save", real_save)
    messages = []
    assert _run(tmp_path, messages.append) == run.summary
    assert any("resumed from step 2" in m for m in messages)
    runs = len(run.summary["runs"])
    assert messages[0].startswith(f"rank_collapse: {runs} runs ({runs - 1} already done)")  # only the killed run
    assert not (tmp_path / "checkpoints" / TRAIN_RUN).exists()


def test_config_variants():
    assert config_lib.get_config().init_sweep.causal is False
    assert config_lib.get_config("smoke").train_sweep.causal is True


def test_readme_results_are_the_committed_summary_rendered():
    """The templates render the committed summary byte for byte into the committed report and README section;
    its predictions are the checks of that summary."""
    from pathlib import Path

    from experiments.rank_collapse import checks, report

    repo = Path(__file__).resolve().parent.parent
    results = repo / report.README_RESULTS
    summary = json.loads((results / "summary.json").read_text())
    timing = json.loads((results / "timing.json").read_text())
    readme = (repo / "README.md").read_text()
    start = readme.index("## Results\n")
    end = min(readme.find(m, start) + 1 for m in ("\n## ", "\n<!--") if m in readme[start:])  # the next section
    assert readme[start:end] == report.readme_section(summary, timing) + "\n"
    # The committed report, predictions and plots are those of the committed summary.
    assert (results / "report.md").read_text() == report.markdown(summary)
    assert workdir.json_form(checks.predictions(summary)) == summary["predictions"]
    assert sorted(p.name for p in (results / "plots").iterdir()) == summary["plots"]


def test_dong_metrics_read_fused_and_separate_qkv_alike():
    """Dong et al.'s constant reads W_Q, W_K, W_V, W_O through `nn.params`: a fused W_qkv gives the same numbers."""
    separate, fused = _models(num_kv_heads=4)
    hidden = jax.random.normal(jax.random.key(0), (3, 2, 5, 16), jnp.float64)  # [L + 1, B, T, D]
    got = {name: rank_collapse_study._dong_metrics(nnx.state(model, nnx.Param), hidden, 4, 1.0)
           for name, model in (("separate", separate), ("fused", fused))}
    assert np.all(np.asarray(got["separate"]["dong/constant"]) > 0)
    for metric, value in got["separate"].items():
        np.testing.assert_allclose(got["fused"][metric], value, rtol=1e-12, err_msg=metric)



# --------------------------------------------------------------------------
# Controls: synthetic inputs on which each check must say fail (and pass where the paper's claim holds)


def _noisy(profile, seeds=10, examples=4, noise=0.05, seed=0):
    """`[L + 1]` -> `[seeds, examples, L + 1]` with log-normal noise on every point."""
    rng = np.random.default_rng(seed)
    return np.asarray(profile)[None, None] * np.exp(noise * rng.standard_normal((seeds, examples, len(profile))))


def _cubic(k, r0, num_layers, seeds=10, examples=4, noise=0.05, seed=0):
    """Noisy cubic maps r_(l+1) = K r_l^3 e^(noise N(0, 1)), `[seeds, examples, L + 1]`."""
    rng = np.random.default_rng(seed)
    r = [np.full((seeds, examples), r0)]
    for _ in range(num_layers):
        r.append(k * r[-1] ** 3 * np.exp(noise * rng.standard_normal((seeds, examples))))
    return np.stack(r, axis=-1)


def _exponent_verdict(r):
    from experiments.rank_collapse import checks
    from experiments.rank_collapse import summary as s

    return checks.exponent_check(s.cubic_exponent(r, r), "synthetic")


@pytest.mark.parametrize("profile", [0.05 ** np.arange(6.0), np.exp(-1.0 * np.arange(6.0) ** 2),
                                     np.exp(-1.6 * np.arange(6.0) ** 1.8)], ids=["geometric", "l^2", "l^1.8"])
def test_dong_exponent_fails_on_super_geometric_decay_that_is_not_cubic(profile):
    assert _exponent_verdict(_noisy(profile))["verdict"] == "fail"


@pytest.mark.parametrize("k,r0", [(0.15, 0.9), (0.5, 0.9), (3.0, 0.3), (20.0, 0.15)])
def test_dong_exponent_passes_on_noisy_cubic_maps(k, r0):
    r = _cubic(k, r0, 5)
    check = _exponent_verdict(r)
    assert check["verdict"] == "pass", check["note"]
    assert abs(check["measured"] - 3) < 0.1


def test_dong_exponent_fails_with_fewer_than_four_resolved_layers():
    # A cubic map resolved on 3 layers only (layer 3 falls below 1e-13): the regime cannot carry the verdict.
    r = _cubic(1.0, 0.05, 4)
    assert r[..., 3].max() < 1e-13 < r[..., 2].min()
    assert _exponent_verdict(r)["verdict"] == "fail"


def test_cubic_exponent_matches_an_independent_regression_and_skips_unresolved_points():
    from experiments.rank_collapse import summary as s

    r = _cubic(0.5, 0.9, 5)  # layers 4, 5 are below 1e-13
    rel = r.copy()
    got = s.cubic_exponent(r, rel)
    for seed in range(r.shape[0]):
        x, y = [], []
        for b in range(r.shape[1]):
            for layer in range(1, r.shape[2]):
                if rel[seed, b, layer - 1] > 1e-13 and rel[seed, b, layer] > 1e-13:
                    x.append(np.log(r[seed, b, layer - 1]))
                    y.append(np.log(r[seed, b, layer]))
        x, y = np.array(x), np.array(y)
        slope = np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2)
        np.testing.assert_allclose(got["slopes"][seed], slope, rtol=1e-10)
    slopes = np.array(got["slopes"])
    from scipy import stats
    half = stats.t.ppf(0.975, len(slopes) - 1) * slopes.std(ddof=1) / np.sqrt(len(slopes))
    np.testing.assert_allclose([got["low"], got["high"]], [slopes.mean() - half, slopes.mean() + half])
    assert got["layers"] == int(np.argmin(np.all(rel > 1e-13, axis=(0, 1))))


def test_cubic_exponent_rejects_mismatched_shapes():
    from experiments.rank_collapse import summary as s

    with pytest.raises(ValueError, match=r"res_abs and rel .*\(2, 3, 4\).*\(2, 3, 5\)"):
        s.cubic_exponent(np.ones((2, 3, 4)), np.ones((2, 3, 5)))


def test_bound_looseness_reads_only_resolved_layers_and_the_check_fails_above_the_bound():
    from experiments.rank_collapse import checks
    from experiments.rank_collapse import summary as s

    rel = np.array([[[0.5, 1e-3, 1e-9, 1e-15]]])  # [S, B, L + 1]; layer 3 is rounding
    res_abs = 2 * rel
    bound = np.array([[[1.0, 4e-3, 1e-9]]])  # [S, B, L]
    rows = s.bound_looseness(bound, res_abs, rel)
    assert [row["layer"] for row in rows] == [1, 2]
    np.testing.assert_allclose([row["max"] for row in rows], [2e-3 / 1.0, 2e-9 / 4e-3])
    assert checks.bound_check(rows, "synthetic")["verdict"] == "pass"
    assert checks.bound_check(s.bound_looseness(bound * 1e-4, res_abs, rel), "synthetic")["verdict"] == "fail"
    assert checks.bound_check([], "synthetic")["verdict"] == "not measured"


def _run_record(sweep, architecture, depth, metrics, causal=False, std=1.0):
    spec = {"sweep": sweep, "kind": "softmax", "architecture": architecture, "depth": depth, "temperature": 1.0,
            "causal": causal, "embedding_std": std}
    return {"spec": spec, "phases": [{"phase": "init", "step": 0, "metrics": metrics}]}


def _summary(*records):
    config = rank_collapse_test_config().to_dict()
    return {"config": config, "runs": {f"r{i}": r for i, r in enumerate(records)}}


def test_noci_check_fails_when_the_scaled_skips_lose_rank():
    from experiments.rank_collapse import checks

    def summary(scaled_last):
        profile = lambda last: {"residual_fro": [[0.99, last]] * 2}  # noqa: E731
        return _summary(_run_record("init", "skip_scaled", 4, profile(scaled_last)),
                        _run_record("init", "skip", 4, profile(0.5)))

    assert checks.noci_check(summary(0.95))["verdict"] == "pass"
    assert checks.noci_check(summary(0.4))["verdict"] == "fail"


def test_gradient_check_fails_when_query_key_gradients_grow_with_depth():
    from experiments.rank_collapse import checks

    def summary(deep_qk):
        grads = lambda qk: {"grad_norm/query": [qk] * 2, "grad_norm/key": [qk] * 2, "grad_norm/value": [1.0] * 2}  # noqa: E731
        return _summary(_run_record("grad", "attention_only", 1, grads(0.5), causal=True),
                        _run_record("grad", "attention_only", 8, grads(deep_qk), causal=True))

    assert checks.gradient_checks(summary(0.1))[0]["verdict"] == "pass"
    assert checks.gradient_checks(summary(2.0))[0]["verdict"] == "fail"


def _causal_summary(causal_profile, slem=0.5, seeds=10, noise=0.02):
    """A causal attention-only run with relative residuals `causal_profile` (`[L + 1]`, or `[seeds, L + 1]`; times
    noise) and maps of |lambda_2| `slem`, beside a bidirectional twin falling 100x per layer."""
    rng = np.random.default_rng(0)
    r = np.asarray(causal_profile, np.float64)
    r = np.broadcast_to(r, (seeds, r.shape[-1]))
    depth = r.shape[-1] - 1
    causal = {"residual_fro": (r * np.exp(noise * rng.standard_normal(r.shape))).tolist(),
              "slem": np.full((seeds, depth), slem).tolist(), "dobrushin": np.full((seeds, depth), 0.9).tolist(),
              "attention_entropy_normalized": np.full((seeds, depth), 0.99).tolist()}
    bidir = {"residual_fro": [list(0.01 ** np.arange(depth + 1.0))] * 2}
    return _summary(_run_record("mask", "attention_only", depth, causal, causal=True),
                    _run_record("init", "attention_only", depth, bidir))


def _mask_verdicts(causal_profile, **kw):
    from experiments.rank_collapse import checks

    return {c["name"].split(" (")[0]: c["verdict"] for c in checks.mask_checks(_causal_summary(causal_profile, **kw))}


EXPONENTIAL = "causal pure attention collapses exponentially"
LAMBDA2 = "the causal collapse rate is the maps' |lambda_2|"
SLOWER = "the causal mask slows the collapse"
LAYERS = np.arange(17.0)


def test_causal_checks_pass_on_a_geometric_profile_at_the_maps_lambda_2():
    assert _mask_verdicts(0.5 ** LAYERS) == {EXPONENTIAL: "pass", LAMBDA2: "pass", SLOWER: "pass"}


@pytest.mark.parametrize("profile", [
    np.full(17, 0.8),  # no collapse
    np.exp(-0.05 * 3.0 ** (LAYERS / 4)),  # doubly exponential: the rate falls with depth
    np.exp(-0.02 * LAYERS ** 2),  # super-geometric
    (1 + LAYERS) ** -3.0,  # a power law: the rate rises toward 1
], ids=["flat", "doubly-exponential", "gaussian", "power-law"])
def test_the_exponential_check_fails_where_the_rate_is_not_constant_or_not_below_one(profile):
    assert _mask_verdicts(profile)[EXPONENTIAL] == "fail"


def test_the_exponential_check_fails_when_the_interval_over_seeds_reaches_one():
    # Half the seeds collapse at 0.8 per layer, half grow at 1.05: the mean rate 0.925 is steady, its interval not < 1.
    r = np.concatenate([np.tile(0.3 * 0.8 ** LAYERS, (5, 1)), np.tile(0.3 * 1.05 ** LAYERS, (5, 1))])
    assert _mask_verdicts(r)[EXPONENTIAL] == "fail"


@pytest.mark.parametrize("rate", [0.3, 0.6])
def test_the_lambda_2_check_fails_when_the_rate_is_not_the_maps_lambda_2(rate):
    verdicts = _mask_verdicts(rate ** LAYERS, slem=0.5)
    assert verdicts[LAMBDA2] == "fail" and verdicts[EXPONENTIAL] == "pass"
    assert _mask_verdicts(0.53 ** LAYERS, slem=0.5)[LAMBDA2] == "pass"  # within 10%


def test_causal_windows_split_the_resolved_layers_and_regress_each_half():
    from experiments.rank_collapse import summary as s

    r = np.stack([0.5 ** LAYERS, 0.25 ** LAYERS])
    r[:, 13:] = 1e-16  # unresolved from layer 13: the windows are layers 0-6 and 6-12
    slem = np.stack([np.full(16, 0.5), np.full(16, 0.25)])
    windows = s.window_rates(r, slem, np.ones((2, 16)))
    assert [w["layers"] for w in windows] == [[0, 6], [6, 12]]
    for w in windows:
        np.testing.assert_allclose(w["rate"]["mean"], 0.375)
        np.testing.assert_allclose(w["ratio"]["mean"], 1.0)
        assert w["rate"]["seeds"] == 2
    assert s.window_rates(r[:, :3], slem[:, :2], np.ones((2, 2)))[0]["layers"] == [0, 1]
    assert s.window_rates(r[:, :2], slem[:, :1], np.ones((2, 1))) == []


def test_the_causal_mask_check_fails_when_the_causal_profile_falls_faster():
    assert _mask_verdicts(0.001 ** LAYERS, slem=0.001)[SLOWER] == "fail"


def test_deep_attention_training_check_fails_above_twice_chance():
    from experiments.rank_collapse import checks

    def summary(accs):
        phases = [{"phase": "final", "step": 100, "metrics": {"eval_accuracy": accs, "chance_accuracy": [0.1] * 2}}]
        spec = {"sweep": "train", "kind": "softmax", "architecture": "attention_only", "depth": 8,
                "temperature": 1.0, "causal": True, "embedding_std": None}
        return {"runs": {"r": {"spec": spec, "phases": phases}}}

    assert checks.training_checks(summary([0.1, 0.15]))[0]["verdict"] == "pass"
    assert checks.training_checks(summary([0.5, 0.4]))[0]["verdict"] == "fail"
