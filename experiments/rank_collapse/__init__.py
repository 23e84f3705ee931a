"""Rank collapse across depth (Dong et al. 2021, Noci et al. 2022, Wu et al. 2024).

`study.py` declares and measures the runs; `summary.py` turns their rows into
one dict of numbers (and names the selections read from it), `checks.py`
holds the literature checks, `layernorm.py` Wu et al.'s LayerNorm dynamics on
constructed weights, `figures.py` the plots, and `report.py` renders
`templates/` (report and README section) over the summary.
"""

from experiments.lab.study import Study
from experiments.rank_collapse import checks, figures, report, study, summary

STUDY = Study(
    name="rank_collapse",
    specs=study.specs,
    run_one=study.run_one,
    summarize=summary.summarize,
    predictions=checks.predictions,
    figures=figures.figures,
    report=report.markdown,
)
