import json
import math

import numpy as np
import pytest

from experiments.lab import workdir as workdir_lib


def test_runs_metrics_and_resume(tmp_path):
    wd = workdir_lib.Workdir(str(tmp_path))
    wd.write_config({"a": 1, "b": [1, 2]})
    assert not wd.is_done("r1")
    wd.finish_run(
        "r1",
        {"final": np.float32(0.5)},
        [{"layer": 0, "x": np.arange(2)}, {"layer": 1, "x": float("nan")}],
    )
    wd.finish_run("r0", {"final": 1.0}, [{"layer": 0, "x": 1.0}])
    assert wd.is_done("r1") and wd.finished_runs() == ["r0", "r1"]
    lines = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert lines == wd.read_metrics()
    assert [r["run"] for r in lines] == ["r0", "r1", "r1"]
    assert lines[1]["x"] == [0, 1] and lines[2]["x"] == "nan"
    assert wd.load_run("r1")["final"] == 0.5
    # Redoing a run (a resume after a kill) leaves no duplicate rows.
    wd.finish_run("r1", {"final": 0.5}, [{"layer": 0, "x": [0, 1]}, {"layer": 1, "x": math.nan}])
    assert [json.loads(line) for line in open(tmp_path / "metrics.jsonl")] == lines


def test_resume_with_a_different_config_is_refused(tmp_path):
    wd = workdir_lib.Workdir(str(tmp_path))
    wd.write_config({"a": 1})
    wd.write_config({"a": 1})  # same config: fine
    with pytest.raises(ValueError, match="different config"):
        wd.write_config({"a": 2})


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "x" / "s.json"
    workdir_lib.atomic_write_json(str(path), {"v": np.int64(3), "t": (1, 2)})
    assert json.loads(path.read_text()) == {"t": [1, 2], "v": 3}
    assert [p.name for p in path.parent.iterdir()] == ["s.json"]


def test_rows_carry_the_run_and_its_spec(tmp_path):
    wd = workdir_lib.Workdir(str(tmp_path))
    wd.finish_run("a-L2", {"spec": {"arch": "a", "depth": 2}}, [{"metric": "r", "value": 0.5}])
    assert wd.run_rows("a-L2") == [
        {"run": "a-L2", "arch": "a", "depth": 2, "metric": "r", "value": 0.5}
    ]
    assert [json.loads(line) for line in open(tmp_path / "metrics.jsonl")] == wd.run_rows("a-L2")


