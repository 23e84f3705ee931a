"""The rank-collapse study: what it measures and how its training runs resume (the contract: test_studies.py)."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attnjax import training
from attnjax.serialization import json_form
from configs import rank_collapse as config_lib
from experiments.lab import study as study_lib
from experiments.rank_collapse import STUDY
from experiments.rank_collapse import study as rank_collapse_study
from experiments.rank_collapse import summary as summary_lib
from tests.attnjax.nn.test_params import _models
from tests.experiments.lab.test_studies import finished, rank_collapse_test_config
from tests.paths import REPO, link_from, study_page

TRAIN_RUN = "train-softmax-skip_mlp-L04-t1-edefault"
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
    assert (
        len(row["values"]) == 5
        and row["depth"] == 4
        and row["phase"] == "init"
        and row["step"] == 0
    )
    row = next(r for r in rows if r["run"] == INIT_RUN and r["metric"] == "slem")
    assert len(row["values"]) == 4
    # Attention-only runs carry Dong et al.'s per-example residuals and bound, in float64.
    row = next(r for r in rows if r["run"] == INIT_RUN and r["metric"] == "dong/residual")
    assert (
        len(row["values"]) == rank_collapse_test_config().measure_batch_size
        and len(row["values"][0]) == 5
    )
    assert (
        min(min(v) for v in row["values"]) < 1e-9
    )  # below float32 resolution: measured in float64
    report = (run.workdir / "report.md").read_text()
    assert "Literature predictions" in report and "Dong et al. 2021" in report


# Every check of the test config's run, by name (the part before " ("), with its kind and verdict as measured
# at width 16 with 2 heads (L = 4, 10 seeds in the init, mask and LayerNorm runs, 2 in the Noci and training runs).
EXPECTED_VERDICTS = {
    "attention at initialisation is not uniform": ("sanity", "pass"),
    "layer-1 logit variance = (std_e^2 + std_p^2)^2": ("sanity", "pass"),
    "float64 profile resolved": ("sanity", "pass"),
    "Dong's cubic exponent": ("prediction", "pass"),
    "residual <= Dong's bound at every resolved layer": ("sanity", "pass"),
    # The scaled skips end at r_L 0.84 on average, one seed at 0.72: below 0.9.
    "skip scaled by 1/sqrt(L) keeps rank": ("prediction", "fail"),
    # Two seeds: both intervals over seeds span the threshold 0.5.
    "1/sqrt(L) residual scaling keeps query/key gradients": ("prediction", "fail"),
    "causal pure attention collapses exponentially": ("prediction", "pass"),
    # The causal residual falls 1.2-1.3x slower than its maps' |lambda_2|.
    "the causal collapse rate is the maps' |lambda_2|": ("prediction", "fail"),
    "the causal mask slows the collapse": ("prediction", "pass"),
    "LayerNorm does not stop exponential collapse": ("prediction", "pass"),
    "LayerNorm with constructed W_V keeps a full-rank equilibrium": ("prediction", "pass"),
    "LayerNorm after attention stops collapse at random initialisation": ("prediction", "pass"),
    # Four training steps: recall is not learnt, and two seeds leave the interval wider than 2 x chance.
    "skip_mlp (softmax) learns recall at depth 4, 2 seeds": ("prediction", "fail"),
    "attention only (softmax) stays near chance at depth 4, 2 seeds": ("prediction", "fail"),
}


def test_every_check_is_measured_with_its_expected_verdict(run):
    got = {_short(p["name"]): (p["kind"], p["verdict"]) for p in run.summary["predictions"]}
    assert got == EXPECTED_VERDICTS
    names = {_short(p["name"]): p for p in run.summary["predictions"]}
    assert names["float64 profile resolved"]["measured"] >= 4
    assert "over 10 seeds" in names["Dong's cubic exponent"]["note"]
    assert "10 seeds" in names["causal pure attention collapses exponentially"]["name"]
    phases = _phases(run.summary, TRAIN_RUN)
    assert {("init", 0), ("train", 2), ("train", 4), ("final", 4)} == set(phases)
    assert {"eval_accuracy", "diverged", "chance_accuracy", "path_residual"} <= set(
        phases[("final", 4)]
    )


def _short(name: str) -> str:
    """A check's name without its setting, the last " (...)" (training checks keep their whole name)."""
    return name if name.startswith(("skip_mlp", "attention only")) else name.rsplit(" (", 1)[0]


