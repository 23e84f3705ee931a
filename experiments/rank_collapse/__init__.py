"""Rank collapse across depth (Dong et al. 2021, Noci et al. 2022).

`study.py` declares and measures the runs; `report.py` summarises them, checks
the predictions and writes the report and figures.
"""
from attnjax.study import Study
from experiments.rank_collapse import report, study

STUDY = Study(name="rank_collapse", specs=study.specs, run_one=study.run_one, summarize=report.summarize,
              predictions=report.predictions, figures=report.figures, report=report.markdown)
