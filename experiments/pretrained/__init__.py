"""Real pretrained attention across depth: all-MiniLM-L6-v2 (bidirectional), SmolLM2-135M-Instruct Q4_1 and
Gemma 3 270M Q4_K_M (causal).

`study.py` declares and measures the runs (`paths.py`: the single-head paths);
`summary.py` turns their rows into one dict of every number (`readings.py` and
`activations.py`: the numbers of the papers' claims), `checks.py` gives each
row its kind and verdict, `figures.py` draws the plots, and `report.py` renders
`templates/` (the report and the README section) over `context.py`, which
formats the summary's numbers; `constants.py` holds the thresholds and labels.
"""

from experiments.lab.study import Study
from experiments.pretrained import checks, figures, report, study, summary

STUDY = Study(
    name="pretrained",
    specs=study.specs,
    run_one=study.run_one,
    summarize=summary.summarize,
    predictions=checks.predictions,
    figures=figures.figures,
    report=report.markdown,
)
