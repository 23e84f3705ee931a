"""The contract every study keeps, and the runner that keeps it (`experiments.lab.study`).

Each study runs once per test run on a small config (`finished(name)`,
shared with the studies' own test files); every contract test reads that run
or re-runs parts of it. The runs compute with JAX's float64 switch off, as the
command runs them (the suite turns it on; a study asks for float64 where its
config says so).
"""

import dataclasses
import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from ml_collections import ConfigDict

from configs import long_context as long_context_config
from configs import power_iteration as power_iteration_config
from configs import rank_collapse as rank_collapse_config
from configs import softmax_scaling as softmax_scaling_config
from configs import spectra as spectra_config
from configs import width as width_config
from experiments.lab import cli
from experiments.lab import study as study_lib
from experiments.long_context import STUDY as LONG_CONTEXT
from experiments.power_iteration import STUDY as POWER_ITERATION
from experiments.rank_collapse import STUDY as RANK_COLLAPSE
from experiments.softmax_scaling import STUDY as SOFTMAX_SCALING
from experiments.spectra import STUDY as SPECTRA
from experiments.width import STUDY as WIDTH
from tests import tiny_checkpoint
from tests.conftest import RUN_DIR_VARIABLE
from tests.experiments.lab.toy_study import toy
from tests.paths import REPO

OUTPUTS = ("config.json", "metrics.jsonl", "summary.json", "report.md")


# --------------------------------------------------------------------------
# Each study's test config: its smoke variant, smaller


def rank_collapse_test_config():
    config = rank_collapse_config.get_config("smoke")
    config.num_seeds = 2
    config.model.features = 16
    config.model.num_heads = 2
    config.model.num_features = 16
    config.init_sweep.depths = (4,)
    config.init_sweep.architectures = ("attention_only", "skip")
    config.init_sweep.attention_kinds = ("softmax",)
    # Wu et al.'s random-init LayerNorm row reads the post-LN attention-only run, in float64 and float32.
    config.mask_sweep.architectures = ("attention_only", "attention_only_postln")
    config.float32_sweep.architectures = ("attention_only_postln",)
    # Both training checks measured: the skip variant at depth 4 and attention only.
    config.train_sweep.depths = (4,)
    config.train_sweep.architectures = ("attention_only", "skip_mlp")
    config.train.update(steps=4, warmup_steps=1, log_every=2, batch_size=8)
    return config


def power_iteration_test_config():
    config = power_iteration_config.get_config("smoke")
    config.fixed.update(temperatures=(1.0,), num_matrices=2, seq_len=8, head_dim=8, steps=120)
    config.products.update(
        architectures=("attention_only",),
        num_layers=2,
        untrained_layers=4,
        num_seeds=1,
        measure_batch_size=2,
    )
    config.products.model.update(features=8, num_heads=2)
    config.products.task.update(num_pairs=2, num_queries=2, vocab_size=8)
    config.products.train.update(steps=2, batch_size=4, warmup_steps=1, log_every=2, eval_batches=1)
    config.clusters.update(
        betas=(1.0, 8.0),
        num_tokens=8,
        dim=3,
        steps=500,
        measure_every=10,
        num_seeds=10,
        probe_time=20.0,
    )
    return config


def softmax_scaling_test_config():
    config = softmax_scaling_config.get_config("smoke")
    config.dims = (4, 64, 1024)
    config.num_samples = 16384  # variance errors ~1%, against the 5% tolerance
    # Half the smoke variant's gradient samples (every one is drawn at width 1024, most of the run's
    # time); the verdicts tests/experiments/test_softmax_scaling.py expects are the same as with 32.
    config.gradient_samples = 16
    return config


def tiny_llama_path() -> Path:
    """A 4-layer tiny llama (2 heads; `tests/tiny_checkpoint.py`), written once per test run in the run's
    scratch directory, so that every worker reads the same checkpoint."""
    path = Path(os.environ[RUN_DIR_VARIABLE]) / "long_context_tiny"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / "long_context_tiny.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / "tokenizer.json").exists():
            tiny_checkpoint.write(path, layers=4)
    return path


