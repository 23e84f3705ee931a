"""Studies as job arrays (`experiments.lab.launch`): submitit's local executor, `--shard`, SLURM parameters.

The command-line test runs the softmax-scaling study's test config, made
smaller still (two widths, few samples: compile time, not results, is what a
job costs here), in the test's process and, by its command, as two local jobs; the kill and shard
tests use the runner's toy study (no JAX), so that a job is a process start.
"""

import inspect
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest

from configs import softmax_scaling as softmax_scaling_config
from experiments.lab import launch
from experiments.lab import study as study_lib
from experiments.softmax_scaling import STUDY as SOFTMAX_SCALING
from tests.experiments.lab.test_studies import REPO
from tests.experiments.lab.toy_study import TOY_CONFIG, kill_at_x4, toy

pytest.importorskip("submitit")  # the `cluster` extra, part of `dev`

# Overrides of the smoke variant (the command line gets them as `--config.<key>=<value>`).
TINY = {
    "dims": (4, 8),
    "num_samples": 4096,
    "saturation_samples": 64,
    "gradient_samples": 16,
    "rate_dims": (256, 4096),
    "rate_samples": 256,
}


def _study_command(workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    overrides = [f"--config.{key}={value}" for key, value in TINY.items()]
    cmd = [
        sys.executable,
        "-m",
        "experiments.softmax_scaling",
        "--config",
        "configs/softmax_scaling.py:smoke",
        *overrides,
        "--workdir",
        str(workdir),
        *extra,
    ]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_two_local_jobs_give_the_summary_of_one_process(tmp_path, figures_not_rendered):
    config = softmax_scaling_config.get_config("smoke")
    config.update(TINY)
    with jax.enable_x64(False):  # as the command runs it (the suite turns float64 on)
        study_lib.run(SOFTMAX_SCALING, config, str(tmp_path / "one"), progress=lambda line: None)
    result = _study_command(tmp_path / "jobs", "--launcher=local", "--jobs=2")
    assert "submitting 2 local jobs for the 4 runs of 4 without a record" in result.stdout
    one, jobs = (
        json.loads((tmp_path / name / "summary.json").read_text()) for name in ("one", "jobs")
    )
    assert jobs == one  # the study's summary holds no timings: every field is deterministic
    for output in ("metrics.jsonl", "report.md"):
        assert (tmp_path / "jobs" / output).read_text() == (tmp_path / "one" / output).read_text()
    logs = list((tmp_path / "jobs" / "submitit").rglob("*_log.out"))
    assert len(logs) == 2 and all("this job's share" in log.read_text() for log in logs)


@pytest.mark.slow
def test_a_killed_job_loses_only_its_unfinished_run(tmp_path, monkeypatch):
    import submitit

    # A job that dies writes no result; submitit then waits this long for one (15 s, for network file systems).
    monkeypatch.setattr(submitit.core.core.Job, "_results_timeout_s", 1)
    reference = toy().run_one
    messages = []
    with pytest.raises(RuntimeError, match=r"1 of 2 jobs failed: job \S+ \(x2, x4\)") as error:
        launch.submit(
            toy(run_one=kill_at_x4),
            TOY_CONFIG,
            str(tmp_path),
            launcher="local",
            jobs=2,
            progress=messages.append,
        )
    # The runs are dealt as (x1, x3, x5) and (x2, x4): the second job finished x2 and died in x4.
    assert "Runs without a record: ['x4']" in str(error.value)
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["x1.json", "x2.json", "x3.json", "x5.json"]
    assert not (tmp_path / "summary.json").exists()
    before = {p.name: (p.stat().st_mtime_ns, p.read_text()) for p in runs.iterdir()}

    messages = []
    summary = launch.submit(
        toy(run_one=reference),
        TOY_CONFIG,
        str(tmp_path),
        launcher="local",
        jobs=2,
        progress=messages.append,
    )
    assert messages[0].startswith(
        "toy: submitting 1 local jobs for the 1 runs of 5 without a record"
    )
    assert summary["squares"] == [1, 4, 9, 16, 25]
    assert {
        p.name: (p.stat().st_mtime_ns, p.read_text()) for p in runs.iterdir() if p.name != "x4.json"
    } == before
    assert json.loads((runs / "x4.json").read_text())["metrics"] == [
        {"metric": "square", "value": 16}
    ]
    # Every run done: the same command submits nothing and writes the outputs again, unchanged.
    messages = []
    assert (
        launch.submit(
            toy(run_one=kill_at_x4),
            TOY_CONFIG,
            str(tmp_path),
            launcher="local",
            jobs=2,
            progress=messages.append,
        )
        == summary
    )
    assert not any("submitting" in m for m in messages)


def _running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, ended but not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_killing_the_launcher_cancels_its_jobs(tmp_path):
    """SIGTERM (kill, scancel of the launcher's own job) while the launcher waits: its jobs are
    cancelled, not left running as orphans, and it says what to do next. (SIGINT takes the same path:
    `test_a_stopped_launcher_cancels_every_job`.)"""
    signum = signal.SIGTERM
    script = (
        "from experiments.lab import launch\n"
        "from tests.experiments.lab.toy_study import TOY_CONFIG, sleep_in_every_run, toy\n"
        f"launch.submit(toy(run_one=sleep_in_every_run), TOY_CONFIG, {str(tmp_path)!r}, "
        "launcher='local', jobs=2, progress=lambda line: print(line, flush=True))\n"
    )
    log = (
        tmp_path / "launcher.log"
    )  # a file: the jobs inherit the launcher's output, a pipe would not close
    with log.open("w") as output:
        launcher = subprocess.Popen(
            [sys.executable, "-c", script], cwd=REPO, stdout=output, stderr=subprocess.STDOUT
        )
    pid_files = [tmp_path / "checkpoints" / run / "pid" for run in ("x1", "x2")]
    pids = []
    try:
        deadline = time.monotonic() + 300
        while not all(f.exists() and f.read_text() for f in pid_files):
            assert launcher.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the jobs did not start"
            time.sleep(0.2)
        pids = [int(f.read_text()) for f in pid_files]
        launcher.send_signal(signum)
        launcher.wait(timeout=120)
        out = log.read_text()
        deadline = time.monotonic() + 30
        while any(map(_running, pids)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_running, pids)), "the launcher's jobs still run"
        assert (
            f"stopped by {signal.Signals(signum).name}: cancelled 2 jobs" in out
            and "run the same command again" in out
        )
        assert not (tmp_path / "summary.json").exists()
    finally:
        launcher.kill()
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


