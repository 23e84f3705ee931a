"""Attention spectra of a pretrained causal LM at length: per layer and head, sigma_1, sigma_2 and |lambda_2|
of the attention map at 2k-8k tokens of text, beside the mass on the first token and the rows' entropy,
computed without the T x T matrix (`attnjax.nn.attention_spectra`).

`study.py` declares and measures the runs; `summary.py` turns their rows into
statistics, `checks.py` states the rows, `figures.py` draws them, and
`report.py` renders `templates/report.md.j2`.
"""

from experiments.lab.study import Study
from experiments.spectra import checks, figures, report, study, summary

STUDY = Study(
    name="spectra",
    specs=study.specs,
    run_one=study.run_one,
    summarize=summary.summarize,
    predictions=checks.predictions,
    figures=figures.figures,
    report=report.markdown,
)