def long_context_test_config():
    """The smoke variant on the tiny llama (`tiny_llama_path`), at T <= 32, on 3 segments: segments,
    layers and heads of distinct counts, so that an aggregation over the wrong axis cannot give the right
    shape."""
    config = long_context_config.get_config("smoke")
    config.model.path = str(tiny_llama_path())
    config.text.update(num_segments=3, segment_stride=32)
    config.statistics.update(lengths=(16, 32), num_segments=2)
    config.stream.update(caches=(6, 8), sinks=(1, 4), positions=5, recompute=(6,))
    config.edits.update(length=16, rate_length=8)
    return config


def spectra_test_config():
    """The smoke variant on the tiny llama (4 layers, 2 heads), 3 segments, 3 of its layers out of order
    (distinct counts, so that an aggregation over the wrong axis cannot give the right shape)."""
    config = spectra_config.get_config("smoke")
    config.model.path = str(tiny_llama_path())
    config.text.update(num_segments=3, segment_stride=32)
    config.lengths = (16, 32)
    config.layers = (3, 0, 1)
    return config


def width_test_config():
    config = width_config.get_config("smoke")
    config.lengths = (16, 32, 64)
    return config


STUDIES = {
    "rank_collapse": (RANK_COLLAPSE, rank_collapse_test_config, rank_collapse_config.get_config),
    "power_iteration": (
        POWER_ITERATION,
        power_iteration_test_config,
        power_iteration_config.get_config,
    ),
    "softmax_scaling": (
        SOFTMAX_SCALING,
        softmax_scaling_test_config,
        softmax_scaling_config.get_config,
    ),
    "long_context": (LONG_CONTEXT, long_context_test_config, long_context_config.get_config),
    "width": (WIDTH, width_test_config, width_config.get_config),
    "spectra": (SPECTRA, spectra_test_config, spectra_config.get_config),
}
NAMES = tuple(STUDIES)


@dataclasses.dataclass(frozen=True)
class Finished:
    workdir: Path
    summary: dict
    messages: tuple


def run_as_command(study, config, workdir, **kwargs) -> dict:
    """`study_lib.run` with JAX's float64 switch off, as the command runs it (the suite turns it on)."""
    with jax.enable_x64(False):
        return study_lib.run(study, config, str(workdir), **kwargs)


