"""The Colab notebook (`experiments/colab.ipynb`) runs top to bottom on a CPU.

Its code cells run in order, in one namespace, in a Python process of their own, as one Jupyter kernel
would (`tests/notebook.py`), from a checkout made of links to this repository's files, so the runs they
write stay in a temporary directory. Only `pip install` lines are left out: the test environment has
installed what they install, and a test checks that they are the only shell lines. The notebook runs
its studies on their `smoke` configs, and a test checks that too.

The cells that run a study are what is under test here, not the study's numbers (each study's own
tests run it): the workdirs start with the run records of the suite's runs of the same configs
(`shared_run`), so the notebook's `study.run` finds every run done and writes the summary, report and
figures from them. rank_collapse's smoke config is swapped for the suite's smaller test config of the
same study (its records are the ones the suite has); pretrained's smoke config is the suite's own.
"""

import json
import os
import re
import shutil
import subprocess
import sys

from tests.experiments.lab.test_studies import finished
from tests.experiments.test_pretrained import finished as finished_pretrained
from tests.experiments.test_pretrained import needs_models
from tests.notebook import code_cells, split_shell_lines
from tests.paths import REPO

NOTEBOOK = REPO / "experiments" / "colab.ipynb"
# What the notebook needs of a checkout: it recognises one by pyproject.toml and imports the rest.
CHECKOUT = ("pyproject.toml", "attnjax", "experiments", "configs")
# The workdirs of the studies the notebook runs, in its order.
RUNS = ("runs/rc_smoke", "runs/pt_smoke")
# The notebook's rank_collapse config, and what the test puts in its place.
RC_SMOKE = 'rank_collapse_config.get_config("smoke")'
RC_TEST = (
    '__import__("tests.experiments.lab.test_studies", fromlist=["_"]).rank_collapse_test_config()'
)


def test_only_install_lines_are_left_out_and_only_smoke_configs_run():
    cells = code_cells(NOTEBOOK)
    shell = [line for source in cells for line in split_shell_lines(source)[1]]
    assert shell and all(line.startswith("!pip install ") for line in shell), shell
    configs = re.findall(r"get_config\(([^)]*)\)", "\n".join(cells))
    assert configs and all(re.fullmatch(r'"([a-z]+_)?smoke"', c) for c in configs), configs


def notebook_on_the_suites_runs(path):
    """The notebook, with its rank_collapse config swapped for the suite's test config, written to `path`."""
    notebook = json.loads(NOTEBOOK.read_text())
    sources = ["".join(cell["source"]) for cell in notebook["cells"]]
    assert sum(source.count(RC_SMOKE) for source in sources) == 1
    for cell, source in zip(notebook["cells"], sources):
        cell["source"] = source.replace(RC_SMOKE, RC_TEST)
    path.write_text(json.dumps(notebook))
    return path


def copy_run_records(run, workdir):
    """The config and run records of a finished study run (not its summary, report or figures)."""
    shutil.copytree(
        run.workdir,
        workdir,
        ignore=shutil.ignore_patterns("summary.json", "report.md", "metrics.jsonl", "plots"),
    )


@needs_models
def test_the_notebook_runs_top_to_bottom_on_a_cpu(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in CHECKOUT:
        (checkout / name).symlink_to(REPO / name)
    for run, workdir in zip((finished("rank_collapse"), finished_pretrained("smoke")), RUNS):
        copy_run_records(run, checkout / workdir)
    record = tmp_path / "shown.json"
    notebook = notebook_on_the_suites_runs(tmp_path / "colab.ipynb")
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-m", "tests.notebook", str(notebook), str(record)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    # Both studies found every run done: the cells under test wrote the outputs, nothing was recomputed.
    counts = re.findall(
        r"^(?:rank_collapse|pretrained): (\d+) runs \((\d+) already done\)", out, re.M
    )
    assert len(counts) == 2 and all(total == done for total, done in counts), counts
    assert "backend: cpu" in out and "cpu -> attnjax.dot_product_attention (XLA)" in out
    assert float(re.search(r"max \|kernel - XLA reference\|: (\S+)", out).group(1)) <= 1e-5
    assert "layer output: (2, 256, 256)" in out
    sums = re.search(r"\(2, 10, 512\) \(2, 8, 10, 10\) row sums: (\S+) (\S+)", out).groups()
    assert all(abs(float(s) - 1) <= 1e-5 for s in sums), sums
    # What the notebook shows: each study's report, then every figure it drew.
    expected = []
    for run in RUNS:
        workdir = checkout / run
        assert json.loads((workdir / "summary.json").read_text())["predictions"], run
        expected.append(["markdown", (workdir / "report.md").read_text()])
        plots = sorted(p.name for p in (workdir / "plots").iterdir())
        assert plots, run
        expected += [["image", f"{run}/plots/{name}"] for name in plots]
    assert json.loads(record.read_text()) == expected
