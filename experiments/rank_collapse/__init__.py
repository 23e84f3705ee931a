"""Rank collapse across depth (Dong et al. 2021, Noci et al. 2022, Wu et al. 2024).

`study.py` declares and measures the runs (`layernorm.py`: Wu et al.'s
LayerNorm dynamics on constructed weights; beside a run, `scaling.py`: Dong
et al.'s eps-scaling identity of every layer, `chain.py`: the exact uniform
causal chain, `recall.py`: the mode-of-context baseline of associative
recall); `summary.py` turns their rows into
one dict holding every number (the raw aggregate, then its sections derived
from it); `checks.py` holds the literature checks, `figures.py` the plots, and
`report.py` renders `templates/` (report and README section) over
`context.py`'s cells: these read the summary and compute nothing
(`constants.py`: the names and thresholds both sides share). Every row is
one of five kinds (prediction, replication, hypothesis, sanity, not
applicable) and names the source of its threshold.
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
