"""Why attention logits are scaled by 1/sqrt(d_k): variance, saturation, the softmax Jacobian.

`study.py` declares and measures the runs; `report.py` summarises them, checks
the predictions and writes the report and figures.
"""
from attnjax.study import Study
from experiments.softmax_scaling import report, study

STUDY = Study(name="softmax_scaling", specs=study.specs, run_one=study.run_one, summarize=report.summarize,
              predictions=report.predictions, figures=report.figures, report=report.markdown)
