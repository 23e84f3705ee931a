"""The Colab notebook (`experiments/colab.ipynb`) runs top to bottom on a CPU.

Its code cells run in order, in one namespace, in a Python process of their own, as one Jupyter kernel
would (`tests/notebook.py`), from a checkout made of links to this repository's files, so the runs they
write stay in a temporary directory. Only `pip install` lines are left out: the test environment has
installed what they install, and a test checks that they are the only shell lines. The notebook runs
its studies on their `smoke` configs (under a minute each on a CPU), and a test checks that too.
"""

import json
import os
import re
import subprocess
import sys

from tests.experiments.test_pretrained import needs_models
from tests.notebook import code_cells, split_shell_lines
from tests.paths import REPO

NOTEBOOK = REPO / "experiments" / "colab.ipynb"
# What the notebook needs of a checkout: it recognises one by pyproject.toml and imports the rest.
CHECKOUT = ("pyproject.toml", "attnjax", "experiments", "configs")
# The workdirs of the studies the notebook runs, in its order.
RUNS = ("runs/rc_smoke", "runs/pt_smoke")


def test_only_install_lines_are_left_out_and_only_smoke_configs_run():
    cells = code_cells(NOTEBOOK)
    shell = [line for source in cells for line in split_shell_lines(source)[1]]
    assert shell and all(line.startswith("!pip install ") for line in shell), shell
    configs = re.findall(r"get_config\(([^)]*)\)", "\n".join(cells))
    assert configs and all(re.fullmatch(r'"([a-z]+_)?smoke"', c) for c in configs), configs


@needs_models
def test_the_notebook_runs_top_to_bottom_on_a_cpu(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in CHECKOUT:
        (checkout / name).symlink_to(REPO / name)
    record = tmp_path / "shown.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-m", "tests.notebook", str(NOTEBOOK), str(record)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
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