def test_noci_sweep_measures_per_layer_gradients_and_profiles(run):
    phase = _phases(run.summary, "noci-softmax-skip_mlp_scaled-L04-t1-e1")[("init", 0)]
    for name in ("query", "key", "value", "out"):
        assert np.asarray(phase[f"layer_grad_norm/{name}"]).shape == (2, 4)
    assert np.all(np.asarray(phase["layer_grad_norm/query"]) > 0)
    assert "token_cosine" in phase
    assert not any(
        k.startswith("layer_grad_norm") for k in _phases(run.summary, INIT_RUN)[("init", 0)]
    )


def test_report_has_the_regime_and_the_figures(run):
    report = (run.workdir / "report.md").read_text()
    for text in (
        "entropy / log S",
        "tau",
        "logit variance",
        "Dong's bound",
        "Causal mask x LayerNorm",
        "path-length",
    ):
        assert text in report, text
    assert {
        "init_residual.png",
        "dong_fit.png",
        "causal_layernorm.png",
        "path_length.png",
        "noci_gradients.png",
        "layernorm.png",
    } <= set(run.summary["plots"])


def test_training_check_needs_every_seed():
    from experiments.rank_collapse import checks

    def summary_with(accs):
        phases = [
            {"phase": "train", "step": 100, "metrics": {"accuracy": [0.2] * len(accs)}},
            {
                "phase": "final",
                "step": 100,
                "metrics": {"eval_accuracy": accs, "chance_accuracy": [0.1] * 2},
            },
        ]
        spec = {
            "sweep": "train",
            "kind": "softmax",
            "architecture": "skip_mlp",
            "depth": 4,
            "temperature": 1.0,
            "causal": True,
            "embedding_std": None,
        }
        return _summary(_trained_record(spec, phases, len(accs)))

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


def test_killed_training_resumes_to_the_same_summary(
    run, tmp_path, monkeypatch, figures_not_rendered
):
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
    assert messages[0].startswith(
        f"rank_collapse: {runs} runs ({runs - 1} already done)"
    )  # only the killed run
    assert not (tmp_path / "checkpoints" / TRAIN_RUN).exists()


def test_a_summary_written_before_derive_is_completed_to_the_runners(run):
    """`add_derived` of a summary.json written before `derive` existed (the raw aggregate of the rows, with
    the runner's config, predictions and plots) gives the summary the runner writes now."""
    rows = [json.loads(line) for line in (run.workdir / "metrics.jsonl").read_text().splitlines()]
    runner = {k: run.summary[k] for k in ("config", "predictions", "plots")}
    old = json_form({**summary_lib.aggregate(rows), **runner})
    assert "dong" not in old and "bands" not in old
    assert summary_lib.add_derived(old) == run.summary
    assert summary_lib.add_derived(run.summary) == run.summary


def test_config_variants():
    assert config_lib.get_config().init_sweep.causal is False
    assert config_lib.get_config("smoke").train_sweep.causal is True


def test_readme_results_are_the_committed_summary_rendered():
    """The templates render the committed summary byte for byte into the committed report and the results
    section that ends the study's documentation page (its links relative to the page); its predictions are the
    checks of that summary."""

    from experiments.rank_collapse import checks, report

    repo = REPO
    results = repo / report.README_RESULTS
    summary = json.loads((results / "summary.json").read_text())
    timing = json.loads((results / "timing.json").read_text())
    page = study_page("rank_collapse")
    text = page.read_text()
    section = text[text.index("## Results\n") :]  # to the end of the page
    links = link_from(page, report.README_RESULTS)
    assert section == report.readme_section(summary, timing, results=links) + "\n"
    # The committed report, predictions and plots are those of the committed summary.
    assert (results / "report.md").read_text() == report.markdown(summary)
    assert json_form(checks.predictions(summary)) == summary["predictions"]
    assert sorted(p.name for p in (results / "plots").iterdir()) == summary["plots"]


