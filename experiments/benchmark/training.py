"""Benchmark section 'training': train-step throughput, mixed precision, seeds in one program.

Config: `configs/benchmark.py`, `training`. Models are the rank-collapse
study's training setting (causal recall, softmax attention; written out in
that config as `run` and `seeds_run`), built by `experiments.lab.models.make_trainer`.

* Train step of the default rank-collapse model (`architecture`, `depth`,
  its `num_seeds` seeds): seconds per step and tokens/s, float32 and bf16
  compute with float32 parameters (`model.dtype='bfloat16'`); the bf16 row's
  ratio is its time over float32's.
* Seeds: `num_seeds` seeds of the smoke model trained `steps` steps
  (`steps_per_call` per call) in one program (`SeedsRunner` vmapped over
  seeds, the seeds sharded over the local devices by `training.seeds_mesh`)
  against the same seeds run one after another. Each measurement is a whole run: init, batches, training, waiting
  for the result (compiled beforehand: every variant compiles once). The
  reference is sequential runs as JAX runs them by default, on one device.
  Target: throughput ratio (sequential seconds / one-program seconds) >=
  `target_seeds`. With `all_variants`, two more rows for context: the
  program on one device (what vmapping alone gives), and sequential runs
  that use every device too, by sharding the batch.

On a CPU, `python -m experiments.benchmark` starts JAX with one XLA device per core
(`cpu_devices`), so a program can spread its independent seeds over the cores.
"""

from __future__ import annotations

import functools
import os
import statistics
import time

import jax

from attnjax import training
from experiments.benchmark.util import interleaved_median_times, ratio_row
from experiments.lab import models

SECTION = "training"
SHARDED = "one program, seeds sharded over devices"
SEQUENTIAL = "sequential runs, one device"
BATCH_SHARDED = "sequential runs, batch sharded over devices"


def make_trainer(run, architecture: str, depth: int, dtype: str = "float32"):
    """(trainer, `run`) of one training run: `run` holds seed, num_seeds, causal and the task, model
    and train blocks; the model computes in `dtype`."""
    run = run.copy_and_resolve_references()
    run.model.dtype = dtype
    trainer = models.make_trainer(
        run.model,
        run.train,
        models.make_task(run.task),
        architecture=architecture,
        depth=depth,
        causal=bool(run.causal),
    )
    return trainer, run


@functools.cache
def runner_for(trainer: training.Trainer, mesh) -> training.SeedsRunner:
    """One runner (so one set of compiled programs) per trainer and mesh."""
    return training.SeedsRunner(trainer, mesh=mesh)


def _tokens(trainer, seeds: int, steps: int) -> int:
    return seeds * steps * trainer.batch_size * trainer.task.seq_len


def _keys(config, num_seeds: int):
    root = jax.random.key(config.seed)
    return jax.random.split(jax.random.fold_in(root, 0), num_seeds), jax.random.split(
        jax.random.fold_in(root, 1), num_seeds
    )


def step_rows(cfg) -> list[dict]:
    """Seconds per train step and tokens/s of the default model for each of `cfg.dtypes` (float32 first)."""
    calls, shapes = {}, {}
    for dtype in cfg.dtypes:
        trainer, config = make_trainer(cfg.run, cfg.architecture, cfg.depth, dtype)
        runner = runner_for(trainer, training.seeds_mesh(config.num_seeds, trainer.batch_size))
        init_keys, data_keys = _keys(config, config.num_seeds)
        holder = {"state": runner.init(init_keys)}

        def call(runner=runner, holder=holder, data_keys=data_keys):
            holder["state"], metrics = runner.train(holder["state"], data_keys, cfg.steps_per_call)
            return metrics["loss"]

        calls[dtype] = call
        shapes[dtype] = (
            f"{cfg.architecture} L={cfg.depth} D={config.model.features} S={config.num_seeds} "
            f"B={trainer.batch_size} T={trainer.task.seq_len} devices={runner.mesh.size}"
        )
    tokens = _tokens(trainer, config.num_seeds, cfg.steps_per_call)
    times = interleaved_median_times(calls, repeats=cfg.repeats)
    rows = []
    for dtype, seconds in times.items():
        name = f"train step, {'float32' if dtype == 'float32' else 'bf16 compute, float32 params'}"
        row = {
            "section": SECTION,
            "name": name,
            "shape": shapes[dtype],
            "seconds": seconds / cfg.steps_per_call,
            "tokens_per_s": tokens / seconds,
        }
        if dtype != "float32":
            row.update(
                ratio_row(
                    SECTION,
                    name,
                    shapes[dtype],
                    seconds,
                    times["float32"],
                    rows[0]["name"],
                    note="bf16 s / float32 s",
                )
            )
        rows.append(row)
    return rows