def shared_run(name: str, study, make_config) -> Finished:
    """`study` run once per test run on `make_config()`, in the run's scratch directory under `name`.

    Several test files read the same run, and with xdist they may sit on
    different workers: the first process to ask runs the study (holding a
    lock), the others wait and read what it wrote (its summary.json, and its
    progress messages, kept beside the workdir). Tests read the run and do not
    change it.
    """
    shared = Path(os.environ[RUN_DIR_VARIABLE])
    workdir, messages_file = shared / "studies" / name, shared / "studies" / f"{name}.messages.json"
    workdir.parent.mkdir(parents=True, exist_ok=True)
    with open(shared / "studies" / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not messages_file.exists():
            shutil.rmtree(workdir, ignore_errors=True)
            messages = []
            run_as_command(study, make_config(), workdir, progress=messages.append)
            messages_file.write_text(json.dumps(messages))
    summary = json.loads((workdir / "summary.json").read_text())
    return Finished(workdir, summary, tuple(json.loads(messages_file.read_text())))


@functools.cache
def finished(name: str) -> Finished:
    """The study `name` run once per test run on its test config (`shared_run`)."""
    study, test_config, _ = STUDIES[name]
    return shared_run(name, study, test_config)


def replace_run_one(study, run_one):
    return dataclasses.replace(study, run_one=run_one)


def refuse(spec, config, run):
    pytest.fail(f"run {spec.run_id} was run again")


# --------------------------------------------------------------------------
# The contract


@pytest.mark.parametrize("name", NAMES)
def test_config_typo_lists_the_valid_keys(name, capsys):
    _, _, get_config = STUDIES[name]
    with pytest.raises(SystemExit):
        cli.flags_parser(get_config)([name, "--config", f"configs/{name}.py", "--config.seedz=3"])
    err = capsys.readouterr().err
    assert "unknown config key 'seedz'" in err and "'seed'" in err


@pytest.mark.parametrize("name", NAMES)
def test_each_command_is_the_shared_entry_point_of_its_study(name):
    """`python -m experiments.<name>` is `cli.study_main` of that study's STUDY, so the command-line test below,
    run as a process for one study, holds for every study."""
    source = (REPO / "experiments" / name / "__main__.py").read_text()
    assert f"from experiments.{name} import STUDY\n" in source and "study_main(STUDY)\n" in source
    assert STUDIES[name][0].name == name  # study_main reads configs/<STUDY.name>.py


def test_command_line_typo_fails_before_running(tmp_path):
    name = "rank_collapse"  # every study's command is the same entry point (the test above)
    cmd = [
        sys.executable,
        "-m",
        f"experiments.{name}",
        "--config",
        f"configs/{name}.py:smoke",
        "--config.seedz=3",
        "--workdir",
        str(tmp_path / "out"),
    ]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "unknown config key 'seedz'" in result.stderr and "'seed'" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", NAMES)
def test_smoke_run_writes_the_five_outputs(name):
    study, test_config, _ = STUDIES[name]
    run = finished(name)
    for output in OUTPUTS:
        assert (run.workdir / output).stat().st_size > 0, output
    plots = sorted(p.name for p in (run.workdir / "plots").iterdir())
    assert plots and plots == run.summary["plots"]
    for plot in plots:
        assert (run.workdir / "plots" / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(run.workdir.rglob("*.tmp.*"))  # every write was renamed into place
    assert not (run.workdir / "checkpoints").exists()  # scratch of finished runs is removed
    assert json.loads((run.workdir / "summary.json").read_text()) == run.summary
    assert run.messages[-1] == f"report: {run.workdir / 'report.md'}"
    # Rows: flat, with the run id and its spec's fields.
    specs = {spec.run_id: dataclasses.asdict(spec) for spec in study.specs(test_config())}
    rows = [json.loads(line) for line in (run.workdir / "metrics.jsonl").read_text().splitlines()]
    assert {row["run"] for row in rows} == set(specs)
    assert all(specs[row["run"]].items() <= row.items() for row in rows)
    # Predictions: records with a verdict; the report is a function of summary.json.
    predictions = run.summary["predictions"]
    assert predictions and all(
        p["verdict"] in study_lib.VERDICTS and p["source"] for p in predictions
    )
    report = (run.workdir / "report.md").read_text()
    assert study.report(json.loads((run.workdir / "summary.json").read_text())) == report
    assert all(f"plots/{plot}" in report for plot in plots)


@pytest.mark.parametrize("name", NAMES)
def test_rerun_skips_finished_runs(name, figures_not_rendered):
    study, test_config, _ = STUDIES[name]
    run = finished(name)
    metrics = (run.workdir / "metrics.jsonl").read_text()
    assert (
        run_as_command(
            replace_run_one(study, refuse),
            test_config(),
            run.workdir,
            progress=lambda line: None,
        )
        == run.summary
    )
    assert (run.workdir / "metrics.jsonl").read_text() == metrics


@pytest.mark.parametrize("name", NAMES)
def test_resume_after_a_kill_gives_the_same_summary(name, tmp_path, figures_not_rendered):
    """A kill during a run leaves no record for it (and maybe its scratch); a re-run redoes that run only."""
    study, test_config, _ = STUDIES[name]
    run = finished(name)
    killed_id = study.specs(test_config())[0].run_id
    workdir = tmp_path / "killed"
    shutil.copytree(
        run.workdir, workdir, ignore=shutil.ignore_patterns("summary.json", "report.md", "plots")
    )
    os.remove(workdir / "runs" / f"{killed_id}.json")

    def killed(spec, config, run_dir):
        if spec.run_id != killed_id:
            refuse(spec, config, run_dir)
        os.makedirs(run_dir.path)
        Path(run_dir.path, "partial").write_text("half a checkpoint")
        raise KeyboardInterrupt("simulated kill")

    with pytest.raises(KeyboardInterrupt):
        run_as_command(
            replace_run_one(study, killed), test_config(), workdir, progress=lambda line: None
        )
    assert (
        not (workdir / "runs" / f"{killed_id}.json").exists()
        and not (workdir / "summary.json").exists()
    )

    redone = []

    def counted(spec, config, run_dir):
        if spec.run_id != killed_id:
            refuse(spec, config, run_dir)
        redone.append(spec.run_id)
        return study.run_one(spec, config, run_dir)

    messages = []
    assert (
        run_as_command(
            replace_run_one(study, counted), test_config(), workdir, progress=messages.append
        )
        == run.summary
    )
    assert redone == [killed_id]
    total = len(study.specs(test_config()))
    assert messages[0].startswith(f"{name}: {total} runs ({total - 1} already done)")
    assert (workdir / "metrics.jsonl").read_text() == (run.workdir / "metrics.jsonl").read_text()
    assert not (workdir / "checkpoints" / killed_id).exists()


# Each edit makes the test config invalid; the run must fail before compiling anything.
BAD_CONFIGS = [
    (
        "rank_collapse",
        lambda c: setattr(c.init_sweep, "depths", (0, 2)),
        r"init_sweep.depths must be positive ints",
    ),
    (
        "rank_collapse",
        lambda c: setattr(c.model, "features", 17),
        r"features \(17\) must be divisible by num_heads \(2\)",
    ),
    (
        "rank_collapse",
        lambda c: setattr(c.train_sweep, "temperatures", (-1.0,)),
        r"train_sweep.temperatures must be > 0",
    ),
    (
        "rank_collapse",
        lambda c: setattr(c.init_sweep, "architectures", ("attention",)),
        r"unknown 'attention'; valid",
    ),
    ("rank_collapse", lambda c: setattr(c, "num_seeds", 0), r"num_seeds must be >= 1"),
    (
        "rank_collapse",
        lambda c: setattr(c.scale_sweep, "num_seeds", 0),
        r"scale_sweep.num_seeds must be None or an int",
    ),
    ("rank_collapse", lambda c: setattr(c.train, "warmup_steps", 4), r"warmup_steps < total_steps"),
    (
        "rank_collapse",
        lambda c: setattr(c.model, "dtype", "float16"),
        r"model.dtype must be one of",
    ),
    (
        "rank_collapse",
        lambda c: setattr(c.layernorm, "constructions", ("orthogonal", "identity")),
        r"layernorm.constructions: unknown 'identity'; valid: \('orthogonal', 'full_rank'\)",
    ),
    (
        "rank_collapse",
        lambda c: setattr(c.layernorm, "num_layers", 0),
        r"layernorm.num_layers must be an int >= 1",
    ),
    (
        "power_iteration",
        lambda c: setattr(c.fixed, "temperatures", (0.0,)),
        r"fixed.temperatures must be a number in \(0, inf\)",
    ),
    ("power_iteration", lambda c: setattr(c.fixed, "steps", 1), r"fixed.steps must be an int >= 2"),
    (
        "power_iteration",
        lambda c: setattr(c.clusters, "radius", 3.0),
        r"clusters.radius must be a number in \(0, 2\)",
    ),
    (
        "power_iteration",
        lambda c: setattr(c.clusters, "betas", (4.0, 1.0)),
        r"clusters.betas must be distinct and increasing",
    ),
    (
        "power_iteration",
        lambda c: setattr(c.products, "architectures", ("attention",)),
        r"unknown 'attention'; valid",
    ),
    (
        "power_iteration",
        lambda c: setattr(c.products.model, "features", 9),
        r"features \(9\) must be divisible by num_heads \(2\)",
    ),
    (
        "power_iteration",
        lambda c: setattr(c.products.train, "warmup_steps", 2),
        r"warmup_steps < total_steps",
    ),
    (
        "softmax_scaling",
        lambda c: setattr(c, "num_samples", -5),
        r"config.num_samples must be an int >= 2",
    ),
    (
        "softmax_scaling",
        lambda c: setattr(c, "saturation_samples", 0),
        r"config.saturation_samples must be an int >= 1",
    ),
    (
        "softmax_scaling",
        lambda c: setattr(c, "dims", (4, 0)),
        r"config.dims: every d_k must be an int >= 1",
    ),
    ("softmax_scaling", lambda c: setattr(c, "dims", ()), r"config.dims must be a non-empty"),
    (
        "softmax_scaling",
        lambda c: setattr(c, "variance_tolerance", 1.5),
        r"config.variance_tolerance must be a number in",
    ),
    (
        "long_context",
        lambda c: setattr(c.statistics, "lengths", (32, 16)),
        r"statistics.lengths must be distinct",
    ),
    (
        "long_context",
        lambda c: setattr(c.stream, "caches", (8, 6)),
        r"stream.caches must be distinct and increasing",
    ),
    (
        "long_context",
        lambda c: setattr(c.text, "num_segments", 1),
        r"text.num_segments must be .* >= 2",
    ),
    (
        "long_context",
        lambda c: setattr(c.model, "path", "/nonexistent/model"),
        r"model.path .* does not exist",
    ),
    ("spectra", lambda c: setattr(c, "lengths", (16,)), r"config.lengths must hold at least 2"),
    ("spectra", lambda c: setattr(c, "layers", (0, 0)), r"config.layers has repeated values"),
    ("spectra", lambda c: setattr(c, "iterations", 0), r"config.iterations"),
]

_compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, *args, **kwargs: (
        _compiles.append(event) if event.endswith("backend_compile_duration") else None
    )
)


@pytest.mark.parametrize("name, edit, message", BAD_CONFIGS)
def test_bad_config_fails_before_compiling(name, edit, message, tmp_path):
    study, test_config, _ = STUDIES[name]
    config = test_config()
    edit(config)
    compiles = len(_compiles)
    with pytest.raises(ValueError, match=message):
        study_lib.run(
            replace_run_one(study, refuse),
            config,
            str(tmp_path / "out"),
            progress=lambda line: None,
        )
    assert len(_compiles) == compiles
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", NAMES)
def test_config_variants(name):
    study, _, get_config = STUDIES[name]
    default, smoke = study.specs(get_config()), study.specs(get_config("smoke"))
    assert 0 < len(smoke) <= len(default)
    with pytest.raises(ValueError, match="unknown config variant"):
        get_config("big")


# --------------------------------------------------------------------------
# The runner, on a toy study (no JAX)


def test_runner_writes_outputs_and_shows_progress(tmp_path):
    messages = []
    summary = study_lib.run(
        toy(), ConfigDict({"xs": (1, 2, 3)}), str(tmp_path), progress=messages.append
    )
    assert summary["squares"] == [1, 4, 9] and summary["config"] == {"xs": [1, 2, 3]}
    assert summary["predictions"][0]["verdict"] == "pass" and summary["plots"] == ["xs.png"]
    assert messages[0] == "toy: 3 runs (0 already done), jax backend cpu"
    assert messages[1:3] == ["[1/3] x1", messages[2]] and messages[2].startswith("      done in ")
    assert "1/3 runs, elapsed" in messages[2] and "left" in messages[2]
    assert messages[-2] == "predictions: 1 pass, 0 fail, 0 not measured"
    assert messages[-1] == f"report: {tmp_path / 'report.md'}"
    assert (tmp_path / "report.md").read_text() == "# toy\n[1, 4, 9] (['xs.png'])\n"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        "config.json",
        "metrics.jsonl",
        "report.md",
        "summary.json",
        "x1.json",
        "x2.json",
        "x3.json",
        "xs.png",
    ]
    assert json.loads((tmp_path / "runs" / "x2.json").read_text()) == {
        "spec": {"x": 2},
        "metrics": [{"metric": "square", "value": 4}],
    }