def test_dong_metrics_read_fused_and_separate_qkv_alike():
    """Dong et al.'s constant reads W_Q, W_K, W_V, W_O through `nn.params`: a fused W_qkv gives the same numbers."""
    separate, fused = _models(num_kv_heads=4)
    hidden = jax.random.normal(jax.random.key(0), (3, 2, 5, 16), jnp.float64)  # [L + 1, B, T, D]
    got = {
        name: rank_collapse_study._dong_metrics(nnx.state(model, nnx.Param), hidden, 4, 1.0)
        for name, model in (("separate", separate), ("fused", fused))
    }
    assert np.all(np.asarray(got["separate"]["dong/constant"]) > 0)
    for metric, value in got["separate"].items():
        np.testing.assert_allclose(got["fused"][metric], value, rtol=1e-12, err_msg=metric)


# --------------------------------------------------------------------------
# Controls: synthetic inputs on which each check must say fail (and pass where the paper's claim holds)


def _noisy(profile, seeds=10, examples=4, noise=0.05, seed=0):
    """`[L + 1]` -> `[seeds, examples, L + 1]` with log-normal noise on every point."""
    rng = np.random.default_rng(seed)
    return np.asarray(profile)[None, None] * np.exp(
        noise * rng.standard_normal((seeds, examples, len(profile)))
    )


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


@pytest.mark.parametrize(
    "profile",
    [
        0.05 ** np.arange(6.0),
        np.exp(-1.0 * np.arange(6.0) ** 2),
        np.exp(-1.6 * np.arange(6.0) ** 1.8),
    ],
    ids=["geometric", "l^2", "l^1.8"],
)
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
    np.testing.assert_allclose(
        [got["low"], got["high"]], [slopes.mean() - half, slopes.mean() + half]
    )
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
    looseness = s.bound_looseness(bound, res_abs, rel)
    rows = looseness["rows"]
    assert [row["layer"] for row in rows] == [1, 2]
    np.testing.assert_allclose([row["max"] for row in rows], [2e-3 / 1.0, 2e-9 / 4e-3])
    assert looseness["worst"] == max(row["max"] for row in rows)
    assert checks.bound_check(looseness, "synthetic")["verdict"] == "pass"
    assert (
        checks.bound_check(s.bound_looseness(bound * 1e-4, res_abs, rel), "synthetic")["verdict"]
        == "fail"
    )
    unresolved = s.bound_looseness(bound, res_abs, np.full_like(rel, 1e-15))
    assert unresolved["rows"] == [] and unresolved["worst"] is None
    assert checks.bound_check(unresolved, "synthetic")["verdict"] == "not measured"


HIDDEN_METRICS = (
    "residual_fro",
    "residual_l1inf",
    "residual_abs_fro",
    "mean_token_norm",
    "token_cosine",
)
ATTENTION_METRICS = ("attention_entropy_normalized", "dobrushin", "logit_variance", "slem")


def _measured(metrics, depth, seeds, dong=False, examples=2):
    """`metrics` with the other init-phase metrics of a measured run filled in, as the study records them:
    hidden-state profiles `[seeds, L + 1]` halving per layer, attention statistics `[seeds, L]` at 0.5, and,
    with `dong`, Dong et al.'s per-example metrics of an attention-only network (`summary.derive` reads
    every one; a check under test reads only those given)."""
    r = np.tile(0.5 ** np.arange(depth + 1.0), (seeds, 1))
    per_example = np.tile(r[:, None], (1, examples, 1))  # [seeds, examples, L + 1]
    filled = {m: r.tolist() for m in HIDDEN_METRICS}
    filled.update({m: np.full((seeds, depth), 0.5).tolist() for m in ATTENTION_METRICS})
    if dong:
        filled.update(
            {
                "dong/residual": per_example.tolist(),
                "dong/residual_abs": per_example.tolist(),
                "dong/bound": (10 * per_example[..., 1:]).tolist(),
                "dong/constant": np.ones((seeds, depth)).tolist(),
            }
        )
    return {**filled, **metrics}