def _run_seconds(runner, init_keys, data_keys, steps: int, steps_per_call: int) -> float:
    """Wall seconds of one whole training run of `len(init_keys)` seeds."""
    start = time.perf_counter()
    state = runner.init(init_keys)
    for done in range(0, steps, steps_per_call):
        state, _ = runner.train(state, data_keys, min(steps_per_call, steps - done))
    jax.block_until_ready(state)
    return time.perf_counter() - start


def _sequential_seconds(runner, init_keys, data_keys, steps, steps_per_call) -> float:
    return sum(
        _run_seconds(runner, init_keys[i : i + 1], data_keys[i : i + 1], steps, steps_per_call)
        for i in range(init_keys.shape[0])
    )


def seeds_rows(cfg) -> list[dict]:
    """Seeds in one program against sequential runs (see the module docstring)."""
    trainer, config = make_trainer(cfg.seeds_run, cfg.seeds_architecture, cfg.seeds_depth)
    seeds, batch = cfg.num_seeds, trainer.batch_size
    init_keys, data_keys = _keys(config, seeds)
    devices = jax.local_devices()
    one_device = training.data_mesh(batch, devices[:1])
    variants = {SHARDED: (training.seeds_mesh(seeds, batch), False), SEQUENTIAL: (one_device, True)}
    if cfg.all_variants:
        variants["one program, one device"] = (one_device, False)
        if training.data_mesh(batch).size > 1:
            variants[BATCH_SHARDED] = (training.data_mesh(batch), True)
    measure = {}
    for name, (mesh, sequential) in variants.items():
        runner = runner_for(trainer, mesh)
        run = _sequential_seconds if sequential else _run_seconds
        measure[name] = lambda run=run, runner=runner: run(
            runner, init_keys, data_keys, cfg.steps, cfg.steps_per_call
        )
        measure[name]()  # compile
    times = {name: [] for name in measure}
    for _ in range(cfg.seeds_repeats):
        for name, fn in measure.items():
            times[name].append(fn())
    seconds = {name: statistics.median(t) for name, t in times.items()}
    tokens = _tokens(trainer, seeds, cfg.steps)
    base = (
        f"{cfg.seeds_architecture} L={cfg.seeds_depth} D={config.model.features} S={seeds} B={batch} "
        f"T={trainer.task.seq_len} steps={cfg.steps}"
    )

    def label(name):
        return f"{seeds} seeds: {name}"

    def shape(name):
        return f"{base} devices={variants[name][0].size}"

    rows = [
        {
            "section": SECTION,
            "name": label(name),
            "shape": shape(name),
            "seconds": value,
            "tokens_per_s": tokens / value,
        }
        for name, value in seconds.items()
    ]
    # Throughput ratios: a sequential variant's seconds over the one program's.
    for name in (n for n in seconds if n.startswith("one program")):
        target = f">= {cfg.target_seeds:g}" if name == SHARDED else None
        rows.append(
            ratio_row(
                SECTION,
                f"{label(name)} / {SEQUENTIAL}, throughput",
                shape(name),
                seconds[SEQUENTIAL],
                seconds[name],
                label(SEQUENTIAL),
                target,
            )
        )
    if BATCH_SHARDED in seconds:
        rows.append(
            ratio_row(
                SECTION,
                f"{label(SHARDED)} / {BATCH_SHARDED}, throughput",
                shape(SHARDED),
                seconds[BATCH_SHARDED],
                seconds[SHARDED],
                label(BATCH_SHARDED),
                note="both use every device",
            )
        )
    return rows


def run(cfg) -> list[dict]:
    """All rows of the section (see the module docstring)."""
    return step_rows(cfg) + seeds_rows(cfg)


def cpu_device_count(cfg) -> int:
    """XLA CPU devices to start JAX with: `cfg.cpu_devices`, or one per core."""
    return cfg.cpu_devices or (os.cpu_count() or 1)
