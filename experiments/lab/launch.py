"""Launching a study as many jobs: shares of its runs, and job arrays through submitit.

A study is a list of independent runs, each recorded atomically in the
workdir (`experiments.lab.study`), which is what a job array wants: every job runs a
share of the runs into the same (shared) workdir, and the summary, figures
and report are written once, when every run has a record.

* `run_shard(study, config, workdir, "i/n")`: share i of n (`shard`: every
  n-th run of the study, starting at the i-th, in spec order), skipping the
  runs already recorded. The shares depend only on the study's specs, not on
  what is done when a job starts, so the n jobs of an array (a SLURM array
  script, XManager, GNU parallel) are disjoint and cover every run however
  their start times interleave. The job that finds every run done writes
  the outputs; the others say what is left.
* `submit(study, config, workdir, launcher="local"|"slurm", jobs=N)`: the
  runs without a record, dealt round-robin into at most N jobs submitted
  through submitit (its local executor: processes on this machine; or SLURM),
  waited for, then the outputs. A failed or killed job loses only its
  unfinished run: the same call (the same command) submits only what is
  missing, and a call that finds every run done writes the outputs at once.
  A launcher stopped while it waits (SIGINT: Ctrl-C; SIGTERM: kill, or
  scancel of the launcher's own job) cancels its jobs first, so none runs on
  unwatched, and says so. (SIGKILL cannot be caught: its jobs run on, and
  record their runs.)

submitit is imported only here, only for `submit`; it is the `cluster` extra
(`pip install attnjax[cluster]`). Job logs go to `workdir/submitit/`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
from typing import Callable, Iterator, Optional

from experiments.lab import study as study_lib

LAUNCHERS = ("local", "slurm")


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' -> (i, n), with 0 <= i < n."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"shard must be 'i/n' with integers 0 <= i < n, got {text!r}") from None
    if not 0 <= index < count:
        raise ValueError(f"shard must be 'i/n' with integers 0 <= i < n, got {text!r}")
    return index, count


def shard(specs: list, index: int, count: int) -> list:
    """Share `index` of `count` of `specs`: specs[index], specs[index + count], ... (spec order)."""
    return list(specs[index::count])


def deal(run_ids: list[str], jobs: int) -> list[list[str]]:
    """`run_ids` dealt round-robin into at most `jobs` non-empty shares, in order."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    return [share for share in (run_ids[j::jobs] for j in range(jobs)) if share]


def run_shard(
    study: study_lib.Study,
    config,
    workdir: str,
    shard_text: str,
    *,
    progress: Callable[[str], None] = print,
) -> Optional[dict]:
    """Run share `shard_text` ('i/n') of the study's runs; the summary if every run is then done, else None."""
    index, count = parse_shard(shard_text)
    specs = study.specs(config)
    share = [spec.run_id for spec in shard(specs, index, count)]
    return study_lib.run(study, config, workdir, progress=progress, run_ids=share)


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    """Resources of each SLURM job (`partition` None: the cluster's default)."""

    partition: Optional[str] = None
    time_min: int = 240
    cpus_per_task: int = 4
    gpus_per_node: int = 0
    mem_gb: Optional[int] = None

    def __post_init__(self):
        for name in ("time_min", "cpus_per_task"):
            if getattr(self, name) < 1:
                raise ValueError(f"slurm {name} must be >= 1, got {getattr(self, name)}")
        if self.gpus_per_node < 0:
            raise ValueError(f"slurm gpus_per_node must be >= 0, got {self.gpus_per_node}")


