"""Attention sinks at long context on a causal LM (SmolLM2-135M-Instruct Q4_1, Gemma 3 270M Q4_K_M):
statistics up to 8k tokens, StreamingLLM's caches against their baselines, and the sink's interventions.

`text.py` assembles the text and `model.py` the checkpoint and its segments;
`study.py` declares and measures the runs (`streaming.py`: the caches and
baselines; `interventions.py`: the edits); `summary.py` turns their rows into
one dict of numbers with intervals over text segments, `checks.py` gives each
row its kind and verdict, `figures.py` draws the plots and `report.py`
renders the templates.
"""

from experiments.lab.study import Study
from experiments.long_context import checks, figures, report, study, summary

STUDY = Study(
    name="long_context",
    specs=study.specs,
    run_one=study.run_one,
    summarize=summary.summarize,
    predictions=checks.predictions,
    figures=figures.figures,
    report=report.markdown,
)
