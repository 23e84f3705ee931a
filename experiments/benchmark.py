"""One entry point for every benchmark section; prints a table and writes JSON.

    python -m experiments.benchmark                      # every section
    python -m experiments.benchmark --sections=attention --quick
    python -m experiments.benchmark --out=experiments/results/cpu.json

Each section is a module `experiments/bench_<name>.py` with
`run(quick: bool) -> list[dict]`. Figures are ratios against a reference
measured in the same run; rows with a target carry `ok`.
"""
from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import sys

import jax
from absl import app, flags

from experiments.bench_util import format_table

SECTIONS = ("attention", "linear", "analysis")
COLUMNS = ("section", "name", "shape", "seconds", "temp_mb", "reference", "ratio", "target", "ok", "tflops", "note")

_SECTIONS = flags.DEFINE_list("sections", list(SECTIONS), f"sections to run, from {SECTIONS}")
_QUICK = flags.DEFINE_bool("quick", False, "small sizes: a smoke run in seconds")
_OUT = flags.DEFINE_string("out", "bench_out/benchmark.json", "where to write the JSON results")


def environment() -> dict:
    """Device kind, versions and date, stored with every result file."""
    import jaxlib

    device = jax.devices()[0]
    return {
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "date": datetime.date.today().isoformat(),
    }


def run_sections(sections, quick: bool) -> list[dict]:
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown benchmark sections {unknown}; valid: {list(SECTIONS)}")
    rows = []
    for name in sections:
        print(f"[benchmark] section {name} ...", file=sys.stderr, flush=True)
        module = importlib.import_module(f"experiments.bench_{name}")
        rows += module.run(quick=quick)
    return rows


def write_json(path: str, payload: dict) -> None:
    """Atomic write: a reader never sees a half-written file."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, default=float)
    os.replace(tmp, path)


def main(argv):
    del argv
    env = environment()
    rows = run_sections(_SECTIONS.value, _QUICK.value)
    print(f"device: {env['device_kind']} ({env['backend']}), jax {env['jax']}, {env['date']}")
    print(format_table(rows, COLUMNS))
    write_json(_OUT.value, {"environment": env, "quick": _QUICK.value, "rows": rows})
    failed = [r["name"] for r in rows if r.get("ok") is False]
    print(f"wrote {_OUT.value}; targets met: {sum(r.get('ok') is True for r in rows)}, missed: {len(failed)} {failed}")


if __name__ == "__main__":
    app.run(main)
