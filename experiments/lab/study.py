"""The study runner: specs -> run_one -> summarize -> predictions -> figures -> report.

A study declares what it runs and reports; the runner owns the files, resume
and progress. A `Study` is six functions:

* `specs(config) -> [spec]`: every run, and every check of the config (bad
  values raise `ValueError` here, before anything compiles). A spec is a
  frozen dataclass with a `run_id` property (a file name).
* `run_one(spec, config, run) -> rows`: measure one run. `run` is a
  `workdir.RunDir` (scratch directory for checkpoints, where a
  `training.Checkpointer` saves the rows with the state, `run.log` for
  progress lines). Rows are flat
  dicts of structured fields (`{"phase": "train", "step": 20, "seed": 0,
  "metric": "loss", "value": 1.7}`), never keys to be split later; they must
  not repeat the spec's fields, which the runner adds.
* `summarize(rows, config) -> summary`: a JSON-able dict from the rows of
  every run (each with `run` and the spec's fields), in spec order.
* `predictions(summary) -> [prediction(...)]`: the literature checks.
* `figures(summary) -> {name: matplotlib Figure}`, written as `plots/<name>.png`.
* `report(summary) -> str`: the Markdown report.

The runner adds `config` (the config as a dict), `predictions` and `plots`
(file names) to the summary, so figures and report need nothing else: the
report is a function of `summary.json`.

Outputs in the workdir: `config.json`, `runs/<run_id>.json` (a finished run's
record), `metrics.jsonl` (every row), `summary.json`, `report.md`,
`plots/*.png`; every file is written atomically. Re-running a killed study
skips the runs that have a record; an unfinished run starts again, and may
resume from the checkpoints it left in its scratch directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from typing import Any, Callable, Collection, Optional

import jax
from ml_collections import ConfigDict

from attnjax.serialization import json_form
from experiments.lab.workdir import RunDir, Workdir

VERDICTS = ("pass", "fail", "not measured", "not applicable")
# The five kinds of row of a report (see each study's report heading):
# prediction   a paper's own claim, in the paper's setting; may fail; evidence about the paper;
# replication  a paper's own number (table entry, ratio, range) against ours measured the same way;
# hypothesis   a claim of this codebase, labelled so; may fail; not evidence about a paper;
# sanity       an identity, a theorem whose hypotheses hold, a construction, a regime or
#              resolution condition: fails only on a bug;
# not applicable  the paper's setting differs from what the run offers (the note says which part).
KINDS = ("prediction", "replication", "hypothesis", "sanity", "not applicable")
PROGRESS_TITLES = {
    "prediction": "predictions",
    "replication": "replications",
    "hypothesis": "hypotheses",
    "sanity": "sanity checks",
}


def verdict(passed: Optional[bool]) -> str:
    """A check's verdict: True -> 'pass', False -> 'fail', None -> 'not measured'."""
    return {True: "pass", False: "fail", None: "not measured"}[
        None if passed is None else bool(passed)
    ]


def prediction(
    name: str,
    source: str,
    prediction: str,
    measured: Any,
    passed: Optional[bool],
    note: str = "",
    kind: str = "prediction",
) -> dict:
    """One row of a report: its source, what was claimed, what was measured, and the verdict.

    `kind` is one of `KINDS` (see there): a paper's "prediction" or "replication",
    this codebase's "hypothesis", a "sanity" condition, or "not applicable"
    (then `passed` must be None, the verdict is "not applicable" and `note`
    says which part of the paper's setting the run does not offer).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "not applicable" and (passed is not None or not note):
        raise ValueError(
            f"check {name!r}: a 'not applicable' row has no verdict (passed=None, got "
            f"{passed!r}) and a note saying which part of the setting differs (got {note!r})"
        )
    return {
        "name": name,
        "source": source,
        "prediction": prediction,
        "measured": measured,
        "verdict": "not applicable" if kind == "not applicable" else verdict(passed),
        "note": note,
        "kind": kind,
    }


# --------------------------------------------------------------------------
# Reading rows


def config_of(summary: dict) -> ConfigDict:
    """A study's config, from the dict the runner stored in its summary (`summary["config"]`)."""
    return ConfigDict(summary["config"])


