import json
import os
import shutil

import pytest

from attnjax import training
from configs import rank_collapse as config_lib
from experiments import cli
from experiments import rank_collapse as study


def tiny_config():
    config = config_lib.get_config("smoke")
    config.num_seeds = 2
    config.model.features = 16
    config.model.num_heads = 2
    config.model.num_features = 16
    config.init_sweep.depths = (1, 4)
    config.init_sweep.architectures = ("attention_only", "skip_scaled")
    config.init_sweep.attention_kinds = ("softmax",)
    config.train_sweep.depths = (1,)
    config.train_sweep.architectures = ("skip_mlp",)
    config.train.update(steps=4, warmup_steps=1, log_every=2, batch_size=8)
    return config


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("rc")
    summary = study.run(tiny_config(), str(workdir), progress=lambda message: None)
    return workdir, summary


def test_outputs_and_report(finished):
    workdir, summary = finished
    for name in ("config.json", "metrics.jsonl", "summary.json", "report.md"):
        assert (workdir / name).exists(), name
    assert len(list((workdir / "plots").glob("*.png"))) >= 3
    assert json.loads((workdir / "summary.json").read_text())["predictions"] == json.loads(
        json.dumps(summary["predictions"]))
    report = (workdir / "report.md").read_text()
    assert "Literature predictions" in report and "Dong et al. 2021" in report
    rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
    runs = {r["run"] for r in rows}
    assert runs == {s.run_id for s in study.run_specs(tiny_config())}
    # Per-layer profiles have L + 1 hidden-state values and L attention values.
    row = next(r for r in rows if r["run"] == "init-softmax-attention_only-L04-t1" and r["metric"] == "residual_fro")
    assert len(row["values"]) == 5
    row = next(r for r in rows if r["run"] == "init-softmax-attention_only-L04-t1" and r["metric"] == "slem")
    assert len(row["values"]) == 4
    assert not (workdir / "checkpoints" / "train-softmax-skip_mlp-L01-t1").exists()


def test_pure_attention_collapses_at_initialisation(finished):
    _, summary = finished
    check = next(p for p in summary["predictions"] if p["name"].startswith("residual falls 1000x"))
    assert check["passed"] is True and check["measured"] <= 1e-3
    trained = summary["runs"]["train-softmax-skip_mlp-L01-t1"]
    assert {"init@0", "train@2", "train@4"} <= set(trained["profiles"])
    assert "final@4" in trained["scalars"]


def test_rerun_skips_finished_runs(finished, monkeypatch):
    workdir, summary = finished
    monkeypatch.setattr(study, "measure_run", lambda *a, **k: pytest.fail("finished run redone"))
    monkeypatch.setattr(study, "train_run", lambda *a, **k: pytest.fail("finished run redone"))
    assert study.run(tiny_config(), str(workdir), progress=lambda m: None) == summary


def _with_finished_init_runs(finished, workdir):
    """A workdir holding the finished study's config and init-sweep records: a
    re-run skips those runs and starts with the training run."""
    done, _ = finished
    shutil.copy(done / "config.json", workdir / "config.json")
    (workdir / "runs").mkdir()
    for record in (done / "runs").glob("init-*.json"):
        shutil.copy(record, workdir / "runs" / record.name)


def test_killed_training_resumes_to_the_same_summary(finished, tmp_path, monkeypatch):
    _, uninterrupted = finished
    _with_finished_init_runs(finished, tmp_path)
    real_save = study._Progress.save

    def save_then_die(self, step):
        real_save(self, step)
        if step == 2:
            raise KeyboardInterrupt("simulated kill after the first checkpoint")

    monkeypatch.setattr(study._Progress, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        study.run(tiny_config(), str(tmp_path), progress=lambda m: None)
    assert (tmp_path / "checkpoints" / "train-softmax-skip_mlp-L01-t1").exists()
    monkeypatch.setattr(study._Progress, "save", real_save)
    messages = []
    resumed = study.run(tiny_config(), str(tmp_path), progress=messages.append)
    assert any("resumed from step 2" in m for m in messages)
    assert resumed == uninterrupted


def test_kill_between_checkpoint_and_progress_restarts_the_run_cleanly(finished, tmp_path, monkeypatch):
    _, uninterrupted = finished
    _with_finished_init_runs(finished, tmp_path)
    real_save = training.Checkpointer.save

    def save_then_die(self, step, state):
        real_save(self, step, state)
        if step == 2:
            raise KeyboardInterrupt("simulated kill between the two saves")

    monkeypatch.setattr(training.Checkpointer, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        study.run(tiny_config(), str(tmp_path), progress=lambda m: None)
    monkeypatch.setattr(training.Checkpointer, "save", real_save)
    assert study.run(tiny_config(), str(tmp_path), progress=lambda m: None) == uninterrupted


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: setattr(c.init_sweep, "depths", (0, 2)), r"init_sweep.depths must be positive ints"),
        (lambda c: setattr(c.model, "features", 17), r"features \(17\) must be divisible by num_heads \(2\)"),
        (lambda c: setattr(c.train_sweep, "temperatures", (-1.0,)), r"train_sweep.temperatures must be > 0"),
        (lambda c: setattr(c.init_sweep, "architectures", ("attention",)), r"unknown 'attention'; valid"),
        (lambda c: setattr(c, "num_seeds", 0), r"num_seeds must be >= 1"),
        (lambda c: setattr(c.train, "warmup_steps", 4), r"warmup_steps < total_steps"),
    ],
)
def test_bad_configs_fail_before_any_compilation(edit, message, tmp_path, monkeypatch):
    monkeypatch.setattr(study, "measure_run", lambda *a, **k: pytest.fail("compiled before validating"))
    config = tiny_config()
    edit(config)
    with pytest.raises(ValueError, match=message):
        study.run(config, str(tmp_path), progress=lambda m: None)
    assert not os.path.exists(tmp_path / "config.json")


def test_unknown_override_key_lists_valid_keys(capsys):
    parse = cli.flags_parser(config_lib.get_config)
    with pytest.raises(SystemExit):
        parse(["rank_collapse", "--config", "configs/rank_collapse.py", "--config.train.stepz=3"])
    err = capsys.readouterr().err
    assert "unknown config key 'train.stepz'" in err and "'train.steps'" in err


def test_gradient_check_uses_step_zero_of_training_runs(finished):
    _, summary = finished
    check = next(p for p in summary["predictions"] if p["name"].startswith("query/key gradients"))
    assert check["passed"] is None  # the tiny config trains no attention_only run to compare with
    runs = summary["runs"]
    assert "grad_norm/query" in runs["train-softmax-skip_mlp-L01-t1"]["scalars"]["init@0"]
    assert "grad_norm/query" not in runs["init-softmax-attention_only-L04-t1"]["scalars"].get("init@0", {})


def test_config_variants():
    assert config_lib.get_config().init_sweep.causal is False
    assert config_lib.get_config("smoke").train_sweep.causal is True
    with pytest.raises(ValueError, match="unknown config variant"):
        config_lib.get_config("big")
