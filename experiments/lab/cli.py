"""Command-line plumbing: the one entry point of every study, and the config-key check.

    python -m experiments.<study> --config configs/<study>.py[:variant] --workdir DIR [--config.a.b=value ...]
        [--launcher=local|slurm --jobs N [--slurm_partition=P --slurm_time_min=M ...] | --shard=i/n]

Without `--launcher` or `--shard` the study runs in this process. With
`--launcher` its missing runs are submitted as N jobs through submitit, and
with `--shard=i/n` this process runs share i of n (`experiments.lab.launch`); either
way the outputs are written once every run has a record.

A config may set `compile_level` (0-3): the command then compiles every
program of its process, and of the local jobs it starts, at that LLVM backend
optimisation level (`set_compile_level`, through `XLA_FLAGS`, read when JAX's
backend starts). A study run inside a process that already runs JAX (a test,
a notebook) compiles at that process's level.

Flags are defined only by the entry script that runs (`study_main`, called
from a study's `__main__.py`), so studies can be imported together without
clashing flag names. ml_collections rejects an unknown `--config.<key>`
override of a locked config, but names only the key ("Did you mean ...?");
`flags_parser(get_config)` checks every override against the study's config
first and stops with the list of valid keys.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Callable

from absl import app, flags, logging
from ml_collections import config_flags

from attnjax.compilation import BACKEND_LEVEL_FLAG
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


def set_compile_level(level) -> None:
    """Compile this process's programs, and its local jobs', at LLVM backend optimisation level `level`.

    Appends `--xla_backend_optimization_level=<level>` to `XLA_FLAGS`, which JAX reads when its backend
    starts (call before the first JAX computation; child processes inherit it). `level` None, or an
    `XLA_FLAGS` that already sets the level (the user's choice is kept): nothing changes. At level 0
    programs compile about twice as fast and run 2-3x slower, and the last bits of results differ
    from the default level's (`attnjax.compilation`): for runs whose cost is compiling (smoke variants).

    Raises:
      ValueError: `level` not None or an int in 0..3, naming `config.compile_level`.
    """
    if level is None:
        return
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 3:
        raise ValueError(f"config.compile_level must be None or an int in 0..3, got {level!r}")
    xla_flags = os.environ.get("XLA_FLAGS", "")
    if BACKEND_LEVEL_FLAG not in xla_flags:
        os.environ["XLA_FLAGS"] = f"{xla_flags} {BACKEND_LEVEL_FLAG}={level}".strip()


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
        set_compile_level(config.value.get("compile_level"))

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
