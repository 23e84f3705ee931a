"""Attention sinks at long context on SmolLM2-135M-Instruct Q4_1: statistics up to 8k tokens, StreamingLLM's comparison,
and the causal role of the first token.

`text.py` assembles the text; `study.py` declares and measures the runs;
`summary.py` turns their rows into one dict of numbers with intervals over
text segments, `checks.py` gives each prediction its verdict, `figures.py`
draws the plots and `report.py` renders `templates/report.md.j2`.
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
