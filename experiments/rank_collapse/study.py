"""Rank collapse and power iteration across depth, at initialisation and after training.

    python -m experiments.rank_collapse --config configs/rank_collapse.py --workdir runs/rc

See `configs/rank_collapse.py` for the sweeps. Each grid point (sweep, attention
kind, architecture, depth, temperature, embedding std) is one run of
`num_seeds` seeds trained/measured at once; a killed study, re-run with the
same command, skips finished runs, resumes an unfinished training run from
its checkpoint, and ends with the same `summary.json`.

Rows (one per seed and metric): `{"phase": "init" | "train" | "final",
"step", "seed", "metric", "values"}` for per-layer profiles (`[L + 1]` or `[L]`,
see `attnjax.analysis.depth.depth_profile`; `[B, ...]` per example for the
`dong/*` metrics of attention-only networks; `[E, L, B]` for the
`identity/residual` of the runs in Dong et al.'s setting (`scaling.py`, one
row per eps of `EPS`); `[L + 1]` for the `chain/residual_fro` of causal
attention-only networks (`chain.py`); `[L]` for the Noci sweep's
`layer_grad_norm/*`; `[L, num_paths]` for `path_residual`; `[L + 1]` and a
scalar `rank_ln` for Wu et al.'s LayerNorm constructions, see `layernorm.py`)
and `"value"` for scalars (training metrics, loss, accuracy, `diverged`,
`chance_accuracy`, and the `recall/*` counts of `recall.py` on the held-out
batches).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attnjax import nn, tasks, training
from attnjax.analysis import collapse
from attnjax.analysis.depth import depth_profile
from attnjax.analysis.markov import rank_one_residual
from attnjax.analysis.residual import residual_norm, residual_ratio
from attnjax.compilation import jit_fast
from experiments import architectures
from experiments.lab import models
from experiments.lab.workdir import RunDir
from experiments.rank_collapse import chain, layernorm, recall, scaling
from experiments.rank_collapse.constants import EPS, SWEEPS

KINDS = ("softmax", "linear")
# The switches of an architecture by name (the reports read them as this study's).
architecture_fields = architectures.architecture
is_attention_only = architectures.is_attention_only


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One grid point: which sweep, attention kind, architecture, depth, temperature, mask, embedding std and
    local-mask width."""

    sweep: str  # one of SWEEPS
    kind: str
    architecture: str
    depth: int
    temperature: float
    causal: bool
    embedding_std: Optional[float]  # None: nnx.Embed's default 1/sqrt(D)
    window: Optional[int] = (
        None  # W: query t sees keys t - W < s (<= t if causal); None: the full mask
    )

    @property
    def run_id(self) -> str:
        std = "default" if self.embedding_std is None else f"{self.embedding_std:g}"
        width = "" if self.window is None else f"-w{self.window}"
        return (
            f"{self.sweep}-{self.kind}-{self.architecture}-L{self.depth:02d}-t{self.temperature:g}-e{std}"
            f"{width}"
        )


SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(RunSpec))


# --------------------------------------------------------------------------
# Config -> runs (all validation happens here, before anything compiles)


def _check_sweep(name: str, sweep) -> None:
    for depth in sweep.depths:
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"{name}.depths must be positive ints, got {tuple(sweep.depths)}")
    architectures.check_architectures(f"{name}.architectures", sweep.architectures)
    for kind in sweep.attention_kinds:
        if kind not in KINDS:
            raise ValueError(f"{name}.attention_kinds: unknown {kind!r}; valid: {KINDS}")
    for temperature in sweep.temperatures:
        if not temperature > 0:
            raise ValueError(f"{name}.temperatures must be > 0, got {tuple(sweep.temperatures)}")
    for std in sweep.embedding_stds:
        if std is not None and (
            isinstance(std, bool) or not isinstance(std, (int, float)) or not std > 0
        ):
            raise ValueError(
                f"{name}.embedding_stds must be None or numbers > 0, got {tuple(sweep.embedding_stds)}"
            )
    seeds = sweep.get("num_seeds")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise ValueError(f"{name}.num_seeds must be None or an int >= 1, got {seeds!r}")
    if sweep.get("float64") not in (None, True, False):
        raise ValueError(f"{name}.float64 must be None, True or False, got {sweep.float64!r}")
    for pair in sweep.get("exclude", ()):
        if len(pair) != 2 or not isinstance(pair[1], int):
            raise ValueError(
                f"{name}.exclude must hold (architecture, depth) pairs, got {tuple(sweep.exclude)}"
            )
    for window in sweep.get("windows", (None,)):
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise ValueError(
                f"{name}.windows must be None or ints >= 1, got {tuple(sweep.windows)}"
            )
    for pair in sweep.get("architecture_seeds", ()):
        if (
            len(pair) != 2
            or isinstance(pair[1], bool)
            or not isinstance(pair[1], int)
            or pair[1] < 1
        ):
            raise ValueError(
                f"{name}.architecture_seeds must hold (architecture, seeds >= 1) pairs, got "
                f"{tuple(sweep.architecture_seeds)}"
            )


