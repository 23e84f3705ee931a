"""Rank collapse and power iteration across depth, at initialisation and after training.

    python -m experiments.rank_collapse --config configs/rank_collapse.py --workdir runs/rc

See `configs/rank_collapse.py` for the sweeps. Each grid point (sweep, attention
kind, architecture, depth, temperature) is one run of `num_seeds` seeds
trained/measured at once; a killed study, re-run with the same command,
skips finished runs, resumes an unfinished training run from its checkpoint,
and ends with the same `summary.json`.

Rows (one per seed and metric): `{"phase": "init" | "train" | "final",
"step", "seed", "metric", "values"}` for per-layer profiles (`[L + 1]` or `[L]`,
see `attnjax.analysis.depth.depth_profile`) and `"value"` for scalars
(gradient norms, loss, accuracy, `diverged`, `chance_accuracy`).
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from attnjax import training
from attnjax.analysis.depth import depth_profile
from attnjax.workdir import RunDir
from experiments import models

KINDS = ("softmax", "linear")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One grid point: which sweep, attention kind, architecture, depth, temperature."""

    sweep: str  # 'init' or 'train'
    kind: str
    architecture: str
    depth: int
    temperature: float
    causal: bool

    @property
    def run_id(self) -> str:
        return f"{self.sweep}-{self.kind}-{self.architecture}-L{self.depth:02d}-t{self.temperature:g}"


SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(RunSpec))


# --------------------------------------------------------------------------
# Config -> runs (all validation happens here, before anything compiles)


def _check_sweep(name: str, sweep) -> None:
    for depth in sweep.depths:
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"{name}.depths must be positive ints, got {tuple(sweep.depths)}")
    models.check_architectures(f"{name}.architectures", sweep.architectures)
    for kind in sweep.attention_kinds:
        if kind not in KINDS:
            raise ValueError(f"{name}.attention_kinds: unknown {kind!r}; valid: {KINDS}")
    for temperature in sweep.temperatures:
        if not temperature > 0:
            raise ValueError(f"{name}.temperatures must be > 0, got {tuple(sweep.temperatures)}")


def _grid(config) -> list[RunSpec]:
    specs = []
    for sweep_name in ("init", "train"):
        sweep = config[f"{sweep_name}_sweep"]
        _check_sweep(f"{sweep_name}_sweep", sweep)
        for kind in sweep.attention_kinds:
            for arch in sweep.architectures:
                for depth in sweep.depths:
                    for temperature in sweep.temperatures:
                        specs.append(RunSpec(sweep_name, kind, arch, depth, float(temperature), bool(sweep.causal)))
    return specs


def make_trainer(config, spec: RunSpec, task) -> training.Trainer:
    return models.make_trainer(config.model, config.train, task, architecture=spec.architecture, depth=spec.depth,
                               causal=spec.causal, temperature=spec.temperature, kind=spec.kind)


def specs(config) -> list[RunSpec]:
    """Every run of the study; raises ValueError on a bad config, before any compilation."""
    if config.num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1, got {config.num_seeds}")
    for name in ("steps", "batch_size", "log_every", "eval_batches"):
        minimum = 0 if name == "steps" else 1
        if config.train[name] < minimum:
            raise ValueError(f"train.{name} must be >= {minimum}, got {config.train[name]}")
    if config.measure_batch_size < 1:
        raise ValueError(f"measure_batch_size must be >= 1, got {config.measure_batch_size}")
    task = models.make_task(config.task)
    grid = _grid(config)
    for spec in grid:
        make_trainer(config, spec, task)  # raises on a bad model/optimiser config
    return grid


# --------------------------------------------------------------------------
# Measuring and training one run


def _keys(config):
    """Init, data, eval keys `[S]` and the measurement key; the same for every run, so
    runs differ only in what the config makes them differ in."""
    root = jax.random.key(config.seed)
    split = lambda i: jax.random.split(jax.random.fold_in(root, i), config.num_seeds)  # noqa: E731
    return split(0), split(1), split(2), jax.random.fold_in(root, 3)


# One compiled profile per array shape, shared by every run of the same depth.
_profile_seeds = jax.jit(jax.vmap(depth_profile))

# The jitted functions of a run are cached by trainer (a frozen dataclass, equal
# for equal configs), so a run redone in the same process (a resume) does not
# compile them again.
_cached = functools.lru_cache(maxsize=8)


@_cached
def _runner(trainer: training.Trainer) -> training.SeedsRunner:
    return training.SeedsRunner(trainer)


