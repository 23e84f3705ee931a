"""Attention as power iteration: fixed matrices, products across depth, self-attention dynamics.

`study.py` declares and measures the runs; `report.py` summarises them, checks
the predictions and writes the report and figures.
"""
from attnjax.study import Study
from experiments.power_iteration import report, study

STUDY = Study(name="power_iteration", specs=study.specs, run_one=study.run_one, summarize=report.summarize,
              predictions=report.predictions, figures=report.figures, report=report.markdown)
