"""Mutants of the lab's distrust of its workdir: run records checked, only the study's read, writability
checked first, temporary files removed, corrupt checkpoints named, jobs cancelled with the launcher,
the summary written after its figures, and JSON 'nan' read as a number."""

from tests.mutant import Mutant

WORKDIR = "tests/experiments/lab/test_workdir.py::"
STUDIES = "tests/experiments/lab/test_studies.py::"
LAUNCH = "tests/experiments/lab/test_launch.py::"

MUTANTS = (
    Mutant(
        "experiments/lab/workdir.py",
        "problem = record_problem(record, spec)",
        "problem = None",
        "run records not validated",
        (
            WORKDIR + "test_malformed_run_record_is_named_and_moved_aside",
            STUDIES + "test_malformed_run_record_is_redone_and_named",
        ),
    ),
    Mutant(
        "experiments/lab/workdir.py",
        'if spec is not None and record.get("spec") != spec:',
        "if False:",
        "a record of another spec accepted",
        (WORKDIR + "test_a_record_of_another_spec_is_moved_aside",),
    ),
    Mutant(
        "experiments/lab/workdir.py",
        "return ids if self.specs is None else [i for i in ids if i in self.specs]",
        "return ids",
        "records of other runs read",
        (WORKDIR + "test_only_the_studys_records_are_read_and_others_reported_once",),
    ),
    Mutant(
        "experiments/lab/study.py",
        "wd = Workdir(workdir, log=progress, specs={s.run_id: dataclasses.asdict(s) for s in specs})",
        "wd = Workdir(workdir, log=progress)",
        "the runner does not tell the workdir its runs",
        (STUDIES + "test_a_stray_record_is_reported_and_not_merged",),
    ),
    Mutant(
        "experiments/lab/workdir.py",
        "        for directory in directories:\n            self._check_writable(directory)",
        "        for directory in directories[:0]:\n            self._check_writable(directory)",
        "workdir writability not checked",
        (
            WORKDIR + "test_a_read_only_workdir_is_refused_when_opened",
            STUDIES + "test_a_read_only_workdir_is_refused_before_any_run",
        ),
    ),
    Mutant(
        "experiments/lab/workdir.py",
        "        with contextlib.suppress(OSError):\n            os.remove(tmp)\n        raise",
        "        raise",
        "a failed write keeps its temporary file",
        (WORKDIR + "test_a_failed_write_leaves_no_temporary_file",),
    ),
    Mutant(
        "experiments/lab/workdir.py",
        "if found and head and pid.isdigit() and not _process_runs(int(pid)):",
        "if False:",
        "stale temporary files kept",
        (WORKDIR + "test_stale_temporary_files_of_dead_processes_of_this_host_are_removed",),
    ),
    Mutant(
        "experiments/lab/workdir.py",
        "if found and head and pid.isdigit() and not _process_runs(int(pid)):",
        "if found and head and pid.isdigit():",
        "temporary files of live processes removed",
        (WORKDIR + "test_stale_temporary_files_of_dead_processes_of_this_host_are_removed",),
    ),
    Mutant(
        "attnjax/training.py",
        "raise ValueError(self._unreadable(step, error)) from error",
        "raise",
        "corrupt checkpoint: orbax's error unexplained",
        ("tests/attnjax/test_training.py::test_a_corrupt_checkpoint_is_named_with_the_way_out",),
    ),
    Mutant(
        "experiments/lab/launch.py",
        "job.cancel(check=False)",
        "pass",
        "a stopped launcher leaves its jobs running",
        (LAUNCH + "test_a_stopped_launcher_cancels_every_job",),
    ),
    Mutant(
        "experiments/lab/launch.py",
        "previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}",
        "previous = {}",
        "no signal handler while the launcher waits",
        (LAUNCH + "test_a_stopped_launcher_cancels_every_job",),
    ),
    Mutant(
        "experiments/lab/study.py",
        "    for name, figure in figures.items():\n        wd.write_figure(name, figure)\n"
        "    wd.write_summary(summary)",
        "    wd.write_summary(summary)\n    for name, figure in figures.items():\n"
        "        wd.write_figure(name, figure)",
        "summary.json written before its figures",
        (STUDIES + "test_summary_lists_only_figures_already_written",),
    ),
    Mutant(
        "experiments/lab/stats.py",
        'a, b = number(iv["low"]), number(iv["high"])',
        'a, b = iv["low"], iv["high"]',
        "interval rule: JSON 'nan' ends not read",
        (
            "tests/experiments/lab/test_stats.py",
            "tests/experiments/test_long_context.py::test_the_decision_rules_on_intervals",
        ),
    ),
    Mutant(
        "experiments/lab/render.py",
        'mean, low, high = (number(x[k]) for k in ("mean", "low", "high"))',
        'mean, low, high = (x[k] for k in ("mean", "low", "high"))',
        "interval text: JSON 'nan' not read",
        ("tests/experiments/lab/test_stats.py",),
    ),
)
