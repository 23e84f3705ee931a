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
files as an uninterrupted one.

The workdir trusts no file it did not write:

* A record that is not valid JSON (a disk that filled up, a hand edit), or is
  JSON but not a run record (`record_problem`: not an object, no list of row
  objects `metrics`, a `spec` other than its run's), counts as no record:
  `is_done` moves it aside to `runs/<id>.json.corrupt`, says so, and the run
  is redone.
* Given the study's specs, only the records of its runs are read; any other
  `runs/*.json` (another study's, a copy) is named once and left alone.
* Opening a workdir checks that it can be written (before any run is
  computed, whose work would otherwise be lost), and removes the temporary
  files that processes of this host no longer running left behind (a write
  that failed removes its own; a killed process cannot). Temporary files of
  other hosts are left alone: their writer may still run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import socket
from typing import Any, Callable, Iterable, Mapping, Optional

from attnjax.serialization import dumps, json_form, to_json


def temporary_path(path: str) -> str:
    """The temporary file of this process for `path`: `<path>.tmp.<host>.<pid>` (jobs on several hosts
    may share the workdir)."""
    return f"{path}.tmp.{socket.gethostname()}.{os.getpid()}"


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write `data` to `path` via a temporary file in the same directory and an atomic rename.

    A write that fails (a full disk, an interrupt) removes its temporary file and raises.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = temporary_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


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


def _kind(value: Any) -> str:
    """What a JSON value is, for messages: 'a JSON object', 'a JSON array', 'a string', 'a number', ..."""
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a string" if isinstance(value, str) else "a number"


def record_problem(record: Any, spec: Optional[dict] = None) -> Optional[str]:
    """Why `record` (a run record as read from JSON) is not a record of a run with `spec`, or None.

    A run record is an object with `metrics`, a list of row objects, and
    `spec`, an object: the run's spec fields in JSON form, equal to `spec`
    when `spec` is given (optional when it is not).
    """
    if not isinstance(record, dict):
        return f"{_kind(record)}, not an object"
    metrics = record.get("metrics")
    if metrics is None:
        return "no 'metrics' list"
    if not isinstance(metrics, list):
        return f"'metrics' is {_kind(metrics)}, not a list"
    for row in metrics:
        if not isinstance(row, dict):
            return f"'metrics' holds {_kind(row)}, not an object"
    if "spec" in record and not isinstance(record["spec"], dict):
        return f"'spec' is {_kind(record['spec'])}, not an object"
    if spec is not None and record.get("spec") != spec:
        return f"its spec {record.get('spec')} is not the run's {spec}"
    return None


def _process_runs(pid: int) -> bool:
    """Whether process `pid` of this host runs (one we may not signal runs too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_temporary_files(directory: str) -> list[str]:
    """The temporary files (`temporary_path`) in `directory` of processes of this host that no longer
    run: no writer will rename them into place."""
    marker = f".tmp.{socket.gethostname()}."
    stale = []
    for name in sorted(os.listdir(directory)):
        head, found, pid = name.rpartition(marker)
        if found and head and pid.isdigit() and not _process_runs(int(pid)):
            stale.append(os.path.join(directory, name))
    return stale


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
    """Files of one study; see the module docstring for the layout.

    `specs`: the study's runs, `{run_id: spec fields}` (a dict each; None: any
    record in runs/ is a run's). With them, only these runs' records are read,
    each checked against its spec, and the other files of runs/ are named once
    (on `log`) and left alone. Opening checks that the workdir can be written
    (OSError naming the directory) and removes stale temporary files.
    """

    def __init__(
        self,
        path: str,
        log: Callable[[str], None] = print,
        specs: Optional[Mapping[str, dict]] = None,
    ):
        self.path, self.log = path, log
        self.specs = None if specs is None else {k: json_form(v) for k, v in specs.items()}
        directories = (path, self.file("runs"), self.file("plots"))
        for directory in directories:
            self._check_writable(directory)
        stale = [name for directory in directories for name in stale_temporary_files(directory)]
        for name in stale:
            os.remove(name)
        if stale:
            log(
                f"removed {len(stale)} temporary files left by processes of this host that no longer "
                f"run: {', '.join(sorted(stale))}"
            )
        if self.specs is not None:
            records = [n for n in sorted(os.listdir(self.file("runs"))) if n.endswith(".json")]
            strays = [n for n in records if n[: -len(".json")] not in self.specs]
            if strays:
                log(
                    f"{self.file('runs')} holds records that are not of this study's runs, "
                    f"left alone and not read: {', '.join(strays)}"
                )

    @staticmethod
    def _check_writable(directory: str) -> None:
        """Make `directory` if needed and write (then remove) a file in it; else an OSError naming it."""
        try:
            os.makedirs(directory, exist_ok=True)
            probe = temporary_path(os.path.join(directory, ".writable"))
            with open(probe, "wb"):
                pass
            os.remove(probe)
        except OSError as error:
            raise type(error)(
                f"workdir directory {directory} is not writable ({error}); nothing was run: "
                "choose a workdir this process can write"
            ) from error

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

    def _read_record(self, run_id: str) -> tuple[Any, Optional[str]]:
        """The record of `run_id` as read, and what is wrong with it ('is not valid JSON (...)', 'is not
        a run record (...)') or None."""
        try:
            record = read_json(self.run_record_path(run_id))
        except ValueError as error:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            return None, f"is not valid JSON ({error})"
        spec = None if self.specs is None else self.specs.get(run_id)
        problem = record_problem(record, spec)
        return record, None if problem is None else f"is not a run record ({problem})"

    def _checked_record(self, run_id: str) -> Optional[dict]:
        """The valid record of `run_id`, or None: there is none, or it was invalid and is moved aside
        to `runs/<id>.json.corrupt` (and logged), so that the run is redone."""
        path = self.run_record_path(run_id)
        if not os.path.exists(path):
            return None
        record, problem = self._read_record(run_id)
        if problem is None:
            return record
        os.replace(path, f"{path}.corrupt")
        self.log(f"{path} {problem}; moved to {path}.corrupt, run {run_id} will be redone")
        return None

    def is_done(self, run_id: str) -> bool:
        """Whether `run_id` has a valid record; an invalid one is moved aside (and logged), so it is redone."""
        return self._checked_record(run_id) is not None

    def load_run(self, run_id: str) -> dict:
        """The record of a finished run; ValueError naming the file if it is not a valid record."""
        path = self.run_record_path(run_id)
        record, problem = self._read_record(run_id)
        if problem is not None:
            raise ValueError(f"run record {path} {problem}; delete it to redo run {run_id}")
        return record

    def run_rows(self, run_id: str) -> list[dict]:
        """The metric rows of a finished run, each with its run id and spec fields."""
        return _rows(run_id, self.load_run(run_id))

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
        """The run ids with a record file (of the study's runs, given its specs), in run order."""
        names = sorted(os.listdir(self.file("runs")))
        ids = [n[: -len(".json")] for n in names if n.endswith(".json")]
        return ids if self.specs is None else [i for i in ids if i in self.specs]

    def read_metrics(self) -> list[dict]:
        """Every metric row of every finished run, in run order (an invalid record is moved aside)."""
        records = {run: self._checked_record(run) for run in self.finished_runs()}
        return [
            row
            for run, record in records.items()
            if record is not None
            for row in _rows(run, record)
        ]

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


def _rows(run_id: str, record: dict) -> list[dict]:
    """A valid record's metric rows, each with its run id and spec fields."""
    return [{"run": run_id, **record.get("spec", {}), **row} for row in record["metrics"]]