def _run_record(sweep, architecture, depth, metrics, causal=False, std=1.0):
    spec = {
        "sweep": sweep,
        "kind": "softmax",
        "architecture": architecture,
        "depth": depth,
        "temperature": 1.0,
        "causal": causal,
        "embedding_std": std,
    }
    if sweep != "layernorm":  # Wu et al.'s constructions record only their own metrics
        seeds = len(next(iter(metrics.values())))
        metrics = _measured(metrics, depth, seeds, dong=architecture == "attention_only")
    return {"spec": spec, "phases": [{"phase": "init", "step": 0, "metrics": metrics}]}


def _trained_record(spec, phases, seeds):
    """A train-sweep run of `spec` whose logged and final `phases` follow its initial profile (`_measured`)."""
    init = {"phase": "init", "step": 0, "metrics": _measured({}, spec["depth"], seeds)}
    return {"spec": spec, "phases": [init, *phases]}


def _summary(*records):
    """The summary of the runs `records` with its sections (`summary.derive`), in its JSON form: what the
    runner hands the checks."""
    config = rank_collapse_test_config()
    raw = {"runs": {f"r{i}": r for i, r in enumerate(records)}}
    return json_form({"config": config.to_dict(), **summary_lib.derive(raw, config)})


def test_noci_check_fails_when_the_scaled_skips_lose_rank():
    from experiments.rank_collapse import checks

    def summary(scaled_last):
        def profile(last):
            return {"residual_fro": [[0.99, last]] * 2}

        return _summary(
            _run_record("init", "skip_scaled", 4, profile(scaled_last)),
            _run_record("init", "skip", 4, profile(0.5)),
        )

    assert checks.noci_check(summary(0.95))["verdict"] == "pass"
    assert checks.noci_check(summary(0.4))["verdict"] == "fail"


def _noci_record(architecture, depth, qk_over_v, seeds=5, noise=0.05, seed=0):
    """A Noci-sweep run whose per-layer ||grad W_Q|| = ||grad W_K|| = qk_over_v ||grad W_V|| / sqrt(2) (times noise)."""
    rng = np.random.default_rng(seed)
    value = np.ones((seeds, depth))
    qk = qk_over_v * value * np.exp(noise * rng.standard_normal((seeds, depth))) / np.sqrt(2)
    metrics = {
        "layer_grad_norm/query": qk.tolist(),
        "layer_grad_norm/key": qk.tolist(),
        "layer_grad_norm/value": value.tolist(),
        "token_cosine": np.full((seeds, depth + 1), 0.5).tolist(),
    }
    return _run_record("noci", architecture, depth, metrics)


def _remedy_verdicts(unscaled_deep, scaled_deep, **kw):
    from experiments.rank_collapse import checks

    records = [
        _noci_record(arch, depth, ratio, **kw)
        for arch, ratios in (
            ("skip_mlp", (1.0, unscaled_deep)),
            ("skip_mlp_scaled", (1.0, scaled_deep)),
        )
        for depth, ratio in zip((4, 32), ratios)
    ]
    return [c["verdict"] for c in checks.gradient_checks(_summary(*records))]


def test_remedy_check_passes_when_only_the_unscaled_gradients_vanish():
    assert _remedy_verdicts(unscaled_deep=0.05, scaled_deep=0.9) == [
        "pass"
    ]  # pre-LN only: one check


@pytest.mark.parametrize(
    "unscaled_deep,scaled_deep",
    [(0.9, 0.9), (0.05, 0.05), (0.9, 0.05), (0.6, 1.0)],
    ids=["neither-vanishes", "both-vanish", "reversed", "unscaled-keeps-60%"],
)
def test_remedy_check_fails_unless_the_scaling_is_what_keeps_the_gradients(
    unscaled_deep, scaled_deep
):
    assert _remedy_verdicts(unscaled_deep, scaled_deep) == ["fail"]