@_cached
def _forward_fn(trainer: training.Trainer):
    """state `[S, ...]`, inputs `[B, T]` -> hidden `[S, L+1, B, T, D]`, attention `[S, L, B, H, T, T]`."""

    def forward(state, inputs):
        _, inter = trainer.model(state)(inputs, return_intermediates=True)
        return inter["hidden"], inter["attention"]

    return jax.jit(jax.vmap(forward, in_axes=(0, None)))


def _seed_rows(metrics: dict, step: int, phase: str, field: str) -> list[dict]:
    """One row per (seed, metric): arrays `[S, ...]` -> `{"phase", "step", "seed", "metric", field: value}`.

    `field` is "values" for per-layer profiles and "value" for scalars.
    """
    rows = []
    for name, values in metrics.items():
        values = np.asarray(values)
        for seed in range(values.shape[0]):
            rows.append({"phase": phase, "step": step, "seed": seed, "metric": name, field: values[seed]})
    return rows


@_cached
def _init_probe(trainer: training.Trainer, with_grads: bool):
    """keys `[S]`, inputs `[B, T]`, batches `[S, B, T]` -> (hidden, attention, gradient norms or {}).

    One program per run; the gradient norms roughly double its compile time,
    so the init sweep computes them only when `init_sweep.grad_norms` is set.
    """

    def probe(key, inputs, batch):
        state = trainer.init(key, with_optimizer=False)
        _, inter = trainer.model(state)(inputs, return_intermediates=True)
        norms = training.grad_norms(trainer.gradients(state, batch)[1]) if with_grads else {}
        return inter["hidden"], inter["attention"], norms

    return jax.jit(jax.vmap(probe, in_axes=(0, None, 0)))


def _first_batches(task, batch_size: int, data_keys):
    """The first training batch of every seed, `[S, B, T]` (the task caches its compiled sampler)."""
    batches = [task.batch(k, batch_size) for k in training.batch_keys(data_keys, 0, 1)[0]]
    return jax.tree.map(lambda *x: jnp.stack(x), *batches)


def _init_rows(config, trainer, task, with_grads: bool) -> list[dict]:
    init_keys, data_keys, _, measure_key = _keys(config)
    inputs = task.batch(measure_key, config.measure_batch_size).inputs
    batches = _first_batches(task, trainer.batch_size, data_keys)
    hidden, attention, norms = _init_probe(trainer, with_grads)(init_keys, inputs, batches)
    return _seed_rows(_profile_seeds(hidden, attention), 0, "init", "values") + _seed_rows(norms, 0, "init", "value")


def measure_run(config, spec: RunSpec, task) -> list[dict]:
    """An init-sweep run: per-layer metrics (and optionally gradient norms) of untrained models."""
    return _init_rows(config, make_trainer(config, spec, task), task, config.init_sweep.grad_norms)


def train_run(config, spec: RunSpec, task, run: RunDir) -> list[dict]:
    """A train-sweep run; resumable from the checkpoints in its scratch directory after a kill."""
    trainer = make_trainer(config, spec, task)
    runner = _runner(trainer)
    init_keys, data_keys, eval_keys, measure_key = _keys(config)
    forward = _forward_fn(trainer)
    inputs = task.batch(measure_key, config.measure_batch_size).inputs
    checkpointer = training.Checkpointer(run.path)
    saved = run.partial()
    state = runner.init(init_keys)
    if saved.step is not None and saved.step in checkpointer.all_steps():
        # The rows reach `saved.step`; a later checkpoint (a kill between the
        # two saves) is ignored, so no measurement is lost or repeated.
        state = checkpointer.restore(state, saved.step)
        run.log(f"  resumed from step {saved.step}")
    else:
        saved.rows = _init_rows(config, trainer, task, with_grads=True)

    def on_log(step, state, metrics):
        saved.rows += _seed_rows(metrics, step, "train", "value")
        saved.rows += _seed_rows(_profile_seeds(*forward(state, inputs)), step, "train", "values")

    class _SavingCheckpointer:
        def save(self, step, state):
            checkpointer.save(step, state)
            saved.save(step)

    state = training.fit(runner, state, data_keys, total_steps=config.train.steps, log_every=config.train.log_every,
                         on_log=on_log, checkpointer=_SavingCheckpointer(), progress=run.log)
    evaluation = runner.evaluate(state, training.batch_keys(eval_keys, 0, config.train.eval_batches))
    final = {**evaluation, "diverged": np.asarray(state.diverged),
             "chance_accuracy": np.full(config.num_seeds, task.chance_accuracy)}
    checkpointer.close()
    return saved.rows + _seed_rows(final, config.train.steps, "final", "value")


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    task = models.make_task(config.task)
    return measure_run(config, spec, task) if spec.sweep == "init" else train_run(config, spec, task, run)