def _layernorm_specs(config) -> list[RunSpec]:
    """Wu et al.'s LayerNorm constructions (`config.layernorm`), one run each."""
    block = config.layernorm
    for name in block.constructions:
        if name not in layernorm.CONSTRUCTIONS:
            raise ValueError(
                f"layernorm.constructions: unknown {name!r}; valid: {layernorm.CONSTRUCTIONS}"
            )
    for field in ("num_layers", "num_tokens", "dim", "num_seeds"):
        if isinstance(block[field], bool) or not isinstance(block[field], int) or block[field] < 1:
            raise ValueError(f"layernorm.{field} must be an int >= 1, got {block[field]!r}")
    return [
        RunSpec("layernorm", "softmax", name, block.num_layers, 1.0, True, None)
        for name in block.constructions
    ]


def _grid(config) -> list[RunSpec]:
    specs = []
    for sweep_name in SWEEPS:
        sweep = config[f"{sweep_name}_sweep"]
        _check_sweep(f"{sweep_name}_sweep", sweep)
        exclude = {(a, d) for a, d in sweep.get("exclude", ())}
        for kind in sweep.attention_kinds:
            for arch in sweep.architectures:
                for depth in sweep.depths:
                    if (arch, depth) in exclude:
                        continue
                    for temperature in sweep.temperatures:
                        for std in sweep.embedding_stds:
                            for window in sweep.get("windows", (None,)):
                                specs.append(
                                    RunSpec(
                                        sweep_name,
                                        kind,
                                        arch,
                                        depth,
                                        float(temperature),
                                        bool(sweep.causal),
                                        None if std is None else float(std),
                                        window,
                                    )
                                )
    return specs + _layernorm_specs(config)


@functools.lru_cache(maxsize=None)
def _normal_init(std: float):
    """One initialiser object per std, so equal specs give equal (cacheable) trainers."""
    return nnx.initializers.normal(stddev=std)


def make_trainer(config, spec: RunSpec, task, *, float64: bool = False) -> training.Trainer:
    overrides = {}
    if spec.embedding_std is not None:
        overrides["embedding_init"] = _normal_init(spec.embedding_std)
    if float64:
        overrides.update(dtype=jnp.float64, param_dtype=jnp.float64)
    if spec.window is not None:
        overrides["window"] = spec.window
    return models.make_trainer(
        config.model,
        config.train,
        task,
        architecture=spec.architecture,
        depth=spec.depth,
        causal=spec.causal,
        temperature=spec.temperature,
        kind=spec.kind,
        overrides=overrides,
    )


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
    if config.num_paths < 1:
        raise ValueError(f"num_paths must be >= 1, got {config.num_paths}")
    task = models.make_task(config.task)
    grid = _grid(config)
    for spec in grid:
        if spec.sweep != "layernorm":
            make_trainer(config, spec, task)  # raises on a bad model/optimiser config
    return grid


# --------------------------------------------------------------------------
# Measuring and training one run


def num_seeds(config, sweep: str, architecture: Optional[str] = None) -> int:
    """The seeds of a sweep's runs (of `architecture`): the sweep's `architecture_seeds` entry for it, else
    the sweep's `num_seeds`, else the study's."""
    block = config.layernorm if sweep == "layernorm" else config[f"{sweep}_sweep"]
    own = dict(block.get("architecture_seeds", ()))
    return own.get(architecture) or block.get("num_seeds") or config.num_seeds