def test_corrupt_run_record_is_redone_and_named(tmp_path, capsys):
    """A truncated record is moved aside with its file named, and only its run is redone."""
    config = ConfigDict({"xs": (1, 2, 3)})
    first = study_lib.run(toy(), config, str(tmp_path), progress=lambda line: None)
    record = tmp_path / "runs" / "x2.json"
    text = record.read_text()
    record.write_text(text[:-5])
    capsys.readouterr()
    redone, messages = [], []

    def counted(spec, config, run):
        redone.append(spec.run_id)
        return [{"metric": "square", "value": spec.x**2}]

    assert (
        study_lib.run(toy(run_one=counted), config, str(tmp_path), progress=messages.append)
        == first
    )
    assert (
        redone == ["x2"] and capsys.readouterr().out == ""
    )  # every line goes to the progress callback
    corrupt = [m for m in messages if "is not valid JSON" in m]
    assert (
        len(corrupt) == 1
        and str(record) in corrupt[0]
        and f"moved to {record}.corrupt" in corrupt[0]
    )
    assert messages[messages.index(corrupt[0]) + 1].startswith("toy: 3 runs (2 already done)")
    assert (
        record.read_text() == text
        and (tmp_path / "runs" / "x2.json.corrupt").read_text() == text[:-5]
    )


