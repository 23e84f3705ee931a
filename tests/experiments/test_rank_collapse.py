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
from experiments.lab.render import NUMBERING
from experiments.rank_collapse import STUDY
from experiments.rank_collapse import study as rank_collapse_study
from experiments.rank_collapse import summary as summary_lib
from tests.attnjax.nn.test_params import _models
from tests.experiments.lab.test_studies import finished, rank_collapse_test_config, run_as_command
from tests.paths import REPO, link_from, study_page

TRAIN_RUN = "train-softmax-skip_mlp-L04-t1-edefault"
INIT_RUN = "init-softmax-attention_only-L04-t1-e1.25"
MASK_RUN = "mask-softmax-attention_only-L04-t1-e1"


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
    # The eps-scaling identity of every layer (bidirectional), the uniform chain (causal).
    row = next(r for r in rows if r["run"] == INIT_RUN and r["metric"] == "identity/residual")
    assert np.asarray(row["values"]).shape == (3, 4, rank_collapse_test_config().measure_batch_size)
    row = next(r for r in rows if r["run"] == MASK_RUN and r["metric"] == "chain/residual_fro")
    assert len(row["values"]) == 5 and row["values"][0] > row["values"][-1] > 0
    assert not any(r["run"] == MASK_RUN and r["metric"] == "identity/residual" for r in rows)
    # The trained runs carry the recall counts of their held-out queries.
    final = _phases(run.summary, TRAIN_RUN)[("final", 4)]
    assert set(final["recall/queries"]) == {8 * 4}  # eval_batches x batch_size x num_queries
    report = (run.workdir / "report.md").read_text()
    assert (
        "## Predictions" in report
        and "## Not applicable" in report
        and "Dong et al. 2021" in report
    )


# Every row of the test config's run, by name (the part before " ("), with its kind and verdict as measured
# at width 16 with 2 heads (L = 4; 10 seeds in the init, mask, local, Noci and LayerNorm runs, 2 in training).
EXPECTED_VERDICTS = {
    "layer-0 logit variance = (std_e^2 + std_p^2)^2": ("sanity", "pass"),
    "Dong's local window is resolved": ("sanity", "pass"),
    "Dong's local exponent is 3": ("sanity", "pass"),
    "the eps-scaling identity holds at every layer": ("sanity", "pass"),
    "Dong's local window is in the leading order": ("sanity", "pass"),
    "residual <= Dong's bound c_l ||res(X_(l-1))||^3": ("not applicable", "not applicable"),
    # Pre-LN is not Noci et al.'s Figure 1 placement: hypotheses.
    "token alignment grows and rank collapse deepens with depth unless the branches are scaled by "
    "1/sqrt(L)": ("hypothesis", "pass"),
    "query/key gradients vanish with depth unless the branches are scaled by 1/sqrt(L)": (
        "hypothesis",
        "pass",
    ),
    "causal pure attention collapses exponentially": ("prediction", "pass"),
    "the causal collapse rate is the maps' |lambda_2|": ("hypothesis", "pass"),
    "a local mask of width 2 slows the collapse": ("prediction", "pass"),
    "LayerNorm does not stop exponential collapse": ("sanity", "pass"),
    "LayerNorm with constructed W_V keeps a full-rank equilibrium": ("sanity", "pass"),
    "LayerNorm after attention stops collapse at random initialisation": ("hypothesis", "fail"),
    # Four training steps: recall is not learnt; two seeds carry no verdict over an interval.
    "skip_mlp (softmax) learns recall at depth 4, 2 seeds": ("sanity", "fail"),
    "attention only (softmax) learns the context mode, not recall, at depth 4, 2 seeds": (
        "hypothesis",
        "not measured",
    ),
}


def test_every_check_is_measured_with_its_expected_verdict(run):
    got = {_short(p["name"]): (p["kind"], p["verdict"]) for p in run.summary["predictions"]}
    assert got == EXPECTED_VERDICTS
    names = {_short(p["name"]): p for p in run.summary["predictions"]}
    assert names["Dong's local window is resolved"]["measured"] >= 2
    assert "over 10 seeds" in names["Dong's local exponent is 3"]["note"]
    assert "10 seeds" in names["causal pure attention collapses exponentially"]["name"]
    assert (
        "float32"
        in names["LayerNorm after attention stops collapse at random initialisation"]["note"]
    )
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
        assert np.asarray(phase[f"layer_grad_norm/{name}"]).shape == (10, 4)
    assert np.all(np.asarray(phase["layer_grad_norm/query"]) > 0)
    assert "token_cosine" in phase
    assert not any(
        k.startswith("layer_grad_norm") for k in _phases(run.summary, INIT_RUN)[("init", 0)]
    )


def test_the_smallest_gradient_ratio_names_its_layer_from_0(run):
    """The Noci note's smallest per-layer ratio names the layer as the API counts it: the index of the
    smallest entry of its run's profile (layer 0 is the first), not that index + 1."""
    for placement in run.summary["gradients"]:
        smallest = placement["smallest"]
        record = next(r for r in placement[smallest["variant"]] if r["depth"] == smallest["depth"])
        profile = np.asarray(record["ratio_profile"])
        assert smallest["layer"] == int(np.argmin(profile))
        assert smallest["ratio"] == profile.min()


def test_report_has_the_regime_and_the_figures(run):
    report = (run.workdir / "report.md").read_text()
    for text in (
        "entropy / log S",
        "tau",
        "logit variance",
        "Dong's bound",
        "eps-scaling identity",
        "mode-of-context baseline",
        "Causal and local masks x LayerNorm",
        "path-length",
        "## Replications",
        "## Hypotheses",
        "## Sanity conditions",
    ):
        assert text in report, text
    assert {
        "init_residual.png",
        "dong_fit.png",
        "causal_layernorm.png",
        "local_masks.png",
        "noci_scaling.png",
        "path_length.png",
        "noci_gradients.png",
        "layernorm.png",
    } <= set(run.summary["plots"])


def _with_every_run_but_training(run, path):
    """A workdir holding the finished study's config and the records of every run but the training run:
    a re-run skips those runs and does only the training run."""
    shutil.copy(run.workdir / "config.json", path / "config.json")
    (path / "runs").mkdir()
    for record in (run.workdir / "runs").glob("*.json"):
        if record.stem != TRAIN_RUN:
            shutil.copy(record, path / "runs" / record.name)


def _run(path, progress=lambda line: None):
    return run_as_command(STUDY, rank_collapse_test_config(), path, progress=progress)


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
    assert NUMBERING in (results / "report.md").read_text()  # the one numbering, stated


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