def select(rows: list[dict], **match) -> list[dict]:
    """The rows whose fields equal `match` (a missing field matches nothing but None)."""
    return [row for row in rows if all(row.get(k) == v for k, v in match.items())]


def distinct(rows: list[dict], *fields: str) -> list:
    """The distinct values of `fields` (tuples when several), in order of first appearance."""
    seen = {}
    for row in rows:
        key = tuple(row.get(f) for f in fields)
        seen.setdefault(key if len(fields) > 1 else key[0], None)
    return list(seen)


def by_metric(rows: list[dict], **match) -> dict[str, list]:
    """`{metric: [value of each matching row, in row order]}` (a row's `value`, or its `values`)."""
    out = {}
    for row in select(rows, **match):
        out.setdefault(row["metric"], []).append(row["values"] if "values" in row else row["value"])
    return out


# --------------------------------------------------------------------------
# The study and its runner


@dataclasses.dataclass(frozen=True)
class Study:
    """A study's six functions (see the module docstring)."""

    name: str
    specs: Callable[[Any], list]
    run_one: Callable[[Any, Any, RunDir], list[dict]]
    summarize: Callable[[list[dict], Any], dict]
    predictions: Callable[[dict], list[dict]]
    figures: Callable[[dict], dict]
    report: Callable[[dict], str]


def _check_specs(specs: list) -> None:
    ids = [spec.run_id for spec in specs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"run ids must be distinct, got {ids}")
    for run_id in ids:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise ValueError(f"run id {run_id!r} is not a file name")


def _check_rows(spec, rows: list[dict]) -> None:
    reserved = {"run", *dataclasses.asdict(spec)}
    for row in rows:
        clash = reserved & set(row)
        if clash:
            raise ValueError(
                f"rows of run {spec.run_id} repeat the spec fields {sorted(clash)}; the runner adds them"
            )


def _check_predictions(predictions: list[dict]) -> list[dict]:
    for p in predictions:
        if p.get("verdict") not in VERDICTS:
            raise ValueError(
                f"prediction {p.get('name')!r}: verdict must be one of {VERDICTS}, "
                f"got {p.get('verdict')!r}"
            )
    return predictions


class _Clock:
    """Progress lines: runs done / total, elapsed time and an estimate of the time left."""

    def __init__(self, total: int, done: int, log: Callable[[str], None]):
        self.total, self.done, self.log = total, done, log
        self.start, self.finished = time.perf_counter(), 0

    def begin(self, run_id: str) -> None:
        self.log(f"[{self.done + 1}/{self.total}] {run_id}")
        self.run_start = time.perf_counter()

    def end(self) -> None:
        self.done, self.finished = self.done + 1, self.finished + 1
        now = time.perf_counter()
        elapsed = now - self.start
        left = elapsed / self.finished * (self.total - self.done)
        self.log(
            f"      done in {now - self.run_start:.1f} s; {self.done}/{self.total} runs, "
            f"elapsed {_duration(elapsed)}, about {_duration(left)} left"
        )


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def _run_missing(
    study: Study,
    config,
    specs: list,
    wd: Workdir,
    progress: Callable[[str], None],
    share: Optional[list] = None,
) -> None:
    """Run every spec of `share` (default: all `specs`) without a record, in order, recording each as it finishes."""
    done = sum(wd.is_done(spec.run_id) for spec in specs)
    progress(
        f"{study.name}: {len(specs)} runs ({done} already done), jax backend {jax.default_backend()}"
    )
    pool = specs if share is None else share
    todo = [s for s in pool if not wd.is_done(s.run_id)]
    if share is not None:
        progress(f"this job's share: {len(share)} runs ({len(share) - len(todo)} already done)")
    clock = _Clock(len(pool), len(pool) - len(todo), progress)
    for spec in todo:
        clock.begin(spec.run_id)
        run_dir = wd.run_dir(spec.run_id, progress)
        rows = study.run_one(spec, config, run_dir)
        _check_rows(spec, rows)
        wd.finish_run(spec.run_id, {"spec": dataclasses.asdict(spec)}, rows)
        shutil.rmtree(run_dir.path, ignore_errors=True)
        clock.end()
    with contextlib.suppress(OSError):  # the scratch directories' parent, once empty
        os.rmdir(wd.file("checkpoints"))


