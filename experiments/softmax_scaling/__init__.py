"""Why attention logits are scaled by 1/sqrt(d_k): variance, saturation, the softmax Jacobian.

`study.py` declares and measures the runs; `summary.py` turns their rows into
one dict of measurements and outcomes, `checks.py` states the predictions,
`figures.py` draws them, and `report.py` renders `templates/report.md.j2`.
"""

from experiments.lab.study import Study
from experiments.softmax_scaling import checks, figures, report, study, summary

STUDY = Study(
    name="softmax_scaling",
    specs=study.specs,
    run_one=study.run_one,
    summarize=summary.summarize,
    predictions=checks.predictions,
    figures=figures.figures,
    report=report.markdown,
)