def _keys(config, seeds: Optional[int] = None):
    """Init, data, eval keys `[seeds]` (default `config.num_seeds`) and the measurement key; the same
    for every run, so runs differ only in what the config makes them differ in (the first seeds of a
    larger sweep are those of a smaller one)."""
    root = jax.random.key(config.seed)

    def split(i):
        return jax.random.split(jax.random.fold_in(root, i), seeds or config.num_seeds)

    return split(0), split(1), split(2), jax.random.fold_in(root, 3)


@functools.cache
def _profile_seeds(causal: bool):
    """One compiled depth profile per mask (and array shape), shared by every run of the same depth.

    The measurement programs of a run (this profile, the untrained probe, the trained model's forward
    pass, paths and predictions) run once per run or log step: they are compiled fast, not optimised for
    speed (`compilation.jit_fast`)."""
    return jit_fast(jax.vmap(functools.partial(depth_profile, causal=causal)))


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

    return jit_fast(jax.vmap(forward, in_axes=(0, None)))


def _seed_rows(metrics: dict, step: int, phase: str, field: str) -> list[dict]:
    """One row per (seed, metric): arrays `[S, ...]` -> `{"phase", "step", "seed", "metric", field: value}`.

    `field` is "values" for per-layer profiles and "value" for scalars.
    """
    rows = []
    for name, values in metrics.items():
        values = np.asarray(values)
        for seed in range(values.shape[0]):
            rows.append(
                {"phase": phase, "step": step, "seed": seed, "metric": name, field: values[seed]}
            )
    return rows


def _dong_metrics(params, hidden, num_heads: int, temperature: float) -> dict:
    """Dong et al.'s bound, layer by layer, for one seed of an attention-only network.

    hidden `[L + 1, B, T, D]` -> `dong/constant` `[L]` (`c_l` of
    `collapse.dong_constant`, γ = 1, the temperature dividing W_QK),
    `dong/bound` `[B, L]` (`c_l ‖res(X_(l-1))‖³`), `dong/residual_abs` `[B, L + 1]`
    and `dong/residual` `[B, L + 1]` (absolute and relative composite-norm
    residuals, per example).
    """
    kernels = nn.params.attention_params(params, num_heads)  # fused or separate W_qkv alike

    def kernel(name):
        return kernels[name]["kernel"]

    w_qk, w_v = jax.vmap(functools.partial(collapse.head_matrices, num_heads=num_heads))(
        kernel("query"), kernel("key"), kernel("value"), kernel("out")
    )
    head_dim = kernel("query").shape[-1] // num_heads
    constant = collapse.dong_constant(w_qk, w_v, head_dim) / temperature  # [L]
    res_abs = residual_norm(hidden, "l1inf")  # [L + 1, B]
    bound = constant[:, None] * res_abs[:-1] ** 3  # [L, B]
    return {
        "dong/constant": constant,
        "dong/bound": bound.T,
        "dong/residual_abs": res_abs.T,
        "dong/residual": residual_ratio(hidden, "l1inf").T,
    }


@_cached
def _init_probe(trainer: training.Trainer, with_grads: bool, dong: bool, identity: bool = False):
    """keys `[S]`, inputs `[B, T]`, batches `[S, B, T]` -> (hidden, attention, per-layer gradient norms of the
    attention projections on each seed's gradient batch (`training.layer_grad_norms`) or {}, the
    attention-only metrics or {}).

    The attention-only metrics (`dong`): Dong et al.'s bound (`_dong_metrics`);
    with `identity` (a bidirectional run in Dong et al.'s setting): the
    eps-scaling identity of every layer (`identity/residual`,
    `scaling.layer_residuals` at `EPS`); causal with the full mask: the exact
    uniform causal chain on the same inputs (`chain/residual_fro`,
    `chain.chain_residuals`). One program per run; the gradient norms roughly
    double its compile time, so only sweeps with `grad_norms` compute them.
    """
    config = trainer.model_config
    block = config.block

    def attention_only_metrics(state, hidden):
        out = _dong_metrics(state.params, hidden, block.num_heads, block.attention.temperature)
        if identity:
            blocks = trainer.model(state).blocks
            out["identity/residual"] = scaling.layer_residuals(blocks, hidden, EPS)
        if config.causal and block.attention.window is None:
            out["chain/residual_fro"] = chain.chain_residuals(hidden[0], config.num_layers)
        return out

    def probe(key, inputs, batch):
        state = trainer.init(key, with_optimizer=False)
        _, inter = trainer.model(state)(inputs, return_intermediates=True)
        grads = trainer.gradients(state, batch)[1]
        norms = (
            training.layer_grad_norms(grads, block.num_heads, block.attention.num_kv_heads)
            if with_grads
            else {}
        )
        extra = attention_only_metrics(state, inter["hidden"]) if dong else {}
        return inter["hidden"], inter["attention"], norms, extra

    return jit_fast(jax.vmap(probe, in_axes=(0, None, 0)))


