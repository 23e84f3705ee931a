"""A study computes its numbers once: `summary.py` turns rows into every number, and the
three consumers of the summary (checks, figures, the report with its template context)
only read it.

Read from the source with `ast`: a consumer module (`checks.py`, `figures.py`,
`report.py`, `context.py`) of a study imports, from its own study, only other consumers
and the study's `constants.py` (names and thresholds, no computation), never its run
code (`study.py`, `summary.py` and the measuring modules beside them).
"""

import pytest

from tests.paths import REPO
from tests.test_import_contract import STUDIES, imported_modules

CONSUMERS = ("checks", "figures", "report", "context")
ALLOWED = (*CONSUMERS, "constants")


def own_imports(study: str, module: str) -> set[str]:
    """The modules of `experiments.<study>` that `experiments/<study>/<module>.py` imports."""
    path = REPO / "experiments" / study / f"{module}.py"
    names = imported_modules(path.read_text(), ("experiments", study))
    prefix = f"experiments.{study}."
    return {n[len(prefix) :].split(".")[0] for n in names if n.startswith(prefix)}


CASES = [
    (study, module)
    for study in STUDIES
    for module in CONSUMERS
    if (REPO / "experiments" / study / f"{module}.py").exists()
]


@pytest.mark.parametrize("study,module", CASES)
def test_a_consumer_imports_no_run_code_of_its_study(study, module):
    run_code = sorted(own_imports(study, module) - set(ALLOWED))
    assert not run_code, f"experiments/{study}/{module}.py imports {run_code}"
