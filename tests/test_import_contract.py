"""Imports run one way (the house's layers, read from the source with `ast`, nothing imported):

* the library, `attnjax`, never imports `experiments`, `configs` or `tests`;
* the lab, `experiments/lab`, never imports a study;
* no study imports another study;
* a library test (`tests/attnjax/`) never imports `experiments` or `configs`.

A study is a folder of `experiments/` with an `__init__.py` other than `lab`.
"""

import ast
from pathlib import Path

import pytest

from tests.paths import REPO

EXPERIMENTS = REPO / "experiments"
STUDIES = sorted(
    p.name for p in EXPERIMENTS.iterdir() if (p / "__init__.py").exists() and p.name != "lab"
)


def imported_modules(source: str, package: tuple[str, ...]) -> set[str]:
    """Every module `source` imports, absolute and dotted (`from experiments.lab import cli` gives
    `experiments.lab` and `experiments.lab.cli`); relative imports are resolved against `package`
    (the dotted package the source sits in, as a tuple of names)."""
    tree = ast.parse(source)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = ".".join(package[: len(package) - node.level + 1])
                base = f"{prefix}.{base}" if base else prefix
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def violations(files, forbidden) -> list[str]:
    """`file: module` for each import of a module under one of the `forbidden` prefixes."""
    found = []
    for path in files:
        package = path.relative_to(REPO).parts[:-1]
        for name in sorted(imported_modules(path.read_text(), package)):
            if any(name == f or name.startswith(f + ".") for f in forbidden(path)):
                found.append(f"{path.relative_to(REPO)}: {name}")
    return found


def python_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def test_there_are_studies_and_a_lab():
    assert {"rank_collapse", "power_iteration", "softmax_scaling"} <= set(STUDIES)
    assert (EXPERIMENTS / "lab" / "study.py").exists()


def test_the_library_never_imports_the_lab_the_configs_or_the_tests():
    bad = violations(python_files(REPO / "attnjax"), lambda _: ("experiments", "configs", "tests"))
    assert not bad, bad


def test_the_lab_never_imports_a_study():
    studies = tuple(f"experiments.{s}" for s in STUDIES)
    bad = violations(python_files(EXPERIMENTS / "lab"), lambda _: studies)
    assert not bad, bad


@pytest.mark.parametrize("study", STUDIES)
def test_no_study_imports_another(study):
    others = tuple(f"experiments.{s}" for s in STUDIES if s != study)
    bad = violations(python_files(EXPERIMENTS / study), lambda _: others)
    assert not bad, bad


def test_library_tests_never_import_experiments_or_configs():
    bad = violations(
        python_files(REPO / "tests" / "attnjax"),
        lambda _: ("experiments", "configs", "tests.experiments"),
    )
    assert not bad, bad


def test_the_checker_sees_every_kind_of_import():
    """The scan catches plain, from- and relative imports (so a violation cannot hide in one)."""
    source = (
        "import experiments.rank_collapse\n"
        "from experiments import power_iteration\n"
        "from ..softmax_scaling import summary\n"
    )
    names = imported_modules(source, ("experiments", "lab"))
    assert {
        "experiments.rank_collapse",
        "experiments.power_iteration",
        "experiments.softmax_scaling.summary",
    } <= names