@pytest.mark.parametrize(
    "record", [{}, [], {"spec": {"x": 2}}, {"spec": {"x": 5}, "metrics": [{"metric": "square"}]}]
)
def test_malformed_run_record_is_redone_and_named(tmp_path, record):
    """A record that is JSON but not a record of its run (empty, not an object, without metrics, of
    another spec) is moved aside with its file named, and only its run is redone."""
    config = ConfigDict({"xs": (1, 2, 3)})
    first = study_lib.run(toy(), config, str(tmp_path), progress=lambda line: None)
    path = tmp_path / "runs" / "x2.json"
    path.write_text(json.dumps(record))
    redone, messages = [], []

    def counted(spec, config, run):
        redone.append(spec.run_id)
        return [{"metric": "square", "value": spec.x**2}]

    assert (
        study_lib.run(toy(run_one=counted), config, str(tmp_path), progress=messages.append)
        == first
    )
    (moved,) = [m for m in messages if "is not a run record" in m]
    assert redone == ["x2"] and moved.startswith(str(path))
    assert moved.endswith(f"moved to {path}.corrupt, run x2 will be redone")
    assert json.loads((tmp_path / "runs" / "x2.json.corrupt").read_text()) == record


def test_a_stray_record_is_reported_and_not_merged(tmp_path):
    """A record in runs/ that is not of the study's runs (another study's, a copy) is named once, left
    alone, and never merged into metrics.jsonl."""
    config = ConfigDict({"xs": (1, 2, 3)})
    study_lib.run(toy(), config, str(tmp_path), progress=lambda line: None)
    metrics = (tmp_path / "metrics.jsonl").read_text()
    stray = json.dumps({"spec": {"x": 7}, "metrics": [{"metric": "square", "value": 49}] * 4})
    (tmp_path / "runs" / "other.json").write_text(stray)
    messages = []
    study_lib.run(toy(run_one=refuse), config, str(tmp_path), progress=messages.append)
    assert (tmp_path / "metrics.jsonl").read_text() == metrics
    assert [m for m in messages if "other.json" in m] == [
        f"{tmp_path / 'runs'} holds records that are not of this study's runs, left alone and not "
        "read: other.json"
    ]
    assert (tmp_path / "runs" / "other.json").read_text() == stray