class _Job:
    """A submitted job as the launcher sees it: an id, and `cancel` (recorded)."""

    def __init__(self, job_id, cancelled):
        self.job_id, self.cancelled = job_id, cancelled

    def cancel(self, check=True):
        self.cancelled.append((self.job_id, check))


@pytest.mark.parametrize(
    "signum, stops", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, SystemExit)]
)
def test_a_stopped_launcher_cancels_every_job(signum, stops):
    """SIGINT or SIGTERM while the launcher waits cancels every submitted job, says so, then stops
    the launcher; afterwards the signal handlers are what they were."""

    def not_handled(signum, frame):  # the handlers in place before: reached if none is installed
        raise AssertionError(
            f"{signal.Signals(signum).name} reached the handler outside the launcher"
        )

    signals = (signal.SIGINT, signal.SIGTERM)
    outside = {s: signal.signal(s, not_handled) for s in signals}
    try:
        cancelled, messages = [], []
        jobs = [_Job("11", cancelled), _Job("12", cancelled)]
        with pytest.raises(stops) as stopped:
            with launch._cancel_jobs_when_stopped(jobs, messages.append):
                os.kill(os.getpid(), signum)
                time.sleep(5)  # the handler runs in the main thread at the next bytecode
        assert cancelled == [("11", False), ("12", False)]
        assert messages == [
            f"stopped by {signal.Signals(signum).name}: cancelled 2 jobs (11, 12); their unfinished "
            "runs have no record: run the same command again to submit them"
        ]
        assert stops is KeyboardInterrupt or stopped.value.code == 128 + signum
        assert all(signal.getsignal(s) is not_handled for s in signals)
    finally:
        for s, handler in outside.items():
            signal.signal(s, handler)