def _summary(study: Study, config, specs: list, wd: Workdir) -> dict:
    """The study's summary of every run's rows, with the config and the predictions, in its JSON form."""
    summary = study.summarize([row for spec in specs for row in wd.run_rows(spec.run_id)], config)
    if {"config", "predictions", "plots"} & set(summary):
        raise ValueError(
            f"{study.name}: summarize must leave the keys config, predictions and plots to the runner"
        )
    summary = json_form({"config": config.to_dict(), **summary})
    summary["predictions"] = _check_predictions(json_form(study.predictions(summary)))
    return summary


def _write_outputs(
    study: Study, summary: dict, wd: Workdir, progress: Callable[[str], None]
) -> None:
    """plots/*.png, then summary.json (with the plots' names) and report.md; then the verdicts and the
    report's path. The summary is written after the figures it lists, so a kill in between leaves no
    summary naming a plot that is not there."""
    figures = study.figures(summary)
    summary["plots"] = sorted(f"{name}.png" for name in figures)
    for name, figure in figures.items():
        wd.write_figure(name, figure)
    wd.write_summary(summary)
    path = wd.write_report(study.report(summary))
    for kind in KINDS:
        mine = [p for p in summary["predictions"] if p.get("kind", "prediction") == kind]
        counts = {v: sum(p["verdict"] == v for p in mine) for v in VERDICTS}
        if kind == "not applicable" and mine:
            progress(f"{kind}: {len(mine)}")
        elif mine or kind == "prediction":
            progress(
                f"{PROGRESS_TITLES[kind]}: {counts['pass']} pass, {counts['fail']} fail, "
                f"{counts['not measured']} not measured"
            )
    progress(f"report: {path}")


def prepare(
    study: Study, config, workdir: str, progress: Callable[[str], None] = print
) -> tuple[list, Workdir]:
    """The study's specs, checked, and its workdir with config.json written (or checked, on resume).

    Every check of the config (`study.specs`) happens before the workdir is
    touched or anything compiles; a workdir that cannot be written is refused
    here, before any run. The workdir reads only the records of these specs'
    runs, each checked against its spec, and reports on `progress` (a corrupt
    record moved aside, a stray one left alone).
    """
    specs = study.specs(config)
    _check_specs(specs)
    wd = Workdir(workdir, log=progress, specs={s.run_id: dataclasses.asdict(s) for s in specs})
    wd.write_config(config.to_dict())
    return specs, wd


def write_outputs_if_done(
    study: Study, config, specs: list, wd: Workdir, progress: Callable[[str], None]
) -> Optional[dict]:
    """The summary, figures and report once every spec has a record (returns the summary); else None,
    with a progress line naming the runs left."""
    left = [spec.run_id for spec in specs if not wd.is_done(spec.run_id)]
    if left:
        progress(
            f"{study.name}: {len(left)} of {len(specs)} runs not done yet ({', '.join(left)}); "
            f"summary, report and figures are written when every run is done"
        )
        return None
    wd.write_metrics()  # jobs finishing together may have raced on it; every record is in now
    summary = _summary(study, config, specs, wd)
    _write_outputs(study, summary, wd, progress)
    return summary


def run(
    study: Study,
    config,
    workdir: str,
    *,
    progress: Callable[[str], None] = print,
    run_ids: Optional[Collection[str]] = None,
    write_outputs: bool = True,
) -> Optional[dict]:
    """Run (or resume) `study` with `config` in `workdir`; returns the summary as written to summary.json.

    With `run_ids` (one job's share, `experiments.lab.launch`), only those runs are
    done; the outputs are written, and the summary returned, only if every
    run of the study then has a record (else None). `write_outputs=False`
    leaves them to the caller (a job array's submitting process). Every check
    of the config happens before the workdir is touched or anything compiles.
    """
    specs, wd = prepare(study, config, workdir, progress)
    share = None
    if run_ids is not None:
        unknown = set(run_ids) - {spec.run_id for spec in specs}
        if unknown:
            raise ValueError(f"run_ids {sorted(unknown)} are not runs of {study.name}")
        share = [spec for spec in specs if spec.run_id in set(run_ids)]
    _run_missing(study, config, specs, wd, progress, share)
    return write_outputs_if_done(study, config, specs, wd, progress) if write_outputs else None