def test_a_read_only_workdir_is_refused_before_any_run(tmp_path, monkeypatch):
    """A workdir that cannot be written is refused, naming it, before any run is computed (whose work
    would be lost when its record cannot be written)."""
    from tests.experiments.lab.test_workdir import _read_only

    config = ConfigDict({"xs": (1, 2, 3)})
    study_lib.run(toy(), config, str(tmp_path), progress=lambda line: None)
    (tmp_path / "runs" / "x3.json").unlink()
    _read_only(tmp_path, monkeypatch)
    ran = []

    def counted(spec, config, run):
        ran.append(spec.run_id)
        return [{"metric": "square", "value": spec.x**2}]

    with pytest.raises(OSError, match=rf"workdir directory {tmp_path} is not writable"):
        study_lib.run(toy(run_one=counted), config, str(tmp_path), progress=lambda line: None)
    assert ran == []


def test_summary_lists_only_figures_already_written(tmp_path, monkeypatch):
    """summary.json is written after the figures it lists: a run killed while they are written leaves no
    summary naming a missing plot (the next run writes them all)."""
    from attnjax import plotting
    from experiments.lab.workdir import Workdir

    def figures(summary):
        out = {}
        for name in ("a", "b"):
            out[name] = plotting.figure(2, 2)
            out[name].add_subplot().plot(summary["xs"])
        return out

    write_figure = Workdir.write_figure

    def killed_at_b(self, name, figure):
        if name == "b":
            raise KeyboardInterrupt("killed while plots/b.png is written")
        return write_figure(self, name, figure)

    monkeypatch.setattr(Workdir, "write_figure", killed_at_b)
    config = ConfigDict({"xs": (1, 2)})
    with pytest.raises(KeyboardInterrupt):
        study_lib.run(toy(figures=figures), config, str(tmp_path), progress=lambda line: None)
    summary = tmp_path / "summary.json"
    listed = json.loads(summary.read_text())["plots"] if summary.exists() else []
    assert all((tmp_path / "plots" / name).exists() for name in listed)
    monkeypatch.undo()
    summary = study_lib.run(toy(figures=figures), config, str(tmp_path), progress=lambda line: None)
    assert summary["plots"] == ["a.png", "b.png"]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == summary["plots"]