def test_remedy_check_fails_when_the_interval_over_seeds_crosses_the_threshold():
    # The scaled network keeps 0.6 of its ratio on average, but seed noise (factor e^0.5) spans 0.5.
    assert _remedy_verdicts(unscaled_deep=0.05, scaled_deep=0.6, noise=0.5) == ["fail"]


def test_gradient_ratio_is_the_geometric_mean_over_layers():
    from experiments.rank_collapse import summary as s

    run = _noci_record("skip_mlp", 3, 1.0, seeds=1, noise=0.0)
    run["phases"][0]["metrics"]["layer_grad_norm/query"] = [[3.0, 0.3, 0.03]]  # key: 1/sqrt(2) each
    ratio = np.sqrt(np.array([3.0, 0.3, 0.03]) ** 2 + 0.5)
    np.testing.assert_allclose(s.qk_value_ratio(run), [ratio])
    np.testing.assert_allclose(s.gradient_ratio(run), [np.prod(ratio) ** (1 / 3)])


def _causal_summary(causal_profile, slem=0.5, seeds=10, noise=0.02):
    """A causal attention-only run with relative residuals `causal_profile` (`[L + 1]`, or `[seeds, L + 1]`; times
    noise) and maps of |lambda_2| `slem`, beside a bidirectional twin falling 100x per layer."""
    rng = np.random.default_rng(0)
    r = np.asarray(causal_profile, np.float64)
    r = np.broadcast_to(r, (seeds, r.shape[-1]))
    depth = r.shape[-1] - 1
    causal = {
        "residual_fro": (r * np.exp(noise * rng.standard_normal(r.shape))).tolist(),
        "slem": np.full((seeds, depth), slem).tolist(),
        "dobrushin": np.full((seeds, depth), 0.9).tolist(),
        "attention_entropy_normalized": np.full((seeds, depth), 0.99).tolist(),
    }
    bidir = {"residual_fro": [list(0.01 ** np.arange(depth + 1.0))] * 2}
    return _summary(
        _run_record("mask", "attention_only", depth, causal, causal=True),
        _run_record("init", "attention_only", depth, bidir),
    )


def _mask_verdicts(causal_profile, **kw):
    from experiments.rank_collapse import checks

    return {
        c["name"].split(" (")[0]: c["verdict"]
        for c in checks.mask_checks(_causal_summary(causal_profile, **kw))
    }


EXPONENTIAL = "causal pure attention collapses exponentially"
LAMBDA2 = "the causal collapse rate is the maps' |lambda_2|"
SLOWER = "the causal mask slows the collapse"
LAYERS = np.arange(17.0)


def test_causal_checks_pass_on_a_geometric_profile_at_the_maps_lambda_2():
    assert _mask_verdicts(0.5**LAYERS) == {EXPONENTIAL: "pass", LAMBDA2: "pass", SLOWER: "pass"}


@pytest.mark.parametrize(
    "profile",
    [
        np.full(17, 0.8),  # no collapse
        np.exp(-0.05 * 3.0 ** (LAYERS / 4)),  # doubly exponential: the rate falls with depth
        np.exp(-0.02 * LAYERS**2),  # super-geometric
        (1 + LAYERS) ** -3.0,  # a power law: the rate rises toward 1
    ],
    ids=["flat", "doubly-exponential", "gaussian", "power-law"],
)
def test_the_exponential_check_fails_where_the_rate_is_not_constant_or_not_below_one(profile):
    assert _mask_verdicts(profile)[EXPONENTIAL] == "fail"


def test_the_exponential_check_fails_when_the_interval_over_seeds_reaches_one():
    # Half the seeds collapse at 0.8 per layer, half grow at 1.05: the mean rate 0.925 is steady, its interval not < 1.
    r = np.concatenate([np.tile(0.3 * 0.8**LAYERS, (5, 1)), np.tile(0.3 * 1.05**LAYERS, (5, 1))])
    assert _mask_verdicts(r)[EXPONENTIAL] == "fail"


