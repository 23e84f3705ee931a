"""Rank collapse and power iteration across depth, at initialisation and after training.

    python -m experiments.rank_collapse --config configs/rank_collapse.py --workdir runs/rc

See `configs/rank_collapse.py` for the sweeps. Each grid point (sweep, attention
kind, architecture, depth, temperature) is one run of `num_seeds` seeds
trained/measured at once; a killed study, re-run with the same command,
skips finished runs, resumes an unfinished training run from its checkpoint,
and ends with the same `summary.json`.

Outputs (in --workdir): config.json, metrics.jsonl, runs/*.json,
summary.json, report.md (tables and each literature prediction with the
measured value and pass/fail), plots/*.png.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags

from attnjax import nn, tasks, training
from attnjax.analysis.depth import depth_profile
from attnjax.workdir import Workdir, atomic_write_json, read_json
from configs import rank_collapse as default_config
from experiments import rank_collapse_report
from experiments.cli import flags_parser

ARCHITECTURES = {
    "attention_only": dict(skip=False, mlp=False, norm=None),
    "attention_mlp": dict(skip=False, mlp=True, norm=None),
    "skip": dict(skip=True, mlp=False, norm=None),
    "skip_mlp": dict(skip=True, mlp=True, norm="pre"),
    "post_ln": dict(skip=True, mlp=True, norm="post"),
    # The `skip` network with its residual branch scaled by 1/sqrt(L) (Noci et al.
    # 2022). Without MLP and norm, so that the comparison with `skip` isolates
    # the scaling (a GELU MLP adds the same vector to every token at
    # initialisation, which lowers the residual whatever attention does).
    "skip_scaled": dict(skip=True, mlp=False, norm=None, residual_scale="inv_sqrt_depth"),
}
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


def log(message: str) -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------
# Config -> runs (all validation happens here, before anything compiles)


def _check_sweep(name: str, sweep) -> None:
    for depth in sweep.depths:
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"{name}.depths must be positive ints, got {tuple(sweep.depths)}")
    for arch in sweep.architectures:
        if arch not in ARCHITECTURES:
            raise ValueError(f"{name}.architectures: unknown {arch!r}; valid: {tuple(ARCHITECTURES)}")
    for kind in sweep.attention_kinds:
        if kind not in KINDS:
            raise ValueError(f"{name}.attention_kinds: unknown {kind!r}; valid: {KINDS}")
    for temperature in sweep.temperatures:
        if not temperature > 0:
            raise ValueError(f"{name}.temperatures must be > 0, got {tuple(sweep.temperatures)}")


def run_specs(config) -> list[RunSpec]:
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


def make_task(config):
    kwargs = {k: v for k, v in config.task.items() if k != "name"}
    return tasks.make_task(config.task.name, **kwargs)


COMPUTE_DTYPES = ("float32", "bfloat16")


def model_config(config, spec: RunSpec, task) -> nn.TransformerConfig:
    m = config.model
    if m.dtype not in COMPUTE_DTYPES:
        raise ValueError(f"model.dtype must be one of {COMPUTE_DTYPES}, got {m.dtype!r}")
    return nn.TransformerConfig(
        num_layers=spec.depth, features=m.features, num_heads=m.num_heads, vocab_size=task.vocab_size,
        max_len=task.seq_len, positions=m.positions, causal=spec.causal, temperature=spec.temperature,
        attention_kind=spec.kind, feature_map=m.feature_map, num_features=m.num_features,
        mlp_features=m.mlp_ratio * m.features, dtype=jnp.dtype(m.dtype), param_dtype=jnp.float32,
        **ARCHITECTURES[spec.architecture],
    )


def make_trainer(config, spec: RunSpec, task) -> training.Trainer:
    t = config.train
    # Init-only studies (steps = 0) still build an optimiser; give it one step.
    optimizer = training.OptimizerConfig(
        learning_rate=t.learning_rate, warmup_steps=t.warmup_steps if t.steps else 0,
        total_steps=max(t.steps, 1), weight_decay=t.weight_decay,
    )
    return training.Trainer(model_config(config, spec, task), optimizer, task, t.batch_size)


def validate(config) -> list[RunSpec]:
    """Every check that can fail, before any compilation."""
    if config.num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1, got {config.num_seeds}")
    for name in ("steps", "batch_size", "log_every", "eval_batches"):
        minimum = 0 if name == "steps" else 1
        if config.train[name] < minimum:
            raise ValueError(f"train.{name} must be >= {minimum}, got {config.train[name]}")
    if config.measure_batch_size < 1:
        raise ValueError(f"measure_batch_size must be >= 1, got {config.measure_batch_size}")
    task = make_task(config)
    specs = run_specs(config)
    for spec in specs:
        make_trainer(config, spec, task)  # raises on a bad model/optimiser config
    return specs


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


def _forward_fn(trainer: training.Trainer):
    """state `[S, ...]`, inputs `[B, T]` -> hidden `[S, L+1, B, T, D]`, attention `[S, L, B, H, T, T]`."""

    def forward(state, inputs):
        _, inter = trainer.model(state)(inputs, return_intermediates=True)
        return inter["hidden"], inter["attention"]

    return jax.jit(jax.vmap(forward, in_axes=(0, None)))


def _measure(forward, state, inputs) -> dict:
    return _profile_seeds(*forward(state, inputs))


def _seed_rows(metrics: dict, step: int, phase: str, field: str) -> list[dict]:
    """One row per (seed, metric): arrays `[S, ...]` -> `{..., "seed": s, "metric": name, field: value}`.

    `field` is "values" for per-layer profiles and "value" for scalars.
    """
    rows = []
    for name, values in metrics.items():
        values = np.asarray(values)
        for seed in range(values.shape[0]):
            rows.append({"phase": phase, "step": step, "seed": seed, "metric": name, field: values[seed]})
    return rows


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


def measure_run(config, spec: RunSpec, task, progress=log) -> tuple[dict, list[dict]]:
    """An init-sweep run: per-layer metrics (and optionally gradient norms) of untrained models."""
    trainer = make_trainer(config, spec, task)
    return {"spec": dataclasses.asdict(spec)}, _init_rows(config, trainer, task, config.init_sweep.grad_norms)


class _Progress:
    """A training run's metric rows so far and the step they reach, saved after each checkpoint."""

    def __init__(self, path: str):
        self.path = path
        saved = read_json(path) if os.path.exists(path) else {"step": None, "rows": []}
        self.step, self.rows = saved["step"], saved["rows"]

    def save(self, step: int) -> None:
        atomic_write_json(self.path, {"step": step, "rows": self.rows})


