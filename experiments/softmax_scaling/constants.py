"""The softmax-scaling study's names: the two scalings of the logits and the saturation statistics."""

SCALINGS = ("unscaled", "scaled")
STATS = ("max_weight", "entropy", "jacobian_spectral", "jacobian_frobenius")
# Protocol (SCIENCE.md, "Intervals over independent units"): a verdict needs at least this many
# seeds; with fewer, the row is not measured.
MIN_UNITS = 10
# The d_k of Vaswani et al. 2017's base model (d_model / h = 512 / 8, Table 3): the report quotes the
# unscaled and scaled gradient shares there when the run's widths include it.
PAPER_D_K = 64