def _first_batches(task, batch_size: int, data_keys):
    """The first `batch_size` examples of every seed's training data, `[S, B, T]` (the task caches its compiled
    sampler)."""
    batches = [task.batch(k, batch_size) for k in training.batch_keys(data_keys, 0, 1)[0]]
    return jax.tree.map(lambda *x: jnp.stack(x), *batches)


def is_dong_setting(config, spec: RunSpec) -> bool:
    """Whether `spec` is a run in Dong et al.'s setting: untrained bidirectional attention only (softmax) at
    `config.dong_embedding_std` (else the init sweep's first std), where the eps-scaling identity is measured."""
    stds = tuple(config.init_sweep.embedding_stds)
    std = config.get("dong_embedding_std", stds[0] if stds else None)
    return (
        is_attention_only(spec.architecture)
        and spec.kind == "softmax"
        and not spec.causal
        and spec.embedding_std == std
    )


def _init_rows(
    config, trainer, task, spec: RunSpec, with_grads: bool, dong: bool = False
) -> list[dict]:
    """Rows of the untrained seeds: the depth profile, Dong et al.'s metrics (and in their setting,
    `is_dong_setting`, the eps-scaling identity) and per-layer gradient norms when asked (of the training
    loss on the first `measure_batch_size` examples of each seed's data)."""
    init_keys, data_keys, _, measure_key = _keys(
        config, num_seeds(config, spec.sweep, spec.architecture)
    )
    inputs = task.batch(measure_key, config.measure_batch_size).inputs
    batches = _first_batches(task, config.measure_batch_size, data_keys)
    identity = dong and is_dong_setting(config, spec)
    hidden, attention, norms, extra = _init_probe(trainer, with_grads, dong, identity)(
        init_keys, inputs, batches
    )
    metrics = {**_profile_seeds(spec.causal)(hidden, attention), **extra, **norms}
    return _seed_rows(metrics, 0, "init", "values")


def measure_run(config, spec: RunSpec, task) -> list[dict]:
    """An untrained run: per-layer metrics (in float64 when the sweep's `float64`, else the study's
    `measure_float64`, says so), Dong et al.'s bound for attention-only softmax networks, and per-layer
    gradient norms when the sweep asks."""
    sweep = config[f"{spec.sweep}_sweep"]
    dong = is_attention_only(spec.architecture) and spec.kind == "softmax"
    float64 = config.measure_float64 if sweep.get("float64") is None else sweep.float64
    with jax.enable_x64(True) if float64 else contextlib.nullcontext():
        trainer = make_trainer(config, spec, task, float64=float64)
        rows = _init_rows(config, trainer, task, spec, sweep.grad_norms, dong)
    return rows


@_cached
def _paths_fn(trainer: training.Trainer, num_paths: int):
    """keys `[L]`, attention `[L, B, H, T, T]` of one seed -> Frobenius rank-one residual `[L, num_paths]`
    of single-head path products of every length k = 1..L (row k-1)."""
    config = trainer.model_config
    num_layers = config.num_layers

    def one_length(key, attention, length):
        paths = collapse.sample_paths(
            key,
            num_layers=num_layers,
            num_heads=config.block.num_heads,
            length=length,
            num_paths=num_paths,
            num_examples=attention.shape[1],
        )
        products = collapse.path_products(
            attention, paths["layers"], paths["heads"], paths["examples"]
        )
        return rank_one_residual(products).best

    def per_seed(keys, attention):
        return jnp.stack([one_length(keys[k - 1], attention, k) for k in range(1, num_layers + 1)])

    return jit_fast(jax.vmap(per_seed, in_axes=(None, 0)))


def _path_rows(config, trainer, forward, state, inputs) -> list[dict]:
    """Dong et al.'s path-length experiment on the trained seeds (one key per length, shared by seeds)."""
    keys = jax.random.split(
        jax.random.fold_in(jax.random.key(config.seed), 4), trainer.model_config.num_layers
    )
    _, attention = forward(state, inputs)
    return _seed_rows(
        {"path_residual": _paths_fn(trainer, config.num_paths)(keys, attention)},
        config.train.steps,
        "final",
        "values",
    )