@pytest.mark.parametrize("rate", [0.3, 0.6])
def test_the_lambda_2_check_fails_when_the_rate_is_not_the_maps_lambda_2(rate):
    verdicts = _mask_verdicts(rate**LAYERS, slem=0.5)
    assert verdicts[LAMBDA2] == "fail" and verdicts[EXPONENTIAL] == "pass"
    assert _mask_verdicts(0.53**LAYERS, slem=0.5)[LAMBDA2] == "pass"  # within 10%


def test_causal_windows_split_the_resolved_layers_and_regress_each_half():
    from experiments.rank_collapse import summary as s

    r = np.stack([0.5**LAYERS, 0.25**LAYERS])
    r[:, 13:] = 1e-16  # unresolved from layer 13: the windows are layers 0-6 and 6-12
    slem = np.stack([np.full(16, 0.5), np.full(16, 0.25)])
    windows = s.window_rates(r, slem, np.ones((2, 16)))
    assert [w["layers"] for w in windows] == [[0, 6], [6, 12]]
    for w in windows:
        np.testing.assert_allclose(w["rate"]["mean"], 0.375)
        np.testing.assert_allclose(w["ratio"]["mean"], 1.0)
        assert w["rate"]["n"] == 2
    assert s.window_rates(r[:, :3], slem[:, :2], np.ones((2, 2)))[0]["layers"] == [0, 1]
    assert s.window_rates(r[:, :2], slem[:, :1], np.ones((2, 1))) == []


def test_the_causal_mask_check_fails_when_the_causal_profile_falls_faster():
    assert _mask_verdicts(0.001**LAYERS, slem=0.001)[SLOWER] == "fail"


def test_attention_only_training_check_fails_above_twice_chance():
    from experiments.rank_collapse import checks

    def summary(accs):
        phases = [
            {
                "phase": "final",
                "step": 100,
                "metrics": {"eval_accuracy": accs, "chance_accuracy": [0.1] * 2},
            }
        ]
        spec = {
            "sweep": "train",
            "kind": "softmax",
            "architecture": "attention_only",
            "depth": 8,
            "temperature": 1.0,
            "causal": True,
            "embedding_std": None,
        }
        return _summary(_trained_record(spec, phases, len(accs)))

    assert checks.training_checks(summary([0.1, 0.15, 0.12, 0.1, 0.13]))[0]["verdict"] == "pass"
    assert checks.training_checks(summary([0.5, 0.4, 0.45, 0.5, 0.4]))[0]["verdict"] == "fail"
    # Four seeds at chance and one at 0.6: the mean 0.2 is at 2 x chance, the interval's upper end above it.
    assert checks.training_checks(summary([0.1, 0.1, 0.1, 0.1, 0.6]))[0]["verdict"] == "fail"


# --------------------------------------------------------------------------
# Wu et al.'s LayerNorm checks on synthetic summaries


def _layernorm_summary(orthogonal=None, full_rank=None, postln_last=None, seeds=10):
    """Wu et al.'s LayerNorm runs: `orthogonal` a consensus profile `[L + 1]`; `full_rank` (with LN, without LN,
    rank) at the last layer; `postln_last` r_L per seed of the post-LN attention-only run."""
    records = []
    if orthogonal is not None:
        records.append(
            _run_record(
                "layernorm",
                "orthogonal",
                len(orthogonal) - 1,
                {
                    "consensus_ln": np.tile(orthogonal, (seeds, 1)).tolist(),
                    "consensus_plain": np.tile(orthogonal, (seeds, 1)).tolist(),
                    "rank_ln": [1] * seeds,
                },
                causal=True,
                std=None,
            )
        )
    if full_rank is not None:
        with_ln, plain, rank = full_rank
        records.append(
            _run_record(
                "layernorm",
                "full_rank",
                48,
                {
                    "consensus_ln": [[0.9] + [with_ln] * 48] * seeds,
                    "consensus_plain": [[0.9] + [plain] * 48] * seeds,
                    "rank_ln": [rank] * seeds,
                },
                causal=True,
                std=None,
            )
        )
    if postln_last is not None:
        records.append(
            _run_record(
                "mask",
                "attention_only_postln",
                4,
                {"residual_fro": [[0.9, 0.5, 0.4, 0.3, v] for v in postln_last]},
                causal=True,
            )
        )
    return _summary(*records)