def test_figures_are_written_atomically(tmp_path):
    from attnjax import plotting

    fig = plotting.figure(2, 2)
    fig.add_subplot().plot([0, 1])
    path = workdir_lib.Workdir(str(tmp_path)).write_figure("line", fig)
    assert path == str(tmp_path / "plots" / "line.png")
    assert (tmp_path / "plots" / "line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in (tmp_path / "plots").iterdir()] == ["line.png"]


def test_run_dir_is_the_runs_checkpoint_scratch(tmp_path):
    run = workdir_lib.Workdir(str(tmp_path)).run_dir("r1", log=lambda line: None)
    assert run.run_id == "r1" and run.path == str(tmp_path / "checkpoints" / "r1")


def test_corrupt_run_record_is_named_and_moved_aside(tmp_path):
    logged = []
    wd = workdir_lib.Workdir(str(tmp_path), log=logged.append)
    wd.finish_run("r0", {"spec": {}}, [{"x": 1.0}])
    record = tmp_path / "runs" / "r0.json"
    text = record.read_text()
    record.write_text(text[: len(text) // 2])  # a torn write
    with pytest.raises(ValueError, match=rf"run record {record} is not valid JSON"):
        wd.load_run("r0")
    assert not wd.is_done("r0")
    assert (
        logged == [logged[0]]
        and str(record) in logged[0]
        and f"moved to {record}.corrupt" in logged[0]
    )
    assert (tmp_path / "runs" / "r0.json.corrupt").read_text() == text[: len(text) // 2]
    assert wd.finished_runs() == [] and wd.read_metrics() == []


@pytest.mark.parametrize(
    "text, reason",
    [
        ("{}", "no 'metrics' list"),
        ("[]", "a JSON array, not an object"),
        ('{"spec": {"x": 1}}', "no 'metrics' list"),
        ('{"spec": {"x": 1}, "metrics": [1.5]}', "'metrics' holds a number, not an object"),
        ('{"spec": [1], "metrics": []}', "'spec' is a JSON array, not an object"),
    ],
)
def test_malformed_run_record_is_named_and_moved_aside(tmp_path, text, reason):
    """Valid JSON that is not a run record is treated as a torn one: named, moved aside, redone."""
    logged = []
    wd = workdir_lib.Workdir(str(tmp_path), log=logged.append)
    record = tmp_path / "runs" / "r0.json"
    record.write_text(text)
    with pytest.raises(ValueError, match=rf"run record {record} is not a run record \({reason}\)"):
        wd.load_run("r0")
    assert not wd.is_done("r0")
    assert len(logged) == 1 and logged[0].startswith(f"{record} is not a run record ({reason})")
    assert f"moved to {record}.corrupt, run r0 will be redone" in logged[0]
    assert (tmp_path / "runs" / "r0.json.corrupt").read_text() == text
    assert wd.finished_runs() == [] and wd.read_metrics() == []


def test_a_record_of_another_spec_is_moved_aside(tmp_path):
    """With the study's specs, a record is checked against its run's spec (a record of an older spec
    would lend its rows the wrong fields)."""
    workdir_lib.Workdir(str(tmp_path)).finish_run("r0", {"spec": {"x": 2}}, [{"v": 1.0}])
    logged = []
    wd = workdir_lib.Workdir(str(tmp_path), log=logged.append, specs={"r0": {"x": (1,)}})
    record = tmp_path / "runs" / "r0.json"
    assert not wd.is_done("r0")
    assert logged == [
        f"{record} is not a run record (its spec {{'x': 2}} is not the run's {{'x': [1]}}); "
        f"moved to {record}.corrupt, run r0 will be redone"
    ]
    wd.finish_run("r0", {"spec": {"x": (1,)}}, [{"v": 1.0}])
    assert wd.is_done("r0") and wd.run_rows("r0") == [{"run": "r0", "x": [1], "v": 1.0}]


def test_only_the_studys_records_are_read_and_others_reported_once(tmp_path):
    """A stray record in runs/ (another study's, a copy) is named once and left alone, never merged into
    metrics.jsonl."""
    workdir_lib.Workdir(str(tmp_path)).finish_run("other", {"spec": {}}, [{"v": 9.0}] * 3)
    stray = (tmp_path / "runs" / "other.json").read_text()
    logged = []
    wd = workdir_lib.Workdir(str(tmp_path), log=logged.append, specs={"r0": {}, "r1": {}})
    assert logged == [
        f"{tmp_path / 'runs'} holds records that are not of this study's runs, left alone and not "
        "read: other.json"
    ]
    wd.finish_run("r1", {"spec": {}}, [{"v": 1.0}])
    wd.finish_run("r0", {"spec": {}}, [{"v": 0.0}])
    assert wd.finished_runs() == ["r0", "r1"] and len(logged) == 1
    assert [json.loads(line) for line in open(tmp_path / "metrics.jsonl")] == [
        {"run": "r0", "v": 0.0},
        {"run": "r1", "v": 1.0},
    ]
    assert (tmp_path / "runs" / "other.json").read_text() == stray


def _read_only(directory, monkeypatch):
    """`directory` as a read-only file system shows it to a process: opening a file under it for writing
    raises EROFS. (Patched rather than made with file modes, which do not stop root.)"""
    import builtins
    import errno
    import os

    def inside(path):
        return os.path.abspath(os.fsdecode(path)).startswith(os.path.abspath(directory) + os.sep)

    def refuse(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

    real_open, real_os_open = builtins.open, os.open

    def guarded_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wax+") and inside(file):
            refuse(file)
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and inside(path):
            refuse(path)
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)


def test_a_read_only_workdir_is_refused_when_opened(tmp_path, monkeypatch):
    workdir_lib.Workdir(str(tmp_path)).write_config({"a": 1})
    _read_only(tmp_path, monkeypatch)
    with pytest.raises(OSError, match=rf"workdir directory {tmp_path} is not writable .*Errno 30"):
        workdir_lib.Workdir(str(tmp_path))


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    """A full disk (ENOSPC while the file is written) raises, and leaves neither the file nor its
    temporary."""
    import errno
    import os

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left on device"):
        workdir_lib.atomic_write_json(str(tmp_path / "s.json"), {"v": 1})
    assert list(tmp_path.iterdir()) == []


def test_stale_temporary_files_of_dead_processes_of_this_host_are_removed(tmp_path):
    """A temporary file of a process of this host that no longer runs is removed when the workdir is
    opened; those of other hosts (maybe still writing) and of live processes are left alone."""
    import os
    import socket
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    host = socket.gethostname()
    stale = [
        tmp_path / "runs" / f"x1.json.tmp.{host}.{child.pid}",
        tmp_path / "plots" / f"a.png.tmp.{host}.{child.pid}",
        tmp_path / f"summary.json.tmp.{host}.{child.pid}",
    ]
    kept = [
        tmp_path / "runs" / f"x2.json.tmp.elsewhere.{child.pid}",
        tmp_path / "runs" / f"x3.json.tmp.{host}.{os.getpid()}",
        tmp_path / "runs" / f"x4.json.tmp.{host}.{child.pid}.bak",
    ]
    for path in stale + kept:
        path.parent.mkdir(exist_ok=True)
        path.write_text("{")
    logged = []
    workdir_lib.Workdir(str(tmp_path), log=logged.append)
    assert [p.exists() for p in stale + kept] == [False] * 3 + [True] * 3
    assert logged == [
        f"removed 3 temporary files left by processes of this host that no longer run: "
        f"{', '.join(sorted(str(p) for p in stale))}"
    ]