@_cached
def _predict_fn(trainer: training.Trainer):
    """state `[S, ...]`, inputs `[S, B, T]` -> the argmax token `[S, B, T]` of each seed."""

    def predict(state, inputs):
        return jnp.argmax(trainer.model(state)(inputs), axis=-1)

    return jit_fast(jax.vmap(predict))


def _recall_rows(config, trainer, task, state, eval_keys) -> dict:
    """`recall.scores` of the trained seeds, summed over the held-out batches `runner.evaluate` reads
    (the same keys): `{"recall/<count>": [S]}`; `{}` unless the task is associative recall."""
    if not isinstance(task, tasks.AssociativeRecall):
        return {}
    predict = _predict_fn(trainer)
    totals = {}
    for keys in training.batch_keys(eval_keys, 0, config.train.eval_batches):
        batch = jax.vmap(lambda key: task.batch(key, trainer.batch_size))(keys)
        counts = recall.scores(
            predict(state, batch.inputs),
            batch.inputs,
            batch.targets,
            batch.weights,
            task.num_pairs,
            task.vocab_size,
        )
        for name, value in counts.items():
            totals[name] = totals.get(name, 0) + np.asarray(value)
    return {f"recall/{name}": value for name, value in totals.items()}


def train_run(config, spec: RunSpec, task, run: RunDir) -> list[dict]:
    """A train-sweep run; resumable from the checkpoints in its scratch directory after a kill."""
    trainer = make_trainer(config, spec, task)
    runner = _runner(trainer)
    init_keys, data_keys, eval_keys, measure_key = _keys(
        config, num_seeds(config, spec.sweep, spec.architecture)
    )
    forward = _forward_fn(trainer)
    profile = _profile_seeds(spec.causal)
    inputs = task.batch(measure_key, config.measure_batch_size).inputs
    checkpointer = training.Checkpointer(run.path)
    state = runner.init(init_keys)
    if checkpointer.latest_step() is not None:  # rows and state from the same step (one orbax save)
        state = checkpointer.restore(state)
        run.log(f"  resumed from step {checkpointer.latest_step()}")
    else:  # the initial profile with the forward pass that every log step uses (gradients: the Noci sweep)
        checkpointer.rows = _seed_rows(profile(*forward(state, inputs)), 0, "init", "values")

    def on_log(step, state, metrics):
        checkpointer.rows += _seed_rows(metrics, step, "train", "value")
        checkpointer.rows += _seed_rows(profile(*forward(state, inputs)), step, "train", "values")

    state = training.fit(
        runner,
        state,
        data_keys,
        total_steps=config.train.steps,
        log_every=config.train.log_every,
        on_log=on_log,
        checkpointer=checkpointer,
        progress=run.log,
    )
    evaluation = runner.evaluate(
        state, training.batch_keys(eval_keys, 0, config.train.eval_batches)
    )
    final = {
        **evaluation,
        **_recall_rows(config, trainer, task, state, eval_keys),
        "diverged": np.asarray(state.diverged),
        "chance_accuracy": np.full(len(init_keys), task.chance_accuracy),
    }
    checkpointer.close()
    with_skips = architecture_fields(spec.architecture)["skip"]
    paths = _path_rows(config, trainer, forward, state, inputs) if with_skips else []
    return checkpointer.rows + _seed_rows(final, config.train.steps, "final", "value") + paths


def layernorm_run(config, spec: RunSpec) -> list[dict]:
    """Wu et al.'s construction `spec.architecture`, in float64: per seed, the consensus distance after every
    layer with and without LayerNorm and the rank with it (`layernorm.measure`)."""
    block = config.layernorm
    with jax.enable_x64(True):
        metrics = layernorm.measure(
            spec.architecture,
            _keys(config, block.num_seeds)[0],
            block.num_tokens,
            block.dim,
            spec.depth,
        )
    return _seed_rows(metrics, 0, "init", "values")


def run_one(spec: RunSpec, config, run: RunDir) -> list[dict]:
    if spec.sweep == "layernorm":
        return layernorm_run(config, spec)
    task = models.make_task(config.task)
    return (
        train_run(config, spec, task, run)
        if spec.sweep == "train"
        else measure_run(config, spec, task)
    )