def _layernorm_verdicts(**kw):
    from experiments.rank_collapse import checks

    return [c["verdict"] for c in checks.layernorm_checks(_layernorm_summary(**kw))]


def test_layernorm_exponential_check_passes_on_a_geometric_profile_and_fails_on_a_flat_one():
    assert _layernorm_verdicts(orthogonal=0.5 ** np.arange(41.0)) == ["pass"]
    assert _layernorm_verdicts(orthogonal=np.full(41, 0.3)) == ["fail"]
    assert _layernorm_verdicts(orthogonal=np.exp(-0.01 * np.arange(41.0) ** 2)) == ["fail"]


@pytest.mark.parametrize(
    "with_ln,plain,rank,verdict",
    [
        (0.96, 1e-12, 2, "pass"),
        (1e-9, 1e-12, 2, "fail"),
        (0.96, 0.5, 2, "fail"),
        (1.0, 1e-12, 1, "fail"),
    ],
    ids=["ln-keeps", "ln-collapses-too", "plain-keeps-too", "rank-one"],
)
def test_layernorm_construction_check_needs_ln_to_be_what_keeps_a_full_rank_equilibrium(
    with_ln, plain, rank, verdict
):
    assert _layernorm_verdicts(full_rank=(with_ln, plain, rank)) == [verdict]


def test_layernorm_random_init_check_fails_when_any_seed_collapses():
    assert _layernorm_verdicts(postln_last=[0.2] * 10) == ["pass"]
    assert _layernorm_verdicts(postln_last=[0.2] * 9 + [1e-8]) == ["fail"]


def test_layernorm_dynamics_match_a_numpy_loop():
    """`layernorm.trajectory` against the equations in float64 NumPy, with and without LN."""
    from experiments.rank_collapse import layernorm

    with jax.enable_x64(True):
        x0, w_qk, w_v = layernorm.weights("orthogonal", jax.random.key(3), 5, 4, 6)
        got = {
            normalize: np.asarray(layernorm.trajectory(x0, w_qk, w_v, normalize))
            for normalize in (True, False)
        }
    for normalize, traj in got.items():
        x = np.asarray(x0)
        np.testing.assert_allclose(traj[0], x)
        for layer in range(6):
            logits = x @ np.asarray(w_qk[layer]) @ x.T / 2.0  # sqrt(d) = 2
            logits = np.where(np.tril(np.ones((5, 5), bool)), logits, -np.inf)
            a = np.exp(logits - logits.max(1, keepdims=True))
            y = (a / a.sum(1, keepdims=True)) @ x @ np.asarray(w_v[layer])
            x = y / np.linalg.norm(y, axis=1, keepdims=True) if normalize else y
            np.testing.assert_allclose(traj[layer + 1], x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        np.asarray(w_v[0]) @ np.asarray(w_v[0]).T, np.eye(4), atol=1e-12
    )  # orthogonal
    assert np.all(np.asarray(x0) > 0)  # one open hemisphere


def test_full_rank_construction_settles_at_the_off_axis_equilibrium():
    """Token 1 converges to (0, 1); token 2 to B = (+-0.558, -0.830), where LN(a_21 x_1 + a_22 B) W_V = B with the
    causal softmax weights of W_QK = diag(4, 0) (checked here from the equations); without LN the tokens meet."""
    from experiments.rank_collapse import layernorm

    with jax.enable_x64(True):
        x0, w_qk, w_v = layernorm.weights("full_rank", jax.random.key(1), 2, 2, 64)
        last = np.asarray(layernorm.trajectory(x0, w_qk, w_v, True)[-1])
        plain = np.asarray(layernorm.trajectory(x0, w_qk, w_v, False)[-1])
    np.testing.assert_allclose(last[0], [0, 1], atol=1e-12)
    b = last[1]
    assert b[1] < -0.5 and abs(b[0]) > 0.5  # off the axis of token 1: rank 2
    logits = np.array([0.0, 4 * b[0] ** 2 / np.sqrt(2)])  # x_2 W_QK x_j^T / sqrt(2), j = 1, 2
    a = np.exp(logits - logits.max()) / np.sum(np.exp(logits - logits.max()))
    y = (a[0] * last[0] + a[1] * b) @ np.diag([0.5, 1.0])
    np.testing.assert_allclose(y / np.linalg.norm(y), b, atol=1e-12)
    np.testing.assert_allclose(
        plain[1] / np.linalg.norm(plain[1]), plain[0] / np.linalg.norm(plain[0]), atol=1e-9
    )