def train_run(config, spec: RunSpec, task, wd: Workdir, progress=log) -> tuple[dict, list[dict]]:
    """A train-sweep run; resumable from its checkpoint after a kill."""
    trainer = make_trainer(config, spec, task)
    runner = training.SeedsRunner(trainer)
    init_keys, data_keys, eval_keys, measure_key = _keys(config)
    forward = _forward_fn(trainer)
    inputs = task.batch(measure_key, config.measure_batch_size).inputs
    ckpt_dir = wd.file("checkpoints", spec.run_id)
    checkpointer = training.Checkpointer(ckpt_dir)
    saved = _Progress(os.path.join(ckpt_dir, "progress.json"))
    state = runner.init(init_keys)
    if saved.step is not None and saved.step in checkpointer.all_steps():
        # The rows reach `saved.step`; a later checkpoint (a kill between the
        # two saves) is ignored, so no measurement is lost or repeated.
        state = checkpointer.restore(state, saved.step)
        progress(f"  resumed from step {saved.step}")
    else:
        saved.rows = _init_rows(config, trainer, task, with_grads=True)

    def on_log(step, state, metrics):
        saved.rows += _seed_rows(metrics, step, "train", "value")
        saved.rows += _seed_rows(_measure(forward, state, inputs), step, "train", "values")

    class _SavingCheckpointer:
        def save(self, step, state):
            checkpointer.save(step, state)
            saved.save(step)

    state = training.fit(runner, state, data_keys, total_steps=config.train.steps, log_every=config.train.log_every,
                         on_log=on_log, checkpointer=_SavingCheckpointer(), progress=progress)
    eval_metrics = runner.evaluate(state, training.batch_keys(eval_keys, 0, config.train.eval_batches))
    rows = saved.rows + _seed_rows(eval_metrics, config.train.steps, "final", "value")
    record = {"spec": dataclasses.asdict(spec), "diverged": np.asarray(state.diverged),
              "chance_accuracy": task.chance_accuracy}
    checkpointer.close()
    return record, rows


# --------------------------------------------------------------------------
# The study


def run(config, workdir: str, progress=log) -> dict:
    """Run (or resume) the study; returns the summary."""
    specs = validate(config)
    task = make_task(config)
    wd = Workdir(workdir)
    wd.write_config(config.to_dict())
    todo = [s for s in specs if not wd.is_done(s.run_id)]
    progress(f"rank_collapse: {len(specs)} runs ({len(specs) - len(todo)} already done), "
             f"{config.num_seeds} seeds each, jax backend {jax.default_backend()}")
    for i, spec in enumerate(todo, 1):
        start = time.perf_counter()
        progress(f"[{i}/{len(todo)}] {spec.run_id}")
        if spec.sweep == "init":
            record, rows = measure_run(config, spec, task, progress)
        else:
            record, rows = train_run(config, spec, task, wd, progress)
        wd.finish_run(spec.run_id, record, rows)
        shutil.rmtree(wd.file("checkpoints", spec.run_id), ignore_errors=True)
        progress(f"      done in {time.perf_counter() - start:.1f} s")
    summary = rank_collapse_report.summarize(config, specs, wd)
    wd.write_summary(summary)
    rank_collapse_report.write_plots(summary, wd)
    plots = sorted(os.listdir(wd.file("plots")))
    report = wd.write_report(rank_collapse_report.report_markdown(config, summary, plots))
    progress(f"report: {report}")
    return summary


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # checkpointing logs every save at INFO
    run(flags.FLAGS.config, flags.FLAGS.workdir)


if __name__ == "__main__":
    # Flags are defined only when this module is the program, so several
    # studies can be imported together (tests) without clashing flag names.
    config_flags.DEFINE_config_file("config", None, "study config file (configs/rank_collapse.py)", lock_config=True)
    flags.DEFINE_string("workdir", None, "output directory")
    flags.mark_flags_as_required(["config", "workdir"])
    app.run(main, flags_parser=flags_parser(default_config.get_config))