def executor_parameters(launcher: str, name: str, slurm: SlurmOptions = SlurmOptions()) -> dict:
    """The parameters of submitit's `AutoExecutor.update_parameters` for `launcher`."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {LAUNCHERS}, got {launcher!r}")
    parameters = {"name": name, "timeout_min": slurm.time_min}
    if launcher == "slurm":
        parameters.update(
            cpus_per_task=slurm.cpus_per_task,
            gpus_per_node=slurm.gpus_per_node,
            tasks_per_node=1,
            nodes=1,
        )
        if slurm.partition is not None:
            parameters["slurm_partition"] = slurm.partition
        if slurm.mem_gb is not None:
            parameters["mem_gb"] = slurm.mem_gb
    return parameters


def _submitit():
    try:
        import submitit
    except ImportError:
        raise ImportError("--launcher needs submitit: pip install attnjax[cluster]") from None
    return submitit


def make_executor(launcher: str, folder: str, name: str, slurm: SlurmOptions = SlurmOptions()):
    """A submitit executor for `launcher` ('local': processes on this machine; 'slurm'), logging to `folder`."""
    parameters = executor_parameters(launcher, name, slurm)
    executor = _submitit().AutoExecutor(folder=folder, cluster=launcher)
    executor.update_parameters(**parameters)
    return executor


@contextlib.contextmanager
def _cancel_jobs_when_stopped(jobs: list, progress: Callable[[str], None]) -> Iterator[None]:
    """While the launcher waits for `jobs` (submitit jobs, filled in as they are submitted): on SIGINT
    or SIGTERM, cancel every one of them, say so, then stop (KeyboardInterrupt for SIGINT, exit status
    128 + the signal's number for SIGTERM). Signal handlers belong to the main thread: elsewhere
    nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        for job in jobs:
            with contextlib.suppress(Exception):  # a job that already ended, a scancel that failed
                job.cancel(check=False)
        progress(
            f"stopped by {signal.Signals(signum).name}: cancelled {len(jobs)} jobs "
            f"({', '.join(str(job.job_id) for job in jobs)}); their unfinished runs have no record: "
            "run the same command again to submit them"
        )
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _job(study: study_lib.Study, config, workdir: str, run_ids: list[str]) -> None:
    """One job: its share of the runs (the outputs are left to the submitting process)."""
    study_lib.run(
        study,
        config,
        workdir,
        progress=lambda line: print(line, flush=True),
        run_ids=run_ids,
        write_outputs=False,
    )


def submit(
    study: study_lib.Study,
    config,
    workdir: str,
    *,
    launcher: str,
    jobs: int,
    slurm: SlurmOptions = SlurmOptions(),
    progress: Callable[[str], None] = print,
) -> dict:
    """Run the study's missing runs as at most `jobs` submitit jobs, wait for them, then write the outputs.

    Raises RuntimeError (after writing nothing but the finished runs' records)
    if a job failed; calling again submits only the runs still missing. SIGINT
    or SIGTERM while waiting cancels the jobs before the launcher stops.
    """
    specs, wd = study_lib.prepare(study, config, workdir, progress)
    executor_parameters(
        launcher, study.name, slurm
    )  # bad options fail before anything is submitted
    shares = deal([spec.run_id for spec in specs if not wd.is_done(spec.run_id)], jobs)
    if shares:
        folder = os.path.join(workdir, "submitit", "%j")
        executor = make_executor(launcher, folder, study.name, slurm)
        count = sum(map(len, shares))
        progress(
            f"{study.name}: submitting {len(shares)} {launcher} jobs for the {count} runs of "
            f"{len(specs)} without a record; logs in {os.path.dirname(folder)}"
        )
        submitted, failed = [], []
        with _cancel_jobs_when_stopped(submitted, progress):
            submitted += executor.map_array(
                _job, *zip(*[(study, config, workdir, share) for share in shares])
            )
            for job, share in zip(submitted, shares):
                try:
                    job.result()
                except Exception as error:  # noqa: BLE001 - a job's failure is reported, then the others waited for
                    last_line = (str(error).strip().splitlines() or [type(error).__name__])[-1]
                    failed.append(f"job {job.job_id} ({', '.join(share)}): {last_line}")
        if failed:
            left = [spec.run_id for spec in specs if not wd.is_done(spec.run_id)]
            raise RuntimeError(
                f"{len(failed)} of {len(shares)} jobs failed: {'; '.join(failed)}. "
                f"Runs without a record: {left}; run the same command again to submit them."
            )
    summary = study_lib.write_outputs_if_done(study, config, specs, wd, progress)
    if summary is None:  # a job ended without error but left runs undone (should not happen)
        raise RuntimeError(
            f"{study.name}: the jobs ended with runs left undone; run the same command again"
        )
    return summary
