"""The rank-collapse study: what it measures and how its training runs resume (the contract: test_studies.py)."""
import json
import shutil

import pytest

from attnjax import study as study_lib
from attnjax import training, workdir
from configs import rank_collapse as config_lib
from experiments.rank_collapse import STUDY
from tests.test_studies import finished, rank_collapse_test_config

TRAIN_RUN = "train-softmax-skip_mlp-L01-t1"


@pytest.fixture(scope="module")
def run():
    return finished("rank_collapse")


def _phases(summary, run_id):
    return {(p["phase"], p["step"]): p["metrics"] for p in summary["runs"][run_id]["phases"]}


def test_rows_hold_per_layer_profiles(run):
    rows = [json.loads(line) for line in open(run.workdir / "metrics.jsonl")]
    # Per-layer profiles have L + 1 hidden-state values and L attention values.
    row = next(r for r in rows if r["run"] == "init-softmax-attention_only-L04-t1" and r["metric"] == "residual_fro")
    assert len(row["values"]) == 5 and row["depth"] == 4 and row["phase"] == "init" and row["step"] == 0
    row = next(r for r in rows if r["run"] == "init-softmax-attention_only-L04-t1" and r["metric"] == "slem")
    assert len(row["values"]) == 4
    report = (run.workdir / "report.md").read_text()
    assert "Literature predictions" in report and "Dong et al. 2021" in report


def test_pure_attention_collapses_at_initialisation(run):
    check = next(p for p in run.summary["predictions"] if p["name"].startswith("residual falls 1000x"))
    assert check["verdict"] == "pass" and check["measured"] <= 1e-3
    phases = _phases(run.summary, TRAIN_RUN)
    assert {("init", 0), ("train", 2), ("train", 4), ("final", 4)} == set(phases)
    assert {"eval_accuracy", "diverged", "chance_accuracy"} <= set(phases[("final", 4)])


def test_gradient_check_uses_step_zero_of_training_runs(run):
    check = next(p for p in run.summary["predictions"] if p["name"].startswith("query/key gradients"))
    assert check["verdict"] == "not measured"  # the test config trains no attention_only run to compare with
    assert "grad_norm/query" in _phases(run.summary, TRAIN_RUN)[("init", 0)]
    assert "grad_norm/query" not in _phases(run.summary, "init-softmax-attention_only-L04-t1")[("init", 0)]


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
    real_save = workdir.PartialRun.save

    def save_then_die(self, step):
        real_save(self, step)
        if step == 2:
            raise KeyboardInterrupt("simulated kill after the first checkpoint")

    monkeypatch.setattr(workdir.PartialRun, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    assert (tmp_path / "checkpoints" / TRAIN_RUN).exists()
    monkeypatch.setattr(workdir.PartialRun, "save", real_save)
    messages = []
    assert _run(tmp_path, messages.append) == run.summary
    assert any("resumed from step 2" in m for m in messages)
    assert not (tmp_path / "checkpoints" / TRAIN_RUN).exists()


def test_kill_between_checkpoint_and_progress_restarts_the_run_cleanly(run, tmp_path, monkeypatch):
    _with_finished_init_runs(run, tmp_path)
    real_save = training.Checkpointer.save

    def save_then_die(self, step, state):
        real_save(self, step, state)
        if step == 2:
            raise KeyboardInterrupt("simulated kill between the two saves")

    monkeypatch.setattr(training.Checkpointer, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    monkeypatch.setattr(training.Checkpointer, "save", real_save)
    assert _run(tmp_path) == run.summary


def test_config_variants():
    assert config_lib.get_config().init_sweep.causal is False
    assert config_lib.get_config("smoke").train_sweep.causal is True
