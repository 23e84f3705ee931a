"""Attention as power iteration: fixed matrices, products across depth, self-attention dynamics.

`study.py` declares and measures the runs (`dynamics.py`: the parameter-free
self-attention of the `clusters` runs); `summary.py` turns their rows into one
dict holding every number (the raw aggregate, then what is derived from it);
`checks.py` gives each prediction its verdict, `figures.py` draws the plots,
and `report.py` renders `templates/report.md.j2` over `context.py`'s
selection of the summary: these read the summary and compute nothing
(`constants.py`: the names and thresholds both sides share).
"""

from experiments.lab.study import Study
from experiments.power_iteration import checks, figures, report, study, summary

STUDY = Study(
    name="power_iteration",
    specs=study.specs,
    run_one=study.run_one,
    summarize=summary.summarize,
    predictions=checks.predictions,
    figures=figures.figures,
    report=report.markdown,
)
