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
    names = {p["name"].split(" (")[0]: p for p in run.summary["predictions"]}
    assert names["attention at initialisation is not uniform"]["verdict"] == "pass"
    assert names["float64 profile resolved"]["measured"] >= 3
    check = names["doubly exponential decay"]
    assert check["verdict"] in ("pass", "fail") and "Dong's 3" in check["note"]
    phases = _phases(run.summary, TRAIN_RUN)
    assert {("init", 0), ("train", 2), ("train", 4), ("final", 4)} == set(phases)
    assert {"eval_accuracy", "diverged", "chance_accuracy", "path_residual"} <= set(phases[("final", 4)])


def test_gradient_check_compares_one_architecture_at_two_depths(run):
    check = next(p for p in run.summary["predictions"] if p["name"].startswith("query/key gradients"))
    assert check["verdict"] in ("pass", "fail") and "L=1" in check["note"] and "L=4" in check["note"]
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


def _with_finished_init_runs(run, path):
    """A workdir holding the finished study's config and init-sweep records: a
    re-run skips those runs and starts with the training run."""
    shutil.copy(run.workdir / "config.json", path / "config.json")
    (path / "runs").mkdir()
    for record in (run.workdir / "runs").glob("init-*.json"):
        shutil.copy(record, path / "runs" / record.name)


def _run(path, progress=lambda line: None):
    return study_lib.run(STUDY, rank_collapse_test_config(), str(path), progress=progress)


def test_killed_training_resumes_to_the_same_summary(run, tmp_path, monkeypatch):
    _with_finished_init_runs(run, tmp_path)
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

