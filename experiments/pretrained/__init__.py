"""Real pretrained attention across depth: all-MiniLM-L6-v2 (bidirectional) and SmolLM2-135M (causal).

`study.py` declares and measures the runs; `report.py` summarises them, checks
the predictions and writes the report and figures.
"""
from attnjax.study import Study
from experiments.pretrained import report, study

STUDY = Study(name="pretrained", specs=study.specs, run_one=study.run_one, summarize=report.summarize,
              predictions=report.predictions, figures=report.figures, report=report.markdown)
