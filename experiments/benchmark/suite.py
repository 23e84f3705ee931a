"""The benchmark driver: runs the sections, prints tables, writes JSON, Markdown and plots.

    python -m experiments.benchmark --config configs/benchmark.py
    python -m experiments.benchmark --config configs/benchmark.py:smoke --workdir bench_out/smoke
    python -m experiments.benchmark --config configs/benchmark.py --config.sections='("attention","linear")'

Sections (`configs/benchmark.py`): attention, compile, linear, analysis,
training, train_step (attnjax against flax), pretrained (real checkpoints),
streaming (attention statistics without the T x T matrix);
each is a module `experiments/benchmark/<name>.py` with
`run(section_config) -> list[dict]` (and optionally `figure(rows)`, written
as `plots/<name>.png`). Every figure with a target is a ratio against a
reference measured in the same run; such rows carry `ok`.

Outputs in --workdir: `benchmark.json` (environment: device kind, versions,
date; the config; every row), `benchmark.md` (the same as a table) and
`plots/`. Both files are rewritten after each section, so an interrupted
run keeps the sections it finished.
"""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import time

import jax
import jaxlib

from configs import benchmark as default_config
from experiments.benchmark.report import format_table, markdown_report
from experiments.benchmark.training import cpu_device_count
from experiments.benchmark.util import drop_targets
from experiments.lab.models import COMPUTE_DTYPES
from experiments.lab.workdir import atomic_write_figure, atomic_write_json, atomic_write_text

COLUMNS = (
    "section",
    "name",
    "shape",
    "seconds",
    "temp_mb",
    "reference",
    "ratio",
    "target",
    "ok",
    "tflops",
    "pct_peak",
    "tokens_per_s",
    "note",
)


def environment() -> dict:
    """Device kind, versions and date, stored with every result file."""
    device = jax.devices()[0]
    return {
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "date": datetime.date.today().isoformat(),
    }


def validate(config) -> None:
    """Every config check, before any section runs."""
    valid = default_config.SECTIONS
    unknown = [s for s in config.sections if s not in valid]
    if unknown or not config.sections:
        raise ValueError(
            f"sections must be a non-empty subset of {valid}, got {tuple(config.sections)}"
        )
    for name in ("short", "long"):
        if config.linear[name] not in config.linear.lengths:
            raise ValueError(
                f"linear.{name}={config.linear[name]} must be one of "
                f"linear.lengths={tuple(config.linear.lengths)}"
            )
    dtypes = tuple(config.training.dtypes)
    if not dtypes or dtypes[0] != "float32" or not set(dtypes) <= set(COMPUTE_DTYPES):
        raise ValueError(
            f"training.dtypes must start with 'float32' (the reference) and be from {COMPUTE_DTYPES}, "
            f"got {dtypes}"
        )


def start_cpu_devices(config) -> None:
    """One XLA CPU device per core, so the training section can spread seeds over the cores.

    Only possible before JAX starts its CPU backend, and skipped when
    XLA_FLAGS already fixes the device count.
    """
    if (
        "training" not in config.sections
        or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
    ):
        return
    try:
        jax.config.update("jax_num_cpu_devices", cpu_device_count(config.training))
    except RuntimeError:  # the backend is already running (an embedding program started it)
        pass


def write_outputs(workdir: str, payload: dict) -> None:
    atomic_write_json(os.path.join(workdir, "benchmark.json"), payload)
    atomic_write_text(os.path.join(workdir, "benchmark.md"), markdown_report(payload))


def run(config, workdir: str, progress=print) -> dict:
    """Run the configured sections; returns the payload written to `workdir/benchmark.json`."""
    validate(config)
    payload = {"environment": environment(), "config": config.to_dict(), "rows": []}
    env = payload["environment"]
    progress(
        f"benchmark: {env['device_kind']} ({env['backend']}, {env['device_count']} devices), "
        f"jax {env['jax']}, sections {tuple(config.sections)}"
    )
    plots = os.path.join(workdir, "plots")
    os.makedirs(plots, exist_ok=True)
    for name in config.sections:
        progress(f"[benchmark] section {name} ...")
        start = time.perf_counter()
        module = importlib.import_module(f"experiments.benchmark.{name}")
        rows = module.run(config[name])
        rows = rows if config.check_targets else drop_targets(rows)
        payload["rows"] += rows
        progress(format_table(rows, COLUMNS))
        progress(f"[benchmark] section {name} done in {time.perf_counter() - start:.1f} s")
        figure = module.figure(rows) if hasattr(module, "figure") else None
        if figure is not None:
            atomic_write_figure(os.path.join(plots, f"{name}.png"), figure, dpi=120)
            progress(f"plot: {os.path.join(plots, name + '.png')}")
        write_outputs(workdir, payload)
    failed = [r["name"] for r in payload["rows"] if r.get("ok") is False]
    met = sum(r.get("ok") is True for r in payload["rows"])
    progress(
        f"wrote {workdir}/benchmark.json and benchmark.md; targets met: {met}, missed: {len(failed)} {failed}"
    )
    return payload
