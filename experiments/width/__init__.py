"""Rank collapse in width (Naderi, Nait Saada and Tanner 2025): the spectral gap of attention maps at
initialisation as the context grows, and the paper's fix.

`study.py` declares and measures the runs; `summary.py` turns their rows into
one dict of measurements and outcomes, `checks.py` states the rows,
`figures.py` draws them, and `report.py` renders `templates/report.md.j2`.
"""

from experiments.lab.study import Study
from experiments.width import checks, figures, report, study, summary

STUDY = Study(
    name="width",
    specs=study.specs,
    run_one=study.run_one,
    summarize=summary.summarize,
    predictions=checks.predictions,
    figures=figures.figures,
    report=report.markdown,
)
