"""Command-line plumbing: the one entry point of every study, and the config-key check.

    python -m experiments.<study> --config configs/<study>.py[:variant] --workdir DIR [--config.a.b=value ...]
        [--launcher=local|slurm --jobs N [--slurm_partition=P --slurm_time_min=M ...] | --shard=i/n]

Without `--launcher` or `--shard` the study runs in this process. With
`--launcher` its missing runs are submitted as N jobs through submitit, and
with `--shard=i/n` this process runs share i of n (`experiments.lab.launch`); either
way the outputs are written once every run has a record.

Flags are defined only by the entry script that runs (`study_main`, called
from a study's `__main__.py`), so studies can be imported together without
clashing flag names. ml_collections rejects an unknown `--config.<key>`
override of a locked config, but names only the key ("Did you mean ...?");
`flags_parser(get_config)` checks every override against the study's config
first and stops with the list of valid keys.
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable

from absl import app, flags, logging
from ml_collections import config_flags

from experiments.lab import launch
from experiments.lab import study as study_lib


def leaf_paths(tree, prefix: str = "") -> list[str]:
    """Dotted paths of the leaves of a nested ConfigDict / dict."""
    paths = []
    for name, value in tree.items():
        path = f"{prefix}{name}"
        paths += leaf_paths(value, path + ".") if hasattr(value, "items") else [path]
    return paths


def unknown_override_keys(argv: list[str], valid: list[str]) -> list[str]:
    """The `--config.<key>=...` overrides in `argv` whose key is not in `valid`."""
    keys = [
        arg[len("--config.") :].split("=", 1)[0] for arg in argv[1:] if arg.startswith("--config.")
    ]
    return [k for k in keys if k not in valid]


def flags_parser(get_config: Callable) -> Callable[[list[str]], list[str]]:
    """An absl `flags_parser` that rejects unknown config overrides, listing the valid keys."""

    def parse(argv: list[str]) -> list[str]:
        valid = sorted(leaf_paths(get_config()))
        unknown = unknown_override_keys(argv, valid)
        if unknown:
            print(
                f"FATAL Flags parsing error: unknown config key {unknown[0]!r}; valid keys: {valid}",
                file=sys.stderr,
            )
            sys.exit(1)
        return app.parse_flags_with_usage(argv)

    return parse


def study_main(study: study_lib.Study) -> None:
    """Parse `--config` (a `configs/<study.name>.py` file) and `--workdir`, then run the study."""
    get_config = importlib.import_module(f"configs.{study.name}").get_config
    config = config_flags.DEFINE_config_file(
        "config", None, f"study config file (configs/{study.name}.py)", lock_config=True
    )
    workdir = flags.DEFINE_string("workdir", None, "output directory")
    launcher = flags.DEFINE_enum(
        "launcher",
        None,
        list(launch.LAUNCHERS),
        "submit the missing runs as --jobs submitit jobs (default: run in this process)",
    )
    jobs = flags.DEFINE_integer("jobs", 1, "number of jobs for --launcher", lower_bound=1)
    shard = flags.DEFINE_string(
        "shard", None, "'i/n': run share i of n of the runs (any job array launcher)"
    )
    default = launch.SlurmOptions()
    partition = flags.DEFINE_string(
        "slurm_partition", default.partition, "SLURM partition (default: the cluster's)"
    )
    time_min = flags.DEFINE_integer(
        "slurm_time_min", default.time_min, "SLURM time limit per job, minutes"
    )
    cpus = flags.DEFINE_integer("slurm_cpus_per_task", default.cpus_per_task, "CPUs per SLURM job")
    gpus = flags.DEFINE_integer("slurm_gpus_per_node", default.gpus_per_node, "GPUs per SLURM job")
    mem_gb = flags.DEFINE_integer(
        "slurm_mem_gb", default.mem_gb, "memory per SLURM job, GB (default: the cluster's)"
    )
    flags.mark_flags_as_required(["config", "workdir"])

    def main(argv: list[str]) -> None:
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments: {argv[1:]}")
        if launcher.value is not None and shard.value is not None:
            raise app.UsageError(
                "--launcher and --shard exclude each other (--shard is for other launchers)"
            )
        if jobs.value > 1 and launcher.value is None:
            raise app.UsageError(f"--jobs={jobs.value} needs --launcher=local or --launcher=slurm")
        logging.set_verbosity(logging.WARNING)  # checkpointing logs every save at INFO

        def progress(line):
            return print(line, flush=True)

        if launcher.value is not None:
            slurm = launch.SlurmOptions(
                partition.value, time_min.value, cpus.value, gpus.value, mem_gb.value
            )
            launch.submit(
                study,
                config.value,
                workdir.value,
                launcher=launcher.value,
                jobs=jobs.value,
                slurm=slurm,
                progress=progress,
            )
        elif shard.value is not None:
            launch.run_shard(study, config.value, workdir.value, shard.value, progress=progress)
        else:
            study_lib.run(study, config.value, workdir.value, progress=progress)

    app.run(main, flags_parser=flags_parser(get_config))
