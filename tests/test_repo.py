"""The repository's promises about itself: CI runs the README's test command, and the committed
pretrained-model and power-iteration reports and their README sections are the committed summaries
rendered (no model needed)."""

import json
import re

import pytest

from tests.paths import REPO


def _readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return block.strip().splitlines()


def test_the_readme_opens_with_exactly_two_set_up_commands():
    study, tests = _readme_commands()
    assert "python -m experiments.rank_collapse --config configs/rank_collapse.py" in study
    assert "pip install -e ." in study and "pytest" in tests and "ruff check ." in tests


def test_ci_runs_the_readme_test_command():
    _, tests = _readme_commands()
    ci = (REPO / ".ci" / "run").read_text()
    ci_command = ci[ci.index("python3 -m venv") :].strip()

    def strip_quiet(c):
        return re.sub(r"pip install -q ", "pip install ", " ".join(c.replace("\\\n", " ").split()))

    assert strip_quiet(ci_command) == strip_quiet(tests)


PRETRAINED_RESULTS = ("experiments/pretrained/results", "experiments/pretrained/results_causal")


@pytest.mark.parametrize("results", PRETRAINED_RESULTS)
def test_committed_pretrained_reports_are_their_summaries_rendered(results):
    """The summary holds its derived numbers, the checks give the committed verdicts again, and the templates
    the committed report, byte for byte."""
    from attnjax.serialization import json_form
    from experiments.pretrained import checks, report
    from experiments.pretrained import summary as summary_lib

    summary = json.loads((REPO / results / "summary.json").read_text())
    assert json_form(summary_lib.derive(summary)) == summary
    assert json.loads(json.dumps(checks.predictions(summary))) == summary["predictions"]
    assert report.markdown(summary) == (REPO / results / "report.md").read_text()


def test_readme_pretrained_section_is_the_committed_summaries_rendered():
    from experiments.pretrained import report

    dirs = PRETRAINED_RESULTS
    results = {d: json.loads((REPO / d / "summary.json").read_text()) for d in dirs}
    times = {d: json.loads((REPO / d / "timing.json").read_text())["default"] for d in dirs}
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Results: pretrained models") :]
    assert section.startswith(report.readme_section(results, times) + "\n")


POWER_ITERATION_RESULTS = REPO / "experiments/power_iteration/results"


def test_committed_power_iteration_results_are_their_summary_rendered():
    """The checks give the committed verdicts again; the template gives report.md byte for byte, and the
    README's power-iteration section starts where its heading is and ends where the next section starts."""
    from attnjax.serialization import json_form
    from experiments.power_iteration import checks, report

    summary = json.loads((POWER_ITERATION_RESULTS / "summary.json").read_text())
    assert json_form(checks.predictions(summary)) == summary["predictions"]
    assert report.markdown(summary) == (POWER_ITERATION_RESULTS / "report.md").read_text()
    assert sorted(p.name for p in (POWER_ITERATION_RESULTS / "plots").iterdir()) == summary["plots"]
    times = json.loads((POWER_ITERATION_RESULTS / "timing.json").read_text())
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Results: power iteration") :]
    rendered = report.readme_section(summary, times) + "\n"
    assert section.startswith(rendered) and section[len(rendered) :].startswith(("## ", "<!--"))