def test_runner_rejects_rows_that_repeat_the_spec(tmp_path):
    study = toy(run_one=lambda spec, config, run: [{"x": spec.x, "metric": "square", "value": 1}])
    with pytest.raises(ValueError, match=r"repeat the spec fields \['x'\]"):
        study_lib.run(study, ConfigDict({"xs": (1,)}), str(tmp_path), progress=lambda line: None)


def test_runner_rejects_bad_verdicts_and_duplicate_runs(tmp_path):
    bad = {
        "name": "n",
        "source": "s",
        "prediction": "p",
        "measured": 1,
        "verdict": "PASS",
        "note": "",
    }
    with pytest.raises(ValueError, match="verdict must be one of"):
        study_lib.run(
            toy(predictions=lambda summary: [bad]),
            ConfigDict({"xs": (1,)}),
            str(tmp_path / "a"),
            progress=lambda line: None,
        )
    with pytest.raises(ValueError, match="run ids must be distinct"):
        study_lib.run(
            toy(), ConfigDict({"xs": (1, 1)}), str(tmp_path / "b"), progress=lambda line: None
        )
    assert not (tmp_path / "b").exists()


def test_verdicts_and_row_helpers():
    assert [study_lib.verdict(p) for p in (True, False, None)] == ["pass", "fail", "not measured"]
    rows = [{"phase": "init", "step": 0, "seed": s, "metric": "r", "values": [s]} for s in (0, 1)]
    rows += [{"phase": "train", "step": 2, "seed": 0, "metric": "loss", "value": 1.5}]
    assert study_lib.distinct(rows, "phase", "step") == [("init", 0), ("train", 2)]
    assert study_lib.distinct(rows, "seed") == [0, 1]
    assert study_lib.by_metric(rows, phase="init") == {"r": [[0], [1]]}
    assert study_lib.by_metric(rows, seed=0) == {"r": [[0]], "loss": [1.5]}
    assert study_lib.select(rows, metric="loss") == rows[-1:]