def test_shards_are_disjoint_cover_every_run_and_write_the_outputs_once_all_are_done(tmp_path):
    ran = []

    def counted(spec, config, run):
        ran.append(spec.run_id)
        return [{"metric": "square", "value": spec.x**2}]

    study = toy(run_one=counted)
    specs = study.specs(TOY_CONFIG)
    shares = [[s.run_id for s in launch.shard(specs, i, 3)] for i in range(3)]
    assert shares == [["x1", "x4"], ["x2", "x5"], ["x3"]]
    assert shares == [
        [s.run_id for s in launch.shard(study.specs(TOY_CONFIG), i, 3)] for i in range(3)
    ]
    messages = []
    assert (
        launch.run_shard(study, TOY_CONFIG, str(tmp_path), "2/3", progress=messages.append) is None
    )
    assert (
        launch.run_shard(study, TOY_CONFIG, str(tmp_path), "0/3", progress=messages.append) is None
    )
    assert messages[-1] == (
        "toy: 2 of 5 runs not done yet (x2, x5); "
        "summary, report and figures are written when every run is done"
    )
    assert not (tmp_path / "summary.json").exists()
    summary = launch.run_shard(study, TOY_CONFIG, str(tmp_path), "1/3", progress=messages.append)
    assert ran == ["x3", "x1", "x4", "x2", "x5"] and summary["squares"] == [1, 4, 9, 16, 25]
    assert (tmp_path / "summary.json").exists() and messages[-1].startswith("report: ")
    # A share re-run after its runs are done runs nothing, and finds every run done.
    assert (
        launch.run_shard(study, TOY_CONFIG, str(tmp_path), "0/3", progress=messages.append)
        == summary
    )
    assert len(ran) == 5


@pytest.mark.parametrize("text", ["3/3", "-1/2", "1", "a/b", "1/0"])
def test_bad_shard_raises(text):
    with pytest.raises(ValueError, match=f"shard must be 'i/n' .* got '{text}'"):
        launch.parse_shard(text)


def test_deal_balances_the_missing_runs():
    assert launch.deal(["a", "b", "c"], 2) == [["a", "c"], ["b"]]
    assert launch.deal(["a"], 4) == [["a"]] and launch.deal([], 3) == []
    with pytest.raises(ValueError, match="jobs must be >= 1, got 0"):
        launch.deal(["a"], 0)


def test_slurm_parameters_are_submitit_parameters():
    import submitit
    from submitit.slurm import slurm

    options = launch.SlurmOptions(
        partition="gpu", time_min=90, cpus_per_task=8, gpus_per_node=1, mem_gb=32
    )
    parameters = launch.executor_parameters("slurm", "rank_collapse", options)
    assert parameters == {
        "name": "rank_collapse",
        "timeout_min": 90,
        "cpus_per_task": 8,
        "gpus_per_node": 1,
        "tasks_per_node": 1,
        "nodes": 1,
        "slurm_partition": "gpu",
        "mem_gb": 32,
    }
    generic = submitit.AutoExecutor._valid_parameters()
    sbatch = set(inspect.signature(slurm._make_sbatch_string).parameters)
    assert all(k in generic or k.removeprefix("slurm_") in sbatch for k in parameters)
    assert launch.executor_parameters("local", "toy") == {"name": "toy", "timeout_min": 240}
    with pytest.raises(ValueError, match="launcher must be one of"):
        launch.executor_parameters("pbs", "toy")
    with pytest.raises(ValueError, match="slurm time_min must be >= 1, got 0"):
        launch.SlurmOptions(time_min=0)


def test_without_submitit_the_launcher_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # `import submitit` raises ImportError
    with pytest.raises(ImportError, match=r"pip install attnjax\[cluster\]"):
        launch.submit(
            toy(), TOY_CONFIG, str(tmp_path), launcher="local", jobs=2, progress=lambda line: None
        )
    assert not list((tmp_path / "runs").iterdir())
