"""An experiment's working directory: atomic files, a metrics log, resumable runs.

Layout written by every study (see `experiments.lab.study`):

    workdir/config.json        the full config (written once, checked on resume)
    workdir/metrics.jsonl      one JSON object per measurement (all finished runs)
    workdir/runs/<id>.json     one record per finished run: its spec and metric rows
    workdir/checkpoints/<id>/  scratch of an unfinished run (removed when it finishes)
    workdir/summary.json       aggregated results
    workdir/report.md          the human-readable report
    workdir/plots/*.png        figures

Every file, figures included, is written to a temporary file in the same
directory that is then renamed into place (`os.replace`), so a reader (or a
run killed mid-write) never sees half a file. A run's record is written when
the run finishes; `metrics.jsonl` is rebuilt from the records. A killed sweep,
re-run, redoes exactly the runs that had no record, and ends with the same
files as an uninterrupted one. A record that is not valid JSON (a disk that
filled up, a hand edit) counts as no record: `is_done` moves it aside to
`runs/<id>.json.corrupt`, says so, and the run is redone.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import socket
from typing import Any, Callable, Iterable

from attnjax.serialization import dumps, json_form, to_json


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write `data` to `path` via a temporary file in the same directory and an atomic rename."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.{socket.gethostname()}.{os.getpid()}"  # jobs on several hosts may share the workdir
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str, value: Any) -> None:
    atomic_write_text(path, json.dumps(to_json(value), indent=2, sort_keys=True) + "\n")


def atomic_write_figure(path: str, figure, dpi: int = 110) -> None:
    """Render a matplotlib `figure` to PNG in memory, then write it atomically to `path`."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


@dataclasses.dataclass(frozen=True)
class RunDir:
    """What a study's `run_one` gets from the runner: its run id, a scratch
    directory for checkpoints (kept until the run is recorded, then removed;
    `training.Checkpointer(run.path)` saves the rows measured so far with each
    state), and the progress log."""

    run_id: str
    path: str
    log: Callable[[str], None] = print


class Workdir:
    """Files of one study; see the module docstring for the layout."""

    def __init__(self, path: str, log: Callable[[str], None] = print):
        self.path, self.log = path, log
        os.makedirs(os.path.join(path, "runs"), exist_ok=True)
        os.makedirs(os.path.join(path, "plots"), exist_ok=True)

    def file(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def write_config(self, config: dict) -> None:
        """Write config.json; on resume, refuse a workdir made with another config."""
        path = self.file("config.json")
        if os.path.exists(path):
            if read_json(path) != json_form(config):
                raise ValueError(
                    f"{path} holds a different config; use a new --workdir or delete the old one"
                )
            return
        atomic_write_json(path, config)

    def run_record_path(self, run_id: str) -> str:
        return self.file("runs", f"{run_id}.json")

    def run_dir(self, run_id: str, log: Callable[[str], None] = print) -> RunDir:
        return RunDir(run_id, self.file("checkpoints", run_id), log)

    def is_done(self, run_id: str) -> bool:
        """Whether `run_id` has a valid record; a corrupt one is moved aside (and logged), so it is redone."""
        path = self.run_record_path(run_id)
        if not os.path.exists(path):
            return False
        try:
            read_json(path)
        except ValueError as error:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            os.replace(path, f"{path}.corrupt")
            self.log(
                f"{path} is not valid JSON ({error}); moved to {path}.corrupt, run {run_id} will be redone"
            )
            return False
        return True

    def load_run(self, run_id: str) -> dict:
        """The record of a finished run; ValueError naming the file if it is not valid JSON."""
        path = self.run_record_path(run_id)
        try:
            return read_json(path)
        except ValueError as error:
            raise ValueError(
                f"run record {path} is not valid JSON ({error}); delete it to redo run {run_id}"
            ) from error

    def run_rows(self, run_id: str) -> list[dict]:
        """The metric rows of a finished run, each with its run id and spec fields."""
        record = self.load_run(run_id)
        return [{"run": run_id, **record.get("spec", {}), **row} for row in record["metrics"]]

    def finish_run(self, run_id: str, record: dict, metrics: Iterable[dict] = ()) -> None:
        """Record a finished run (with its metric rows), then rebuild metrics.jsonl.

        The record is the source of truth and is written atomically; the log is
        regenerated from all records in run order, so it never holds a run
        twice and a resumed sweep writes the same file as an uninterrupted one.
        """
        atomic_write_json(self.run_record_path(run_id), {**record, "metrics": list(metrics)})
        self.write_metrics()

    def write_metrics(self) -> None:
        """Rebuild metrics.jsonl from every finished run's record, in run order."""
        lines = [dumps(row) for row in self.read_metrics()]
        atomic_write_text(self.file("metrics.jsonl"), "".join(line + "\n" for line in lines))

    def finished_runs(self) -> list[str]:
        names = sorted(os.listdir(self.file("runs")))
        return [n[: -len(".json")] for n in names if n.endswith(".json")]

    def read_metrics(self) -> list[dict]:
        """Every metric row of every finished run, in run order."""
        return [row for run in self.finished_runs() for row in self.run_rows(run)]

    def write_summary(self, summary: dict) -> None:
        atomic_write_json(self.file("summary.json"), summary)

    def write_figure(self, name: str, figure) -> str:
        """Write `plots/<name>.png` atomically; returns its path."""
        path = self.file("plots", f"{name}.png")
        atomic_write_figure(path, figure)
        return path

    def write_report(self, text: str) -> str:
        path = self.file("report.md")
        atomic_write_text(path, text)
        return path