# --------------------------------------------------------------------------
# Sanity conditions on synthetic summaries (the Dong run of the test config: attention only, embedding std 1)


def _regime_verdicts(entropy, tau, logit_variance):
    from experiments.rank_collapse import checks

    def layers(v):
        return [[v] * 4] * 2

    metrics = {
        "attention_entropy_normalized": layers(entropy),
        "dobrushin": layers(tau),
        "logit_variance": layers(logit_variance),
    }
    record = _run_record("init", "attention_only", 4, metrics)
    return [c["verdict"] for c in checks.regime_checks(_summary(record))]


def test_regime_checks_fail_on_uniform_attention_and_on_a_logit_variance_off_the_prediction():
    # Predicted logit variance at embedding std 1: (1 + 0.02^2)^2.
    assert _regime_verdicts(0.5, 0.9, 1.0) == ["pass", "pass"]
    assert _regime_verdicts(0.99, 0.9, 1.0) == ["fail", "pass"]
    assert _regime_verdicts(0.5, 0.1, 1.0) == ["fail", "pass"]
    assert _regime_verdicts(0.5, 0.9, 3.0) == ["pass", "fail"]
    assert _regime_verdicts(0.5, 0.9, 0.3) == ["pass", "fail"]


def _dong_verdicts(r):
    """The Dong checks of an attention-only run whose per-example residuals are `r` `[S, B, L + 1]` (absolute =
    relative) and whose bound is 10x the measured residual."""
    from experiments.rank_collapse import checks

    depth = r.shape[-1] - 1
    metrics = {
        "dong/residual": r.tolist(),
        "dong/residual_abs": r.tolist(),
        "dong/bound": (10 * r[..., 1:]).tolist(),
        "dong/constant": np.ones((r.shape[0], depth)).tolist(),
    }
    return {
        c["name"].rsplit(" (", 1)[0]: c["verdict"]
        for c in checks.dong_checks(_summary(_run_record("init", "attention_only", depth, metrics)))
    }


def test_dong_resolved_condition_fails_with_three_resolved_layers():
    resolved = _dong_verdicts(_cubic(0.5, 0.9, 4))
    assert (
        resolved["float64 profile resolved"] == "pass"
        and resolved["Dong's cubic exponent"] == "pass"
    )
    short = _dong_verdicts(_cubic(1.0, 0.05, 4))  # layer 3 below 1e-13
    assert short["float64 profile resolved"] == "fail" and short["Dong's cubic exponent"] == "fail"
    assert resolved["residual <= Dong's bound at every resolved layer"] == "pass"


def test_one_seed_gives_nan_interval_ends_that_the_checks_and_the_report_read_back():
    """With one seed an interval over seeds has NaN ends, which summary.json stores as 'nan': the checks read
    them back as floats (a verdict that needs an interval's end fails), and the report renders them."""
    from experiments.rank_collapse import checks, report

    summary = _causal_summary(0.5**LAYERS, seeds=1)
    window = summary["mask"][0]["collapse"]["windows"][0]
    assert window["rate"]["n"] == 1 and window["rate"]["low"] == "nan"
    verdicts = {c["name"].split(" (")[0]: c["verdict"] for c in checks.mask_checks(summary)}
    assert verdicts == {EXPONENTIAL: "fail", LAMBDA2: "pass", SLOWER: "fail"}
    summary.update(predictions=json_form(checks.predictions(summary)), plots=[])
    text = report.markdown(summary)
    assert "| attention_only | 16 | 0-" in text and "[nan, nan]" in text
